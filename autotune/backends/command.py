"""The ``command`` backend: measure a configuration by running a command on a real cluster.

The command is a template filled from the configuration, run locally (``bash -c``) or through a
scheduler (``srun ...``, ``sbatch --wait ...``). It must print one JSON line with the measured
step time, ``{"iteration_time_s": 12.3}`` (``step_time_s`` is accepted too; other keys go to the
measurement's extras); the last such line wins. A non-zero exit, a timeout, or output without
that line makes the trial fail with the reason (the command's last stderr line).

Template fields: every configuration field (``{tp}``, ``{pp}``, ``{placement}``, ...), the
scenario's ``{n_gpus}``, ``{global_batch_seqs}``, ``{seq_len}``, ``{model}``, and the torchtitan
names of ``backends/torchtitan.py`` (``{torchtitan_args}`` is all of them as command-line options). The whole
configuration is also in the environment as ``AUTOTUNE_CONFIG_JSON``.

What reaches the shell. The filled template is run as ``SHELL -c TEMPLATE`` (``shell=bash`` by
default; a POSIX shell: sh, bash, dash, ksh, mksh or zsh). Each field's value is quoted for the
place it sits in: a bare field becomes one shell word (``shlex.quote``), a field inside "..." or
'...' is escaped for that quoting, ``{torchtitan_args}`` is a series of quoted options and must
stand bare. A value must also consist of letters, digits, spaces and ``. _ + - / : , = @ ( ) %``
(model names are restricted to these when the scenario is validated); a value with anything
else fails its trial without running anything. Templates that put a field where no quoting
protects it (inside backticks, ``${...}``, ``$((...))``, ``$'...'``, a here-document, right
after a backslash or a ``$``) are refused before the first trial, as are templates that are not
valid shell (``SHELL -n``), unknown fields and format errors: one line, exit code 2.

The command runs in its own process group. On a timeout, when its main process exits (after a
short drain of its output), when a later measurement starts while it still runs (the study's
``--trial-timeout`` gave up on it), and when the study exits (normally, Ctrl-C, SIGTERM or
SIGHUP), the whole group gets SIGTERM, then SIGKILL after ``kill_grace_s`` (default 5 s). A
command that leaves its process group (``setsid``, a scheduler's own daemons) is beyond reach.
Output is read as it comes: the last 256 KiB of each stream and the last result line are kept,
whatever the command prints (lines over 1 MiB are not considered for the result).

The ``{torchtitan_args}`` field and the torchtitan names: ``backends/torchtitan.py`` (its mapping table).
"""
from __future__ import annotations

import math
import os
import shlex
import shutil
import string
import subprocess
import time

from ..errors import UserInputError
from ..specs.config import Config
from . import Measurement
from . import command_process as P
from .command_process import _LIVE, _LIVE_LOCK, _install_signal_handlers, _pump, _Sink, stop_group
from .torchtitan import TORCHTITAN_OPTIONS, torchtitan_args, torchtitan_fields

SCENARIO_FIELDS = ("n_gpus", "global_batch_seqs", "seq_len", "model")
POSIX_SHELLS = ("sh", "bash", "dash", "ksh", "mksh", "zsh")
SAFE_VALUE_CHARS: frozenset | None = frozenset(string.ascii_letters + string.digits + " ._+-/:,=@()%")
"""Characters a field's value may have: none of them starts an expansion or ends a quoted
string in any of the places a field may sit. ``None`` leaves quoting as the only defence (tests)."""


# ------------------------------------------------------------------ the template
class TemplateError(ValueError):
    """A template that cannot be filled safely (the message says why)."""


def _sample_fields() -> dict:
    """Values of the right types, to try a template before any trial."""
    out = dict(Config().model_dump()) | {"n_gpus": 8, "global_batch_seqs": 64, "seq_len": 4096,
                                         "model": "llama3-8b", "torchtitan_args": "--x=1"}
    out |= {k.split(".")[-1]: 1 for k in TORCHTITAN_OPTIONS}
    out |= {"pipeline_parallel_schedule": "1F1B", "mode": "none"}
    return out


# Quoting contexts of the shell language, as far as a field's quoting depends on them.
_PLAIN, _SUBST, _DOUBLE, _SINGLE, _ANSI, _BACKTICK, _PARAM, _ARITH, _COMMENT = range(9)
_WHERE = {_ANSI: "inside $'...'", _BACKTICK: "inside backticks (use $(...))", _PARAM: "inside ${...}",
          _ARITH: "inside an arithmetic expression"}
_WORD_BREAK = set(" \t\n;&|()<>")


class _Scanner:
    """Follows the quoting context of the literal text of a template, so that each field can be
    quoted for the place it sits in. Errs on the side of refusing a template."""

    def __init__(self):
        self.stack = [_PLAIN]
        self.depth = [0]            # parentheses or braces open in each context
        self.escaped = False        # the last character was an unescaped backslash
        self.prev = ""              # the last character seen (for word starts and '$')
        self.heredoc = False

    @property
    def ctx(self) -> int:
        return self.stack[-1]

    def push(self, ctx: int, depth: int = 0):
        self.stack.append(ctx)
        self.depth.append(depth)

    def pop(self):
        if len(self.stack) > 1:
            self.stack.pop()
            self.depth.pop()

    def feed(self, text: str) -> None:
        i = 0
        while i < len(text):
            c, nxt = text[i], text[i + 1: i + 2]
            ctx = self.ctx
            if self.heredoc:        # the rest is a here-document's body or after it: not followed
                return
            if self.escaped:
                self.escaped = False
            elif ctx == _SINGLE:
                if c == "'":
                    self.pop()
            elif ctx == _COMMENT:
                if c == "\n":
                    self.pop()
            elif c == "\\":
                self.escaped = True
            elif ctx == _ANSI:
                if c == "'":
                    self.pop()
            elif ctx == _BACKTICK:
                if c == "`":
                    self.pop()
            elif ctx == _ARITH or ctx == _PARAM:
                opening, closing = ("(", ")") if ctx == _ARITH else ("{", "}")
                if c == opening:
                    self.depth[-1] += 1
                elif c == closing:
                    self.depth[-1] -= 1
                    if self.depth[-1] <= 0:
                        self.pop()
            else:                   # _PLAIN, _SUBST, _DOUBLE
                if c == "$" and nxt == "(" and text[i + 2: i + 3] == "(":
                    self.push(_ARITH, 2)
                    i += 3
                    self.prev = "("
                    continue
                if c == "$" and nxt == "(":
                    self.push(_SUBST)
                    i += 2
                    self.prev = "("
                    continue
                if c == "$" and nxt == "{":
                    self.push(_PARAM, 1)
                    i += 2
                    self.prev = "{"
                    continue
                if c == "`":
                    self.push(_BACKTICK)
                elif ctx == _DOUBLE:
                    if c == '"':
                        self.pop()
                elif c == "$" and nxt == "'":
                    self.push(_ANSI)
                    i += 2
                    self.prev = "'"
                    continue
                elif c == "'":
                    self.push(_SINGLE)
                elif c == '"':
                    self.push(_DOUBLE)
                elif c == "#" and (self.prev == "" or self.prev in _WORD_BREAK):
                    self.push(_COMMENT)
                elif c == "(" and nxt == "(" and (self.prev == "" or self.prev in _WORD_BREAK):
                    self.push(_ARITH, 2)
                    i += 2
                    self.prev = "("
                    continue
                elif c == "<" and nxt == "<" and text[i + 2: i + 3] != "<" and self.prev != "<":
                    self.heredoc = True
                elif ctx == _SUBST and c == "(":
                    self.depth[-1] += 1
                elif ctx == _SUBST and c == ")":
                    if self.depth[-1] == 0:
                        self.pop()
                    else:
                        self.depth[-1] -= 1
            self.prev = c
            i += 1

    def quote(self, name: str, value: str) -> str:
        """``value`` quoted for the current context, or TemplateError."""
        where = f"field {{{name}}}"
        if self.heredoc:
            raise TemplateError(f"{where} after a here-document (<<): its body is not quoted")
        if self.escaped:
            raise TemplateError(f"{where} right after a backslash")
        if self.prev == "$" and self.ctx in (_PLAIN, _SUBST, _DOUBLE):
            raise TemplateError(f"{where} right after a '$'")
        ctx = self.ctx
        if ctx in _WHERE:
            raise TemplateError(f"{where} {_WHERE[ctx]}, where no quoting protects it")
        if name == "torchtitan_args":
            if ctx not in (_PLAIN, _SUBST):
                raise TemplateError(f"{where} inside quotes: it is several options, already quoted")
            out = value
        elif ctx == _SINGLE:
            out = value.replace("'", "'\\''")
        elif ctx == _DOUBLE:
            out = "".join("\\" + ch if ch in '\\$`"' else ch for ch in value)
        else:
            if ctx == _COMMENT and ("\n" in value or "\r" in value):
                raise ValueError(f"field {{{name}}} has a line break and sits in a # comment")
            out = shlex.quote(value)
        self.prev = "x"
        return out


_FORMATTER = string.Formatter()


def fill(template: str, fields: dict, check_values: bool = True) -> str:
    """The template with every field quoted for its place. TemplateError for a template that
    cannot be filled safely (whatever the values); ValueError for a value that may not reach a
    shell."""
    try:
        parts = list(_FORMATTER.parse(template))
    except ValueError as e:
        raise TemplateError(f"{e} (write {{{{ and }}}} for literal braces)") from None
    sc = _Scanner()
    out = []
    for literal, name, spec, conversion in parts:
        out.append(literal)
        sc.feed(literal)
        if name is None:
            continue
        if name == "" or name.isdigit():
            raise TemplateError("positional fields ({} or {0}): name the field, e.g. {tp}")
        if name not in fields:
            raise TemplateError(f"unknown field {{{name}}}; fields: {', '.join(sorted(fields))}")
        if spec and ("{" in spec or "}" in spec):
            raise TemplateError(f"a field inside the format of {{{name}}}")
        value = fields[name]
        try:
            if conversion:
                value = _FORMATTER.convert_field(value, conversion)
            text = format(value, spec or "")
        except (ValueError, TypeError) as e:
            raise TemplateError(f"field {{{name}:{spec}}}: {e}") from None
        if check_values and SAFE_VALUE_CHARS is not None and name != "torchtitan_args":
            bad = sorted({ch for ch in text if ch not in SAFE_VALUE_CHARS})
            if bad:
                raise ValueError(f"field {{{name}}} = {text[:80]!r} has characters that may not reach a shell "
                                 f"({''.join(bad)!r}); allowed: letters, digits, spaces and . _ + - / : , = @ ( ) %")
        out.append(sc.quote(name, text))
    return "".join(out)


def _seconds(option: str, value, allowed: str, zero_ok: bool) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise UserInputError(f"--backend-option {option}", value, allowed) from None
    if not math.isfinite(x) or x < 0 or (x == 0 and not zero_ok):
        raise UserInputError(f"--backend-option {option}", value, allowed)
    return x


def _shell(value) -> str:
    allowed = "a POSIX shell (" + ", ".join(POSIX_SHELLS) + ") by name on PATH or by path; the template runs as SHELL -c"
    name = str(value or "").strip()
    path = shutil.which(name) if name else None
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise UserInputError("--backend-option shell", value, allowed)
    if os.path.basename(os.path.realpath(path)) not in POSIX_SHELLS and os.path.basename(path) not in POSIX_SHELLS:
        raise UserInputError("--backend-option shell", value, allowed)
    return path


class CommandBackend:
    """Run ``template`` (filled from the configuration) and parse its JSON step-time line."""

    name = "command"

    def __init__(self, template: str | None = None, timeout_s: float | str = 3600.0, shell: str = "bash",
                 kill_grace_s: float | str = 5.0):
        """Every option is checked here, before the first trial (UserInputError: exit code 2)."""
        self.timeout_s = _seconds("timeout_s", timeout_s, "a positive, finite number of seconds", zero_ok=False)
        self.kill_grace_s = _seconds("kill_grace_s", kill_grace_s, "a finite number of seconds >= 0", zero_ok=True)
        self.shell = _shell(shell)
        example = "e.g. template='srun ./train.sh {torchtitan_args}'"
        if not isinstance(template, str) or not template.strip():
            raise UserInputError("--backend-option template", template, f"a command template, {example}")
        self.template = template
        try:
            sample = fill(template, _sample_fields())
        except ValueError as e:
            raise UserInputError("--backend-option template", template, f"a template autotune can fill safely: {e}") \
                from None
        try:
            r = subprocess.run([self.shell, "-n", "-c", sample], capture_output=True, text=True, timeout=30,
                               stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise UserInputError("--backend-option shell", shell, f"a shell that runs ({type(e).__name__})") from None
        if r.returncode != 0:
            why = " ".join((r.stderr.strip().splitlines() or ["syntax error"])[-1:])[:200]
            raise UserInputError("--backend-option template", template, f"valid {os.path.basename(self.shell)} syntax ({why})")
        self._running: subprocess.Popen | None = None
        _install_signal_handlers()

    def fields(self, scenario, config) -> dict:
        try:
            tt = torchtitan_fields(scenario, config)
        except (KeyError, TypeError, ZeroDivisionError) as e:
            raise ValueError(f"no torchtitan value for this configuration ({type(e).__name__}: {e})") from None
        fields = dict(config.model_dump()) | {
            "n_gpus": scenario.n_gpus, "global_batch_seqs": scenario.global_batch_seqs,
            "seq_len": scenario.seq_len, "model": scenario.model.name}
        for k, v in tt.items():
            _check_value(k, str(v))
        fields["torchtitan_args"] = " ".join(shlex.quote(a) for a in torchtitan_args(scenario, config))
        fields |= {k.split(".")[-1]: v for k, v in tt.items()}
        return fields

    def render(self, scenario, config) -> str:
        """The command line of one configuration; ValueError if a value may not reach the shell."""
        return fill(self.template, self.fields(scenario, config))

    def measure(self, scenario, config) -> Measurement:
        try:
            cmd = self.render(scenario, config)
        except ValueError as e:
            return Measurement.failure(f"command not run: {e}")
        previous = self._running
        if previous is not None and previous.poll() is None:
            # measurements are sequential: one still running was given up on by its caller
            stop_group(previous, self.kill_grace_s)
        env = dict(os.environ, AUTOTUNE_CONFIG_JSON=config.model_dump_json())
        t0 = time.perf_counter()
        with _LIVE_LOCK:
            if P._CLOSING:
                return Measurement.failure("command not run: the study is exiting")
            proc = subprocess.Popen([self.shell, "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env=env, start_new_session=True)
            _LIVE[proc.pid] = (proc, self.kill_grace_s)
        self._running = proc
        out, err = _Sink(want_result=True), _Sink(want_result=False)
        try:
            finished = _pump(proc, out, err, time.monotonic() + self.timeout_s)
        finally:
            stop_group(proc, self.kill_grace_s)      # nothing the command started outlives the trial
            with _LIVE_LOCK:
                _LIVE.pop(proc.pid, None)
        if not finished:
            return Measurement.failure(f"command timed out after {self.timeout_s:g} s")
        last_err = (err.text().strip().splitlines() or [""])[-1][:300]
        if proc.returncode != 0:
            why = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
            return Measurement.failure(f"command failed ({why}): {last_err}".rstrip(": "))
        d = out.result
        if d is None:
            return Measurement.failure("command printed no JSON line with iteration_time_s"
                                       + (f" (stderr: {last_err})" if last_err else ""))
        t = d.get("iteration_time_s", d.get("step_time_s"))
        if isinstance(t, bool) or not isinstance(t, (int, float, str)):
            return Measurement.failure(f"command reported a non-numeric step time: {t!r}")
        try:
            t = float(t)
        except (TypeError, ValueError):
            return Measurement.failure(f"command reported a non-numeric step time: {t!r}")
        if not isinstance(d.get("feasible", True), bool):        # bool("false") is True
            return Measurement.failure(f"command reported feasible={d.get('feasible')!r}, not JSON true or false")
        breakdown = d.get("breakdown") if isinstance(d.get("breakdown"), dict) else {}
        extra = {k: v for k, v in d.items() if k not in ("iteration_time_s", "step_time_s", "breakdown")}
        extra["wall_s"] = time.perf_counter() - t0
        return Measurement(iteration_time_s=t, feasible=bool(d.get("feasible", True)) and math.isfinite(t),
                           reason=str(d.get("reason", "")), breakdown=breakdown, extra=extra).checked()


def _check_value(name: str, text: str) -> None:
    if SAFE_VALUE_CHARS is not None and any(ch not in SAFE_VALUE_CHARS for ch in text):
        raise ValueError(f"torchtitan value {name} = {text[:80]!r} has characters that may not reach a shell")

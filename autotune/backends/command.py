"""The ``command`` backend: measure a configuration by running a command on a real cluster.

The command is a template filled from the configuration, run locally (``bash -c``) or through a
scheduler (``srun ...``, ``sbatch --wait ...``). It must print one JSON line with the measured
step time, ``{"iteration_time_s": 12.3}`` (``step_time_s`` is accepted too; other keys go to the
measurement's extras); the last such line wins. A non-zero exit, a timeout, or output without
that line makes the trial fail with the reason (the command's last stderr line).

Template fields: every configuration field (``{tp}``, ``{pp}``, ``{placement}``, ...), the
scenario's ``{n_gpus}``, ``{global_batch_seqs}``, ``{seq_len}``, ``{model}``, and the torchtitan
names below (``{torchtitan_args}`` is all of them as command-line options). The whole
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

Mapping to torchtitan 0.3.0 (the PyPI release; ``torchtitan/config/configs.py``, options given
as ``--section.field=value`` after its ``--module`` / ``--config``):

=================================================  ===============================================
torchtitan option                                  from the configuration
=================================================  ===============================================
``--parallelism.tensor_parallel_degree``           tp
``--parallelism.context_parallel_degree``          cp
``--parallelism.expert_parallel_degree``           ep
``--parallelism.pipeline_parallel_degree``         pp
``--parallelism.data_parallel_shard_degree``       dp for fsdp/zero1; dp / buildings spanned for hsdp; 1 for ddp
``--parallelism.data_parallel_replicate_degree``   1 for fsdp/zero1; buildings spanned for hsdp; dp for ddp
``--parallelism.pipeline_parallel_schedule``       PyTorch schedule class name (``Interleaved1F1B``, ...)
``--parallelism.pipeline_parallel_microbatch_size``  micro_batch
``--parallelism.fsdp_reshard_after_forward``       fsdp / hsdp: always, or never where the workload's
                                                   regather policy is never; zero1: never
``--training.local_batch_size``                    pp > 1: global batch / dp (cut into micro-batches);
                                                   pp = 1: micro_batch (gradients accumulate to the global batch)
``--training.global_batch_size``, ``--training.seq_len``   the scenario's
``--parallelism.pipeline_parallel_layers_per_stage``  pp_chunks > 2: the layers per virtual stage (with
(and ``..._first/last_stage_less_layers``)           the two weights) that give pp x pp_chunks stages
``--training.disable_cuda_graphs``                 pp > 1 or ep > 1 (torchtitan refuses CUDA graphs there)
``activation-checkpoint:{none,selective,full}``    recompute (a tyro subcommand, last on the line)
=================================================  ===============================================

``tests/test_torchtitan_parser.py`` installs torchtitan 0.3.0 and parses these options with its
own ``ConfigManager``. What the options cannot say is printed as notes (``torchtitan_notes``):
zb1p / zb2p with one stage per rank, and chunk counts no layers-per-stage value gives.

torchtitan has no ZeRO-1 mode of its own (FSDP with ``reshard_after_forward`` never is the
nearest); placement and transport knobs have no torchtitan option: pass them to your launcher
(rank ordering, NCCL environment: ``NCCL_IB_QPS_PER_CONNECTION={xb_queue_pairs}``). A template's
named fields are the last part of each option name (``{tensor_parallel_degree}``, ...) and
``{mode}`` for the recompute setting.
"""
from __future__ import annotations

import atexit
import json
import math
import os
import selectors
import shlex
import shutil
import signal
import string
import subprocess
import threading
import time

from ..errors import UserInputError
from ..specs.config import TORCH_SCHEDULE_NAMES, Config
from . import Measurement

RECOMPUTE_TO_TORCHTITAN = {"none": "none", "selective": "selective", "full": "full"}
TORCHTITAN_OPTIONS = ("parallelism.tensor_parallel_degree", "parallelism.context_parallel_degree",
                      "parallelism.expert_parallel_degree", "parallelism.pipeline_parallel_degree",
                      "parallelism.data_parallel_shard_degree", "parallelism.data_parallel_replicate_degree",
                      "parallelism.pipeline_parallel_schedule", "parallelism.pipeline_parallel_microbatch_size",
                      "activation_checkpoint.mode")
SCENARIO_FIELDS = ("n_gpus", "global_batch_seqs", "seq_len", "model")
POSIX_SHELLS = ("sh", "bash", "dash", "ksh", "mksh", "zsh")
SAFE_VALUE_CHARS: frozenset | None = frozenset(string.ascii_letters + string.digits + " ._+-/:,=@()%")
"""Characters a field's value may have: none of them starts an expansion or ends a quoted
string in any of the places a field may sit. ``None`` leaves quoting as the only defence (tests)."""
TAIL_BYTES = 256 * 1024
"""Bytes of each output stream kept (the end of it)."""
MAX_LINE_BYTES = 1 << 20
"""A longer stdout line is not read as a result line."""
DRAIN_S = 0.5
"""After the command's main process exits, how long its output is still read (a background
child holding the pipe open does not hold the trial)."""


TORCHTITAN_VERSION = "0.3.0"
"""The torchtitan release whose option names ``torchtitan_args`` writes (read from its source)."""
_REGATHER_TO_RESHARD = {"every_pass": "always", "forward": "always", "never": "never"}
"""torchtitan's ``fsdp_reshard_after_forward`` per workload regather policy: "default" would
mean never under pipeline parallelism, so the policies that gather before each forward say so."""


def _dp_buildings(scenario, config) -> int:
    """Buildings the data-parallel group spans under the configuration's placement (the cost
    model's ``terms.building_spans``): HSDP replicates across them."""
    B = scenario.cluster.n_buildings
    if config.placement in ("dp_out", "ep_out", "cp_out"):
        return B
    if config.placement == "hybrid":
        from ..costmodel.scenario_consts import hybrid_split
        return hybrid_split(B)[1] or 1
    return 1


def torchtitan_fields(scenario, config) -> dict:
    """The torchtitan option values of a configuration (see the module docstring)."""
    B = _dp_buildings(scenario, config)
    if config.dp_flavour == "ddp":
        shard, replicate = 1, config.dp
    elif config.dp_flavour == "hsdp":
        replicate = B if config.dp % B == 0 else 1
        shard = config.dp // replicate
    else:
        shard, replicate = config.dp, 1
    sched = TORCH_SCHEDULE_NAMES[config.pp_schedule].removeprefix("Schedule")
    values = (config.tp, config.cp, config.ep, config.pp, shard, replicate, sched, config.micro_batch,
              RECOMPUTE_TO_TORCHTITAN[config.recompute])
    return dict(zip(TORCHTITAN_OPTIONS, values))


def _virtual_stage_fields(n_layers: int, pp: int, chunks: int) -> dict:
    """torchtitan's split into ``pp * chunks`` virtual stages. Without options it runs 2 stages per
    rank for a multi-stage schedule (pipeline_parallel.py: ``stages_per_rank = 2``) and counts
    ``ceil((layers + first_less + last_less) / layers_per_stage)`` stages when
    ``pipeline_parallel_layers_per_stage`` is given; pick the weights (0 or 1 layer's worth for the
    embedding and the output, preferring 0, which is the model's equal split) and the layers per
    stage that give exactly ``pp * chunks``. Empty when the default already does, or when no
    choice does (then the schedule runs torchtitan's default split)."""
    if pp == 1 or chunks == 1 or chunks == 2:
        return {}
    n = pp * chunks
    for first, last in ((0, 0), (1, 0), (0, 1), (1, 1)):
        total = n_layers + first + last
        for lps in range(1, total + 1):
            if -(-total // lps) == n:
                return {"parallelism.pipeline_parallel_first_stage_less_layers": first,
                        "parallelism.pipeline_parallel_last_stage_less_layers": last,
                        "parallelism.pipeline_parallel_layers_per_stage": lps}
    return {}


def torchtitan_notes(scenario, config) -> list[str]:
    """What torchtitan's options cannot say about the configuration (printed with the options)."""
    notes = []
    if config.pp > 1 and config.pp_schedule in ("zb1p", "zb2p") and config.pp_chunks == 1:
        notes.append(f"pp_schedule={config.pp_schedule}: torchtitan runs zero-bubble schedules as "
                     "InterleavedZeroBubble with at least 2 stages per rank (it runs 2 here); one stage per rank, "
                     "as priced, needs torch.distributed.pipelining directly (as autotune/workloads does)")
    if config.pp > 1 and config.pp_chunks > 2 and not _virtual_stage_fields(scenario.model.n_layers, config.pp,
                                                                           config.pp_chunks):
        notes.append(f"{scenario.model.n_layers} layers cannot be cut into {config.pp} x {config.pp_chunks} "
                     "virtual stages with pipeline_parallel_layers_per_stage: set "
                     "parallelism.module_fqns_per_model_part by hand (else torchtitan runs 2 stages per rank)")
    return notes


def torchtitan_args(scenario, config) -> list[str]:
    """torchtitan 0.3.0 command-line options for the configuration and the scenario's batch (the
    module docstring's table); the recompute setting is a subcommand, so it comes last."""
    tt = torchtitan_fields(scenario, config)
    mode = tt.pop("activation_checkpoint.mode")
    if config.dp_flavour in ("fsdp", "hsdp"):
        tt["parallelism.fsdp_reshard_after_forward"] = _REGATHER_TO_RESHARD[scenario.workload.fsdp_regather]
    elif config.dp_flavour == "zero1":
        tt["parallelism.fsdp_reshard_after_forward"] = "never"
    # torchtitan runs local_batch_size sequences per forward and accumulates gradients up to the
    # global batch; under PP the local batch is cut into micro-batches of the microbatch size
    local = scenario.global_batch_seqs // config.dp if config.pp > 1 else config.micro_batch
    tt |= {"training.local_batch_size": local,
           "training.global_batch_size": scenario.global_batch_seqs, "training.seq_len": scenario.seq_len}
    tt |= _virtual_stage_fields(scenario.model.n_layers, config.pp, config.pp_chunks)
    flags = []
    if config.pp > 1 or config.ep > 1:
        # torchtitan 0.3.0's Trainer.Config._validate_cuda_graphs refuses CUDA graphs with pipeline
        # parallelism, and with most expert-parallel token dispatchers; the model prices no CUDA graphs
        flags.append("--training.disable_cuda_graphs")
    return [f"--{k}={v}" for k, v in tt.items()] + flags + [f"activation-checkpoint:{mode}"]


def parse_result(stdout: str) -> dict | None:
    """The last stdout line that is a JSON object with a step time, or None."""
    for line in reversed(stdout.splitlines()):
        d = _result_line(line)
        if d is not None:
            return d
    return None


def _result_line(line: str) -> dict | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        d = json.loads(line)
    except ValueError:
        return None
    return d if isinstance(d, dict) and ("iteration_time_s" in d or "step_time_s" in d) else None


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


# ------------------------------------------------------------------ processes
_LIVE: dict[int, tuple[subprocess.Popen, float]] = {}     # pid -> (process, its grace period)
_LIVE_LOCK = threading.RLock()      # re-entrant: the signal handler may run while its thread holds it
_HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_CLOSING = False


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs. Zombies do not count: an orphan is reaped by
    init, which in some containers takes a second or more."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return not os.path.isdir("/proc/self")      # no /proc: trust kill()


def stop_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the command's whole process group, SIGKILL to what is left after ``grace_s``;
    the main process is reaped."""
    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    end = time.monotonic() + grace_s
    while True:
        proc.poll()                         # reap the leader: a zombie still counts in its group
        if not _group_alive(pgid):
            break
        if time.monotonic() >= end:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            break
        time.sleep(0.02)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def stop_all() -> None:
    """Stop every command still running, and start no more (at exit, on SIGTERM/SIGHUP: a
    measurement thread the study gave up on may still be about to start one)."""
    global _CLOSING
    with _LIVE_LOCK:
        _CLOSING = True
        live = list(_LIVE.values())
        _LIVE.clear()
    for proc, _ in live:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    end = time.monotonic() + min(max([g for _, g in live] or [0.0]), 5.0)
    for proc, _ in live:
        while _group_alive(proc.pid) and time.monotonic() < end:
            proc.poll()
            time.sleep(0.02)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


atexit.register(stop_all)


def _on_signal(signum, frame):
    stop_all()
    signal.signal(signum, signal.SIG_DFL)     # then die of it, as without this handler
    os.kill(os.getpid(), signum)


def _install_signal_handlers() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in _HANDLED_SIGNALS:
        try:
            if signal.getsignal(sig) == signal.SIG_DFL:
                signal.signal(sig, _on_signal)
        except (ValueError, OSError):
            pass


class _Sink:
    """One output stream read as it comes: its last TAIL_BYTES, and (stdout) the last result line."""

    def __init__(self, want_result: bool):
        self.tail = bytearray()
        self.want_result = want_result
        self.partial = bytearray()      # the current, unfinished line
        self.overlong = False           # the current line went past MAX_LINE_BYTES
        self.result: dict | None = None

    def feed(self, chunk: bytes) -> None:
        self.tail += chunk
        if len(self.tail) > TAIL_BYTES:
            del self.tail[: len(self.tail) - TAIL_BYTES]
        if not self.want_result:
            return
        first = chunk.find(b"\n")
        if first < 0:
            self._extend(chunk)
            return
        self._extend(chunk[:first])          # the line that was under way ends here
        self.finish()
        last = chunk.rfind(b"\n")
        if last > first:                     # then whole lines, of which the last result wins
            d = self._last_result(chunk, first + 1, last)
            if d is not None:
                self.result = d
        self._extend(chunk[last + 1:])

    def _extend(self, data: bytes) -> None:
        if self.overlong:
            return
        self.partial += data
        if len(self.partial) > MAX_LINE_BYTES:
            self.partial = bytearray()
            self.overlong = True

    @staticmethod
    def _last_result(buf: bytes, start: int, end: int) -> dict | None:
        """The last result line among the lines of buf[start:end] (separated by newlines)."""
        while end > start:
            brace = buf.rfind(b"{", start, end)
            if brace < 0:
                return None
            nl = buf.rfind(b"\n", start, brace)
            line_start = start if nl < 0 else nl + 1
            nl = buf.find(b"\n", brace, end)
            line_end = end if nl < 0 else nl
            if line_end - line_start <= MAX_LINE_BYTES:
                d = _result_line(buf[line_start:line_end].decode("utf-8", "replace"))
                if d is not None:
                    return d
            end = line_start - 1
        return None

    def finish(self) -> None:
        """The line under way is complete (a newline came, or the stream closed)."""
        if self.want_result and not self.overlong and self.partial:
            d = _result_line(self.partial.decode("utf-8", "replace"))
            if d is not None:
                self.result = d
        self.partial = bytearray()
        self.overlong = False

    def text(self) -> str:
        return self.tail.decode("utf-8", "replace")


def _pump(proc: subprocess.Popen, out: _Sink, err: _Sink, deadline: float) -> bool:
    """Read both streams until they close (or DRAIN_S after the main process exited); False on
    the deadline."""
    sel = selectors.DefaultSelector()
    sinks = {}
    for stream, sink in ((proc.stdout, out), (proc.stderr, err)):
        sel.register(stream, selectors.EVENT_READ)
        sinks[stream.fileno()] = sink
    exited_at = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                return False
            if exited_at is not None and now - exited_at > DRAIN_S:
                break
            for key, _ in sel.select(timeout=min(deadline - now, 0.1)):
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    sinks[key.fd].feed(chunk)
                else:
                    sel.unregister(key.fileobj)
            if exited_at is None and proc.poll() is not None:
                exited_at = time.monotonic()
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            return False
        return True
    finally:
        sel.close()
        out.finish()
        err.finish()
        proc.stdout.close()
        proc.stderr.close()


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
            if _CLOSING:
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
        try:
            t = float(t)
        except (TypeError, ValueError):
            return Measurement.failure(f"command reported a non-numeric step time: {t!r}")
        breakdown = d.get("breakdown") if isinstance(d.get("breakdown"), dict) else {}
        extra = {k: v for k, v in d.items() if k not in ("iteration_time_s", "step_time_s", "breakdown")}
        extra["wall_s"] = time.perf_counter() - t0
        return Measurement(iteration_time_s=t, feasible=bool(d.get("feasible", True)) and math.isfinite(t),
                           reason=str(d.get("reason", "")), breakdown=breakdown, extra=extra).checked()


def _check_value(name: str, text: str) -> None:
    if SAFE_VALUE_CHARS is not None and any(ch not in SAFE_VALUE_CHARS for ch in text):
        raise ValueError(f"torchtitan value {name} = {text[:80]!r} has characters that may not reach a shell")

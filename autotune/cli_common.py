"""What every ``autotune`` command shares: strict number types, the scenario and parameter-file
options, JSON or human output, and the scenario header (``cli.py`` and ``cli_explain.py`` use them)."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import click

from .errors import UserInputError
from .numtext import MAX_INT_DIGITS, MAX_SEED, finite_float_or_none, int_or_none

EXIT_USER_ERROR = 2
EXIT_SERVICE_UNAVAILABLE = 3
EXIT_NO_RESULT = 4   # search ran, but no configuration fits in memory (1 stays a crash's)
EXIT_BROKEN_PIPE = 141   # 128 + SIGPIPE: stdout's reader left (`autotune validate | head`), as a shell reports it


def stdout_closed() -> bool:
    """Whether click met EPIPE on stdout: it then wraps sys.stdout to silence the final flush."""
    return type(sys.stdout).__name__ == "_PacifyFlushWrapper"


class _StrictInt(click.ParamType):
    """An integer written with the ASCII digits 0-9 and an optional sign: Python's int() also
    takes '1_000' and other scripts' digits ('٨'), which a command line must not read as numbers."""
    name = "integer"

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        n = int_or_none(str(value))
        if n is None:
            self.fail(f"got {_short(value)!r}; allowed: an integer written with the digits 0-9 (at most "
                      f"{MAX_INT_DIGITS})", param, ctx)
        return n


class _StrictFloat(click.ParamType):
    """A finite decimal number in ASCII (digits, one point, an exponent); no nan, inf or '1_0'."""
    name = "number"

    def convert(self, value, param, ctx):
        if isinstance(value, float) and math.isfinite(value):
            return value
        v = finite_float_or_none(str(value))
        if v is None:
            self.fail(f"got {_short(value)!r}; allowed: a finite number written with the digits 0-9", param, ctx)
        return v


def _short(value, n: int = 60):
    text = str(value)
    return text if len(text) <= n else text[:n] + f"...({len(text)} characters)"


class _Seed(_StrictInt):
    """A random seed: an integer from 0 to 2**32 - 1 (numpy's and Optuna's range)."""
    name = "seed"

    def convert(self, value, param, ctx):
        v = super().convert(value, param, ctx)
        if not 0 <= v <= MAX_SEED:
            self.fail(f"got {v}; allowed: an integer from 0 to {MAX_SEED}", param, ctx)
        return v


STRICT_INT, STRICT_FLOAT, SEED = _StrictInt(), _StrictFloat(), _Seed()


def _emit(data: dict, as_json: bool, human) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, default=str))
    else:
        human(data)


def remove_unused_out(why: str, out_dir: str | None, created) -> None:
    """Nothing to write: remove the folders ``launch.check_out_dir`` created for --out (``created``,
    the topmost of them; each only while empty) and say so in one line on stderr."""
    if out_dir is not None and created is not None:
        d = Path(out_dir)
        for p in (d, *d.parents):
            try:
                p.rmdir()
            except OSError:        # not empty after all (another writer): leave it and its parents
                break
            if p == created:
                break
    click.echo(f"autotune: {why}" + (f"; nothing written to --out {out_dir}" if out_dir is not None else ""), err=True)


def exit_without_result(why: str, out_dir: str | None, created) -> None:
    """After the report: no configuration fits, so no launch files (``remove_unused_out``); exit
    EXIT_NO_RESULT."""
    remove_unused_out(why, out_dir, created)
    raise click.exceptions.Exit(EXIT_NO_RESULT)


def scenario_options(f):
    """Options shared by every command that needs a scenario."""
    opts = [
        click.option("--model", "model", default=None, help="model preset (e.g. llama3-405b)"),
        click.option("--cluster", "cluster", default=None, help="cluster preset (e.g. campus-5bldg)"),
        click.option("--gpus", type=STRICT_INT, default=None, help="total GPUs, split evenly over buildings"),
        click.option("--global-batch", "global_batch", type=STRICT_INT, default=None, help="sequences per step"),
        click.option("--seq-len", "seq_len", type=STRICT_INT, default=None),
        click.option("--precision", type=click.Choice(["bf16", "fp16", "fp8", "fp32"]), default=None),
        click.option("--scenario", "scenario_file", default=None, help="scenario YAML (model, workload, cluster)"),
        click.option("--set", "overrides", multiple=True, help="dotted override, e.g. cluster.cross_building.loss_rate=1e-5"),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def params_option(f):
    return click.option("--params", "params_file", default=None,
                        help="cost-model parameter file (as `validate --fit --write` writes it); "
                             "default: the shipped calibration")(f)


def _params(path):
    if path is None:
        return None
    from .costmodel.params import load_params_file
    return load_params_file(path)


def _scenario(kw):
    from .specs.presets import build_scenario
    return build_scenario(model=kw.pop("model"), cluster=kw.pop("cluster"), gpus=kw.pop("gpus"),
                          global_batch=kw.pop("global_batch"), seq_len=kw.pop("seq_len"),
                          precision=kw.pop("precision"), scenario_file=kw.pop("scenario_file"),
                          overrides=kw.pop("overrides"))


def _fmt_bytes(b: float) -> str:
    return f"{b / 2**30:.1f} GiB"


def _header(scen) -> dict:
    """What every command reports about its scenario: the summary, the network tiers as the model
    reads them and the effective scenario after every preset, file and --set (JSON)."""
    return {"scenario": scen.summary(), "network": scen.network_lines(),
            "effective_scenario": scen.model_dump(mode="json")}


def _print_header(d: dict) -> None:
    s = d["scenario"]
    plural = "s" if s["buildings"] != 1 else ""
    click.echo(f"scenario: {s['model']} x {s['cluster']}: {s['gpus']:,} GPUs in {s['buildings']} building{plural}, "
               f"batch {s['global_batch_seqs']} x {s['seq_len']} tokens, {s['precision']}")
    for line in d.get("network", []):
        click.echo(f"  {line}")


def _print_evaluation(d: dict) -> None:
    """One evaluated configuration: headline figures, then the breakdown as shares."""
    state = "feasible" if d["feasible"] else f"INFEASIBLE ({d['reason']})"
    click.echo(f"iteration {d['iteration_time_s']:.4f} s   tokens/s {d['tokens_per_s']:,.0f}   "
               f"MFU {100 * d['mfu']:.1f}%   memory {_fmt_bytes(d['memory_per_gpu_bytes'])}/GPU   {state}")
    for k, v in d["breakdown"].items():
        click.echo(f"  {k:<14} {v:10.4f} s  {100 * v / d['iteration_time_s']:5.1f}%")
    tr = d["traffic"]
    click.echo(f"  cross-building bytes per step: {tr['xb_bytes_per_step']:.3e} (per GPU: dp {tr['xb_dp_bytes_per_gpu']:.3e}, "
               f"pp {tr['xb_pp_bytes_per_gpu']:.3e}, ep {tr['xb_ep_bytes_per_gpu']:.3e}, cp {tr['xb_cp_bytes_per_gpu']:.3e}); "
               f"NVLink per GPU {tr['nvlink_bytes_per_gpu']:.3e}")
    ex = d.get("exposure") or {}
    if ex:
        click.echo(f"  DP step-end collectives: link {ex['dp_link_s']:.4f} s, exposed {ex['dp_exposed_s']:.4f} s, "
                   f"hidden {ex['dp_hidden_s']:.4f} s")
    _print_tiers(d.get("tiers") or {})


def tier_summary(table: dict) -> str:
    """One line: exposed (hidden) seconds per network tier the configuration uses."""
    parts = [f"{t} {c['exposed_s']:.4f} s ({c['hidden_s']:.4f} hidden)" for t, c in (table.get("total") or {}).items()
             if any(c.values())]
    return "communication exposed per tier: " + (", ".join(parts) if parts else "none")


def _print_tiers(table: dict) -> None:
    """Time and bytes per network tier and dimension, non-zero cells only (costmodel.tiers)."""
    if not table:
        return
    click.echo("  per network tier, per GPU per step (link: busy; exposed: added to the step; hidden: overlapped):")
    click.echo(f"    {'tier':<15}{'dim':<7}{'bytes':>11}{'link s':>10}{'exposed s':>11}{'hidden s':>10}")
    for tier, tot in table["total"].items():
        if not any(tot.values()):
            continue
        for dim, cells in table.items():
            c = cells[tier]
            if dim != "total" and any(c.values()):
                click.echo(f"    {tier:<15}{dim:<7}{c['bytes_per_gpu']:11.3e}{c['link_s']:10.4f}"
                           f"{c['exposed_s']:11.4f}{c['hidden_s']:10.4f}")
        click.echo(f"    {tier:<15}{'all':<7}{tot['bytes_per_gpu']:11.3e}{tot['link_s']:10.4f}"
                   f"{tot['exposed_s']:11.4f}{tot['hidden_s']:10.4f}")


def _objectives(text):
    """Comma-separated objective names; an empty entry is refused (check_objectives names the rest)."""
    if text is None:
        return None
    names = tuple(o.strip() for o in text.split(","))
    if any(not o for o in names):
        raise UserInputError("--objectives", text, "comma-separated objective names, none empty")
    return names


def given(param: str) -> bool:
    """Whether the running command's option ``param`` (its Python name) was typed on the command
    line or set in the environment, not left at its default: an option that only means something
    with another one is refused alone rather than ignored."""
    import click
    from click.core import ParameterSource
    src = click.get_current_context().get_parameter_source(param)
    return src not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)


def _check_file_target(path: str, option: str, suffixes: tuple = ()) -> None:
    """A file the command will write, checked before any work: in an existing folder that takes a
    new file (probed with a temporary one, removed at once), not a folder, and, where ``suffixes``
    are given, ending in one of them."""
    import tempfile
    p = Path(path)
    if p.is_dir() or not p.parent.is_dir():
        raise UserInputError(option, path, "a file path in an existing folder")
    if suffixes and p.suffix.lower().lstrip(".") not in suffixes:
        raise UserInputError(option, path, "a file ending in ." + ", .".join(suffixes))
    try:
        with tempfile.NamedTemporaryFile(dir=p.parent, prefix=".autotune-probe-"):
            pass
    except OSError as exc:
        raise UserInputError(option, path, f"a file in a writable folder ({exc.strerror})") from None


def _check_image_target(path: str, option: str) -> None:
    """A figure's file path: in a writable folder, ending in a format matplotlib writes."""
    _check_file_target(path, option, IMAGE_FORMATS)


IMAGE_FORMATS = ("png", "pdf", "svg")
"""Figure formats --out writes (matplotlib's Agg, PDF and SVG back ends)."""


MAX_ROBUST_SAMPLES = 256
"""Largest --robust-samples: each sample is one exact search."""
MAX_TRIALS = 10_000_000
"""Largest --trials / --budget: a budget beyond it is a typo, not a study."""
MAX_SEEDS = 1000
"""Largest compare --seeds."""
MAX_JOBS = 1024
"""Largest --jobs: processes beyond the machine's CPUs only add start-up cost."""
MAX_TOP_K = 1000
"""Largest --top: each kept configuration is evaluated again for its breakdown."""
MAX_BENCH_ROWS = 1 << 22
"""Largest --rows of bench: the sampled batch takes about 170 bytes per row (~0.7 GB)."""



def _backend_options(items, option: str = "--backend-option") -> dict:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserInputError(option, item, "key=value")
        out[key.strip()] = value
    return out


def _print_launch(launch: dict) -> None:
    click.echo("  launch: " + " ".join(f"{k}={v}" for k, v in launch["nccl_env"].items()))
    for n in launch["notes"]:
        click.echo(f"          {n}")

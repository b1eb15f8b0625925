"""``autotune search``: the exact optimum (and top K, robust optimum, launch files) of a scenario."""
from __future__ import annotations

import sys

import click

from .cli_common import (MAX_JOBS, MAX_ROBUST_SAMPLES, MAX_TOP_K, SEED, STRICT_INT, _emit, _header, _params,
                         _print_evaluation, _print_header, _print_launch, _scenario, given, params_option,
                         exit_without_result, scenario_options)
from .errors import UserInputError


@click.command()
@scenario_options
@click.option("--top", "top_k", type=STRICT_INT, default=1, show_default=True,
              help="keep the K fastest configurations (exact, ties in enumeration order)")
@click.option("--out", "out_dir", default=None,
              help="folder to write the launch files into: best_config.yaml, torchtitan_args.txt (torchtitan 0.3.0), "
                   "megatron_args.txt, nccl.env, top_k.csv, scenario.yaml")
@click.option("--space", "space_name", type=click.Choice(["default", "full"]), default="default", show_default=True,
              help="knob grid: full opens every transport knob (all NCCL protocols, 2-32 channels, 1-16 MiB "
                   "buffers, DP buckets 0/25/100 MiB; 45x the default)")
@click.option("--workers", type=STRICT_INT, default=None,
              help="processes for the exact search [default: all cores on a space of 67M or more]")
@click.option("--robust", "robust", multiple=True, metavar="RANGE|FILE",
              help="a link field that varies over a run, cluster.<tier>.<field>=LOW..HIGH (e.g. "
                   "cluster.cross_building.loss_rate=1e-6..1e-3), or a YAML file of them: also find the "
                   "configuration with the best expected (or worst-case) time over seeded samples, exactly")
@click.option("--robust-samples", type=STRICT_INT, default=16, show_default=True, help="samples of the ranges")
@click.option("--robust-objective", type=click.Choice(["mean", "worst"]), default="mean", show_default=True)
@click.option("--robust-seed", type=SEED, default=0, show_default=True)
@params_option
@click.option("--json", "as_json", is_flag=True)
def search(top_k, out_dir, space_name, workers, robust, robust_samples, robust_objective, robust_seed, params_file,
           as_json, **kw):
    """Exhaustive search of the whole legal space: the optimum and why (with --robust, also the
    optimum of the expected or worst-case time when a link varies)."""
    from tqdm import tqdm

    from .costmodel import evaluate as evaluate_one
    from .launch import check_out_dir, config_text, launch_summary, write_launch_dir
    from .space import SPACE_PRESETS, SearchSpace
    from .strategies import exhaustive_search
    if not 1 <= top_k <= MAX_TOP_K:
        raise UserInputError("--top", top_k, f"an integer from 1 to {MAX_TOP_K}")
    if workers is not None and not 1 <= workers <= MAX_JOBS:
        raise UserInputError("--workers", workers, f"an integer from 1 to {MAX_JOBS}")
    params = _params(params_file)
    scen = _scenario(kw)
    space = SearchSpace(scen, **SPACE_PRESETS[space_name]).require_legal()
    if top_k > space.legal_count():
        raise UserInputError("--top", top_k, f"at most the legal count of this space ({space.legal_count():,})")
    ranges = None
    for name, value in (("robust_samples", robust_samples), ("robust_objective", robust_objective),
                        ("robust_seed", robust_seed)):
        if given(name) and not robust:
            raise UserInputError("--" + name.replace("_", "-"), value, "only with --robust (it shapes the robust search)")
    if robust:
        from .robust import parse_ranges
        if not 2 <= robust_samples <= MAX_ROBUST_SAMPLES:
            raise UserInputError("--robust-samples", robust_samples, f"an integer from 2 to {MAX_ROBUST_SAMPLES}")
        ranges = parse_ranges(robust, scen)           # every range checked before any work
    created = check_out_dir(out_dir) if out_dir is not None else None
    with tqdm(total=space.legal_count(), unit="cfg", unit_scale=True, disable=as_json or not sys.stderr.isatty(),
              desc="exhaustive") as bar:
        res = exhaustive_search(space, params, progress=bar.update, top_k=top_k, workers=workers)
    top = [(c, evaluate_one(scen, c, params, check=False)) for c, _ in res.top]
    data = _header(scen) | {"legal_count": res.legal_count, "feasible_count": res.feasible_count,
            "elapsed_s": res.elapsed_s, "evaluated_count": res.evaluated_count,
            "pruned_fraction": res.pruned_fraction, "best": top[0][1].to_dict() if top else None,
            "top": [{"rank": i, "config_text": config_text(c), **e.to_dict()} for i, (c, e) in enumerate(top, 1)]}
    if top:
        data["best"]["launch"] = launch_summary(top[0][0], scen, params)
        data["best"]["config_text"] = config_text(top[0][0])
        if out_dir is not None:
            data["files"] = write_launch_dir(out_dir, scen, top, "autotune search " + " ".join(sys.argv[2:]))
    if top:
        from .analysis import leave_slow_out
        alone = leave_slow_out(scen, res.best_iteration_time_s, params, SPACE_PRESETS[space_name])
        if alone is not None:
            data["fastest_buildings_only"] = alone
    if ranges is not None:
        from .robust import robust_search
        from .specs.config import Config
        data["robust"] = robust_search(scen, ranges, robust_samples, robust_objective, robust_seed, params,
                                       space_options=SPACE_PRESETS[space_name])
        data["robust"]["robust_config_text"] = config_text(Config(**data["robust"]["robust_config"]))

    def human(d):
        _print_header(d)
        click.echo(f"searched {d['legal_count']:,} legal configurations ({d['feasible_count']:,} fit in memory) "
                   f"in {d['elapsed_s']:.2f} s; {d['evaluated_count']:,} evaluated in full, "
                   f"{100 * d['pruned_fraction']:.1f}% proved out by memory or the lower bound")
        b = d["best"]
        if b is None:
            click.echo("no configuration fits in memory")
            return
        click.echo(f"best: {b['config_text']}")
        _print_evaluation(b)
        _print_launch(b["launch"])
        if len(d["top"]) > 1:
            click.echo(f"top {len(d['top'])}:")
            for r in d["top"]:
                click.echo(f"  {r['rank']:>3}  {r['iteration_time_s']:.4f} s  {r['config_text']}")
        if "fastest_buildings_only" in d:
            _print_leave_out(d["fastest_buildings_only"], b["iteration_time_s"])
        if "robust" in d:
            _print_robust(d["robust"])
        for f in d.get("files", []):
            click.echo(f"wrote {f}")
    _emit(data, as_json, human)
    if not top:
        exit_without_result("no configuration of this scenario fits in memory", out_dir, created)


def _print_leave_out(r: dict, best_s: float) -> None:
    head = f"fastest buildings alone ({r['buildings']} buildings, {r['gpus']:,} GPUs, same global batch):"
    if r["iteration_time_s"] is None:
        click.echo(f"{head} no legal configuration ({r.get('why_none', 'none fits in memory')})")
        return
    gain = r["every_building_gain_pct"]
    verdict = (f"they take {gain:.1f}% longer than every building" if gain >= 0 else
               f"every building takes {100 * (best_s / r['iteration_time_s'] - 1):.1f}% longer: leave the slow "
               "buildings out")
    from .launch import config_text
    from .specs.config import Config
    click.echo(f"{head} {r['iteration_time_s']:.4f} s; {verdict}")
    click.echo(f"  {config_text(Config(**r['config']))}")


def _print_robust(r: dict) -> None:
    what = "expected" if r["objective"] == "mean" else "worst-case"
    ranges = ", ".join(f"{x['path']} {x['low']:g}..{x['high']:g}" for x in r["ranges"])
    click.echo(f"robust ({what} time over {len(r['samples'])} samples of {ranges}, seed {r['seed']}"
               f"{', exact' if r['exact'] else ', NOT proven exact: top K reached its limit'}):")
    click.echo(f"  robust optimum  {r['robust_s']:.4f} s  {r['robust_config_text']}")
    if r["same_config"]:
        click.echo("  the nominal optimum is also the robust one (regret 0)")
    else:
        click.echo(f"  nominal optimum {r['nominal_s']:.4f} s under the samples ({r['nominal_at_spec_s']:.4f} s at the spec): "
                   f"regret {r['nominal_regret_s']:.4f} s ({r['nominal_regret_pct']:.2f}%)")

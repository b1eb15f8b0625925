"""Headline table: over a grid of design points (models x clusters x cross-building bandwidth x
latency x loss), the tuned configuration's speedup over the production configuration and over
the state-of-the-art baseline, with the maximum, the median and where each occurs.

    python experiments/headline.py              # configs/headline.yaml, 64 points (~15 min, 2 cores)
    python experiments/headline.py --reduced    # the CI-sized version

Tuned = exhaustive optimum of the true scenario. Production and sota are exactly the baselines
``autotune study`` reports (autotune/baselines.py, MISSION.md): production by its rule, sota by
exhaustive search on the network-oblivious copy, both judged on the true scenario. A sota search
depends only on the oblivious copy, so it runs once per distinct copy.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from autotune.baselines import network_oblivious, production_config
from autotune.costmodel import evaluate
from autotune.space import SearchSpace
from autotune.strategies.exhaustive import exhaustive_search
from autotune.sweep import load_for_script, main_guard, markdown_table, run_points, script_args, write_outputs


def sota_for(point):
    """The sota configuration for a design point (searched on its network-oblivious copy)."""
    res = exhaustive_search(SearchSpace(network_oblivious(point.scenario())))
    return res.best_config


def oblivious_key(point) -> str:
    return network_oblivious(point.scenario()).key


def measure(job) -> dict:
    point, sota_cfg = job
    scen = point.scenario()
    space = SearchSpace(scen)
    tuned = exhaustive_search(space)
    prod_cfg = production_config(scen, space)
    row = point.label() | {"tuned_s": tuned.best_iteration_time_s,
                           "tuned_placement": tuned.best_config.placement if tuned.best_config else None}
    for name, cfg in (("production", prod_cfg), ("sota", sota_cfg)):
        e = evaluate(scen, cfg) if cfg is not None else None
        t = e.iteration_time_s if e is not None and e.feasible else None
        row[f"{name}_s"] = t
        row[f"speedup_vs_{name}_pct"] = 100 * (t / tuned.best_iteration_time_s - 1) if t else None
        row[f"{name}_config"] = cfg.model_dump() if cfg is not None else None
    row["tuned_config"] = tuned.best_config.model_dump() if tuned.best_config else None
    return row


def summary(rows: list[dict]) -> list[dict]:
    out = []
    for name in ("production", "sota"):
        key = f"speedup_vs_{name}_pct"
        ok = [r for r in rows if r.get(key) is not None]
        if not ok:
            continue
        top = max(ok, key=lambda r: r[key])
        where = ", ".join(f"{k}={top[k]}" for k in ("model", "cluster", "oversub", "distance_km", "loss") if k in top)
        out.append({"baseline": name, "max_speedup_pct": top[key], "where_max": where,
                    "median_speedup_pct": statistics.median(r[key] for r in ok),
                    "min_speedup_pct": min(r[key] for r in ok), "points": len(ok),
                    "points_where_infeasible": len(rows) - len(ok)})
    return out


def main():
    args = script_args(__doc__, "experiments/configs/headline.yaml").parse_args()
    cfg = load_for_script(args)
    points = cfg.points()
    keys = run_points(oblivious_key, points, 1, progress=False)
    first = {}
    for p, k in zip(points, keys):
        first.setdefault(k, p)
    sota = dict(zip(first, run_points(sota_for, list(first.values()), args.workers)))
    rows = run_points(measure, [(p, sota[k]) for p, k in zip(points, keys)], args.workers)
    out = Path(args.out)
    stem = cfg.name + ("-reduced" if args.reduced else "")
    summ = summary(rows)
    axes = [k for k in ("oversub", "distance_km", "loss") if any(k in r for r in rows)]
    cols = ["model", "cluster", *axes, "tuned_s", "tuned_placement", "production_s", "sota_s",
            "speedup_vs_production_pct", "speedup_vs_sota_pct"]
    data = write_outputs(out, stem, rows, cols, {"summary": summ}, [], args.tracking_uri, not args.no_track,
                         {"config": args.config, "reduced": args.reduced})
    sm = out / f"{stem}-summary.md"
    sm.write_text(markdown_table(summ, ["baseline", "max_speedup_pct", "where_max", "median_speedup_pct",
                                        "min_speedup_pct", "points", "points_where_infeasible"]))
    print(Path(data["table"]).read_text())
    print(sm.read_text())


if __name__ == "__main__":
    main_guard(main)

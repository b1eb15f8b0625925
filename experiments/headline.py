"""Headline table: over a grid of design points (models x clusters x cross-building bandwidth x
latency x loss), the tuned configuration's speedup over the production, naive and
state-of-the-art baselines, each twice: on the true network and on its network-oblivious copy
(every tier above the building like the inside of one). The oblivious gap is what parallelism
tuning alone buys; the difference is what scale-across physics explains.

    python experiments/headline.py              # configs/headline.yaml, 64 points (~15 min, 2 cores)
    python experiments/headline.py --reduced    # the CI-sized version

Tuned = exhaustive optimum of each network (true, oblivious). The baselines are exactly the ones
``autotune study`` reports (autotune/baselines.py, docs/baselines.md): production from published
recipes, naive by its rule, sota by exhaustive search on the oblivious copy with the cluster's
default transport; each is evaluated on both networks. A sota search depends only on the
oblivious copy, so it runs once per distinct copy.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from autotune.baselines import naive_config, network_oblivious, production_config
from autotune.costmodel import evaluate
from autotune.space import SearchSpace
from autotune.strategies.exhaustive import exhaustive_search
from autotune.sweep import load_for_script, main_guard, markdown_table, run_points, script_args, write_outputs


def sota_for(point):
    """The sota configuration for a design point (searched on its network-oblivious copy)."""
    from autotune.baselines import sota_config
    return sota_config(point.scenario())


def oblivious_key(point) -> str:
    return network_oblivious(point.scenario()).key


NAMES = ("production", "naive", "sota")


def measure(job) -> dict:
    point, sota_cfg = job
    scen = point.scenario()
    blind = network_oblivious(scen)
    space = SearchSpace(scen)
    tuned = exhaustive_search(space)
    tuned_blind = exhaustive_search(SearchSpace(blind))
    cfgs = {"production": production_config(scen, space), "naive": naive_config(scen, space), "sota": sota_cfg}
    row = point.label() | {"tuned_s": tuned.best_iteration_time_s, "tuned_oblivious_s": tuned_blind.best_iteration_time_s,
                           "tuned_placement": tuned.best_config.placement if tuned.best_config else None}
    for name, cfg in cfgs.items():
        for net, sc, best in (("", scen, tuned.best_iteration_time_s), ("_oblivious", blind, tuned_blind.best_iteration_time_s)):
            e = evaluate(sc, cfg) if cfg is not None else None
            t = e.iteration_time_s if e is not None and e.feasible else None
            row[f"{name}{net}_s"] = t
            row[f"speedup_vs_{name}{net}_pct"] = 100 * (t / best - 1) if t else None
            if not net:
                row[f"{name}_breakdown"] = e.breakdown if e is not None else None
        row[f"{name}_config"] = cfg.model_dump() if cfg is not None else None
    row["tuned_config"] = tuned.best_config.model_dump() if tuned.best_config else None
    row["tuned_breakdown"] = evaluate(scen, tuned.best_config).breakdown if tuned.best_config else None
    return row


def summary(rows: list[dict]) -> list[dict]:
    out = []
    for name in NAMES:
        for net in ("", "_oblivious"):
            key = f"speedup_vs_{name}{net}_pct"
            ok = [r for r in rows if r.get(key) is not None]
            if not ok:
                continue
            top = max(ok, key=lambda r: r[key])
            where = ", ".join(f"{k}={top[k]}" for k in ("model", "cluster", "oversub", "distance_km", "loss") if k in top)
            out.append({"baseline": name, "network": "oblivious" if net else "true", "max_speedup_pct": top[key],
                        "where_max": where, "median_speedup_pct": statistics.median(r[key] for r in ok),
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
    cols = ["model", "cluster", *axes, "tuned_s", "tuned_placement", "production_s", "naive_s", "sota_s",
            "speedup_vs_production_pct", "speedup_vs_production_oblivious_pct", "speedup_vs_naive_pct",
            "speedup_vs_sota_pct", "speedup_vs_sota_oblivious_pct"]
    data = write_outputs(out, stem, rows, cols, {"summary": summ}, [], args.tracking_uri, not args.no_track,
                         {"config": args.config, "reduced": args.reduced})
    sm = out / f"{stem}-summary.md"
    sm.write_text(markdown_table(summ, ["baseline", "network", "max_speedup_pct", "where_max", "median_speedup_pct",
                                        "min_speedup_pct", "points", "points_where_infeasible"]))
    print(Path(data["table"]).read_text())
    print(sm.read_text())


if __name__ == "__main__":
    main_guard(main)

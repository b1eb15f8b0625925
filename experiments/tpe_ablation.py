"""TPE design choices, one at a time against the shipped default (README, "Tuning studies").

    python experiments/tpe_ablation.py --model llama4-maverick --cluster campus-5bldg \
        --variants default,integer --budget 300 --seeds 5

Variants: default (categorical unordered knobs, out-of-memory = failed trial, start-up drawn
uniformly from the legal space); constraint (out-of-memory as an Optuna constraint); integer
(every knob an integer index); index_startup (TPE's own start-up over index vectors).
Prints the median gap to the exhaustive optimum at the budget, per variant.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from autotune.compare import baselines_of, exhaustive_optimum, run_strategy_curves
from autotune.specs import build_scenario

VARIANTS = {
    "default": ({}, {}),
    "constraint": ({"infeasible": "constraint"}, {}),
    "integer": ({"categorical_unordered": False}, {}),
    "index_startup": ({}, {"startup": "index"}),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default="experiments/out")
    a = ap.parse_args()
    scen = build_scenario(a.model, a.cluster)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    opt = exhaustive_optimum(scen, out)["optimum_s"]
    base = baselines_of(scen, ("production",))
    res = {}
    for v in a.variants.split(","):
        runner, strategy = VARIANTS[v]
        r = run_strategy_curves(scen, "tpe", a.budget, a.seeds, opt, strategy_options=strategy,
                                known_baselines=base, **runner)
        res[v] = {"median_gap_pct": r["median_gap_pct"], "gaps_pct": r["gaps_pct"]}
        print(json.dumps({"variant": v} | res[v]), flush=True)
    (out / f"tpe_ablation-{a.model}-{a.cluster}.json").write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()

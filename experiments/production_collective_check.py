"""How much of the headline's production gap is the production rule's ring collective?

    python experiments/production_collective_check.py [experiments/results/headline.json]

Reads a headline run's JSON (every design point with its tuned time and production
configuration), re-evaluates each production configuration with the hierarchical collective
instead of the ring, and prints the median and maximum gap both ways (cost model only, seconds).
"""
from __future__ import annotations

import json
import statistics
import sys

from autotune.costmodel import evaluate
from autotune.specs import Config, build_scenario

AXES = {"oversub": "oversubscription", "distance_km": "distance_km", "loss": "loss_rate"}


def main(path: str = "experiments/results/headline.json") -> None:
    rows = json.load(open(path))["rows"]
    ring, hier = [], []
    for r in rows:
        if not r.get("production_config") or r.get("speedup_vs_production_pct") is None:
            continue
        s = build_scenario(model=r["model"], cluster=r["cluster"],
                           overrides=[f"cluster.cross_building.{v}={r[k]}" for k, v in AXES.items() if k in r])
        prod = Config(**r["production_config"]).model_copy(update={"collective": "hierarchical"})
        ring.append(r["speedup_vs_production_pct"])
        hier.append(100 * (evaluate(s, prod).iteration_time_s / r["tuned_s"] - 1))
    print(f"{len(ring)} design points: tuned vs production, median {statistics.median(ring):.1f}% "
          f"(max {max(ring):.1f}%) with the ring; median {statistics.median(hier):.1f}% (max {max(hier):.1f}%) "
          "with production's collective switched to hierarchical")


if __name__ == "__main__":
    main(*sys.argv[1:])

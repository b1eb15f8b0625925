"""Does the host floor move exact optima? Generated unseen scenarios (seeded,
``design_points.sample_unseen_scenario``: other and mixed hardware, continuous network values, half
MoE), each searched exactly twice: with the shipped calibration, and with the same calibration
without the floor (``host_layer_fwd_us`` 0). Prints one line per scenario and a JSON summary.

    python experiments/host_floor_optima.py --seed 11 --scenarios 10
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from autotune.costmodel.params import default_params
from autotune.envs.design_points import sample_unseen_scenario
from autotune.space import SearchSpace
from autotune.strategies.exhaustive import exhaustive_search

KNOBS = ("tp", "cp", "ep", "pp", "dp", "micro_batch", "recompute", "pp_schedule", "dp_flavour", "placement")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--scenarios", type=int, default=10)
    a = ap.parse_args()
    shipped = default_params()
    variants = {"no_floor": shipped.with_values(host_layer_fwd_us=0.0), "floor": shipped}
    rng = np.random.default_rng(a.seed)
    rows = []
    for _ in range(a.scenarios):
        scen = sample_unseen_scenario(rng)
        space = SearchSpace(scen)
        row = {"scenario": scen.summary()}
        for tag, p in variants.items():
            ex = exhaustive_search(space, p)
            row[tag] = {"iteration_time_s": ex.best_iteration_time_s,
                        "config": ex.best_config.model_dump(include=set(KNOBS))}
        row["same_core"] = row["floor"]["config"] == row["no_floor"]["config"]
        rows.append(row)
        print(json.dumps({"scenario": row["scenario"], "same_core": row["same_core"],
                          **{t: round(row[t]["iteration_time_s"], 4) for t in variants}}), flush=True)
    print(json.dumps({"seed": a.seed, "scenarios": len(rows), "same_core": sum(r["same_core"] for r in rows),
                      "cp_above_1": {t: sum(r[t]["config"]["cp"] > 1 for r in rows) for t in variants}}))


if __name__ == "__main__":
    main()

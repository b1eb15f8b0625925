"""PPO across design points: train on one set, propose zero-shot on design points it never saw,
judge each proposal against the exhaustive optimum. Prints a JSON summary.

    python experiments/ppo_zero_shot.py --steps 100000 --train-points 24 --test-points 8

Training cost (seconds, on this machine) is reported next to the gap, as docs/search.md asks.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from autotune.agents.ppo import DEFAULT_POLICY, load, propose, train
from autotune.costmodel import evaluate
from autotune.strategies.exhaustive import exhaustive_search
from autotune.envs.design_points import DesignPointSet


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--train-points", type=int, default=24)
    ap.add_argument("--test-points", type=int, default=8)
    ap.add_argument("--generated-points", type=int, default=0, help="generated training points (other and mixed "
                    "hardware, seeds disjoint from the test's) on top of --train-points")
    ap.add_argument("--imitation-epochs", type=int, default=0, help="behaviour cloning of each training point's "
                    "exact top configurations before PPO (0: PPO alone)")
    ap.add_argument("--imitation-top-k", type=int, default=4)
    ap.add_argument("--samples", type=int, default=16, help="policy samples for the refined figure")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--test-seed", type=int, default=None, help="seed of the unseen design points (default: --seed); "
                    "another value gives a validation set for choosing between trained policies")
    ap.add_argument("--test-split", default="test", choices=("test", "unseen"),
                    help="test: the training distribution's held-out grid values; unseen: other hardware, mixed "
                    "buildings, continuous network values, half MoE (design_points.sample_unseen_scenario)")
    ap.add_argument("--policy", default=None, help="the policy to train and score (default: train into "
                    "experiments/out/ppo_scale_across.zip; with --skip-train, score the shipped one)")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--out", default="experiments/out/ppo_zero_shot.json")
    a = ap.parse_args()
    torch.set_num_threads(1)
    card = None
    if a.policy is None:
        a.policy = str(DEFAULT_POLICY if a.skip_train else Path("experiments/out/ppo_scale_across.zip"))
    if not a.skip_train:
        card = train(a.steps, a.train_points, a.seed, Path(a.policy), n_generated=a.generated_points,
                     imitation_top_k=a.imitation_top_k, imitation_epochs=a.imitation_epochs)
    model = load(a.policy)
    test = DesignPointSet(a.test_points, a.test_split, a.seed if a.test_seed is None else a.test_seed)
    if card is not None:
        seen = {t["key"] for t in card["train_scenarios"]}
        assert not seen & {p.scenario.key for p in test.points}, "a test point is a training point"
    rows = []
    for p in test.points:
        t0 = time.perf_counter()
        opt = exhaustive_search(p.space).best_iteration_time_s
        t_ex = time.perf_counter() - t0
        t0 = time.perf_counter()
        cfgs = propose(model, p, n=a.samples, seed=a.seed)
        t_prop = time.perf_counter() - t0
        evals = [evaluate(p.scenario, c) for c in cfgs]
        zero = evals[0].iteration_time_s if evals[0].feasible else math.inf
        refined = min((e.iteration_time_s for e in evals if e.feasible), default=math.inf)
        rows.append({"scenario": p.scenario.summary(), "optimum_s": opt, "production_s": p.production_s,
                     "zero_shot_feasible": evals[0].feasible,
                     "zero_shot_gap_pct": 100 * (zero / opt - 1), "refined_gap_pct": 100 * (refined / opt - 1),
                     "exhaustive_s": t_ex, "propose_s": t_prop})
        print(json.dumps({k: rows[-1][k] for k in ("zero_shot_gap_pct", "refined_gap_pct")} |
                         {"model": p.scenario.model.name, "cluster": p.scenario.cluster.name}), flush=True)
    summary = {"test_split": a.test_split, "test_points": len(rows),
               "median_zero_shot_gap_pct": float(np.median([r["zero_shot_gap_pct"] for r in rows])),
               "zero_shot_out_of_memory": sum(not r["zero_shot_feasible"] for r in rows),
               f"median_gap_after_{a.samples}_samples_pct": float(np.median([r["refined_gap_pct"] for r in rows])),
               "train": {k: v for k, v in (card or {}).items() if k != "train_scenarios"}, "rows": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=2))


if __name__ == "__main__":
    main()

"""PPO across design points: train on one set, propose zero-shot on design points it never saw,
judge each proposal against the exhaustive optimum. Prints a JSON summary.

    python experiments/ppo_zero_shot.py --steps 100000 --train-points 24 --test-points 8

Three one-shot figures per point, none of which spends a real trial:
- the policy's raw deterministic action;
- the ranked proposal (``ppo.ranked_proposal``): the fastest by the cost model of that action and
  ``--rank-draws`` draws of the policy at ``--temperature``; what ``autotune propose`` and a
  study's first PPO trial give;
- the control: the same number of uniform random actions (decoded over the same fitting space),
  ranked the same way, which says how much of the ranked figure is the policy's and how much the
  ranking's.

Ranking by the very model that defines the optimum flatters the ranked figure. ``--truth`` removes
that: each test point gets a "truth" (the cost model with its fitted efficiencies drawn around the
shipped calibration, ``cold_search.perturbed_params``, seeded by the test seed); the optimum and
every proposal are then timed by the truth, while the ranking still uses the shipped calibration,
as it would before a real cluster.

Training cost (seconds, on this machine) is reported next to the gap, as docs/search.md asks.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from autotune.agents.ppo import (DEFAULT_POLICY, RANK_DRAWS, RANK_TEMPERATURE, _Single, _temperatures, load,
                                 propose, ranked_proposal, scored_candidates, train)
from autotune.baselines import production_config
from autotune.costmodel import evaluate
from autotune.costmodel.params import default_params
from autotune.envs.scale_across import ScaleAcrossEnv
from autotune.strategies.exhaustive import exhaustive_search
from autotune.envs.design_points import DesignPointSet


def _perturbed_params():
    """``cold_search.perturbed_params``, loaded by path (this file runs as a script and as a module)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("cold_search", Path(__file__).with_name("cold_search.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["cold_search"] = mod                    # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod.perturbed_params


def random_control(point, draws: int, seed: int, timed_by=None) -> tuple:
    """(time, distinct candidates): the fastest by the shipped model of ``draws`` uniform random
    actions, as timed by ``timed_by`` (params; default the shipped model); inf where none fits."""
    env = ScaleAcrossEnv(design_points=_Single(point))
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    masks = np.split(env.action_masks(), np.cumsum(env.action_space.nvec)[:-1])
    acts = [tuple(int(rng.choice(np.flatnonzero(m))) for m in masks) for _ in range(draws)]
    configs, t = scored_candidates(env, point, acts)
    if not np.isfinite(t).any():
        return math.inf, len(configs)
    e = evaluate(point.scenario, configs[int(np.argmin(t))], timed_by, check=False)
    return (e.iteration_time_s if e.feasible else math.inf), len(configs)


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
    ap.add_argument("--rank-draws", type=int, default=RANK_DRAWS, help="policy draws the ranked proposal is chosen among")
    ap.add_argument("--temperature", default=str(RANK_TEMPERATURE), help="softmax temperature of those draws; "
                    "a comma-separated list splits the draws evenly between them (the validation sweep: 1, 1,2, 1,2,4, 2)")
    ap.add_argument("--truth", action="store_true", help="time the optimum and every proposal by a perturbed "
                    "model per point (the ranking keeps the shipped calibration)")
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
    try:
        temps = tuple(float(x) for x in a.temperature.split(","))
        _temperatures(temps)
    except ValueError:
        ap.error(f"--temperature {a.temperature!r}: comma-separated finite values in (0, 100]")
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)                        # the refined figure's plain policy samples
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
    truth_rng = np.random.default_rng([a.seed if a.test_seed is None else a.test_seed, 16])
    perturbed = _perturbed_params() if a.truth else None
    for p in test.points:
        truth = perturbed(truth_rng, default_params()) if a.truth else None
        t0 = time.perf_counter()
        opt = exhaustive_search(p.space, truth).best_iteration_time_s
        t_ex = time.perf_counter() - t0
        shipped_opt_gap = None                # the shipped model's own exact optimum, timed by the truth
        if a.truth:
            e = evaluate(p.scenario, exhaustive_search(p.space).best_config, truth)
            shipped_opt_gap = 100 * ((e.iteration_time_s if e.feasible else math.inf) / opt - 1)
        t0 = time.perf_counter()
        cfgs = propose(model, p, n=a.samples, seed=a.seed)
        t_prop = time.perf_counter() - t0
        evals = [evaluate(p.scenario, c, truth) for c in cfgs]
        zero = evals[0].iteration_time_s if evals[0].feasible else math.inf
        refined = min((e.iteration_time_s for e in evals if e.feasible), default=math.inf)
        t0 = time.perf_counter()
        ranked_cfg, info = ranked_proposal(model, p, a.rank_draws, temps if len(temps) > 1 else temps[0])
        t_rank = time.perf_counter() - t0
        ranked = evaluate(p.scenario, ranked_cfg, truth)
        control, control_n = random_control(p, a.rank_draws + 1, a.seed, truth)
        production = p.production_s if truth is None else \
            evaluate(p.scenario, production_config(p.scenario, p.space), truth).iteration_time_s
        rows.append({"scenario": p.scenario.summary(), "optimum_s": opt, "production_s": production,
                     "zero_shot_feasible": evals[0].feasible,
                     "zero_shot_gap_pct": 100 * (zero / opt - 1), "refined_gap_pct": 100 * (refined / opt - 1),
                     "ranked_feasible": ranked.feasible, "ranked_candidates": info["candidates"],
                     "ranked_gap_pct": 100 * ((ranked.iteration_time_s if ranked.feasible else math.inf) / opt - 1),
                     "random_control_gap_pct": 100 * (control / opt - 1), "random_control_candidates": control_n,
                     "shipped_model_optimum_gap_pct": shipped_opt_gap,
                     "exhaustive_s": t_ex, "propose_s": t_prop, "ranked_s": t_rank})
        print(json.dumps({k: rows[-1][k] for k in ("zero_shot_gap_pct", "refined_gap_pct", "ranked_gap_pct",
                                                   "random_control_gap_pct", "ranked_candidates")} |
                         {"model": p.scenario.model.name, "cluster": p.scenario.cluster.name}), flush=True)
    summary = {"test_split": a.test_split, "test_points": len(rows), "truth": a.truth,
               "median_zero_shot_gap_pct": float(np.median([r["zero_shot_gap_pct"] for r in rows])),
               "zero_shot_out_of_memory": sum(not r["zero_shot_feasible"] for r in rows),
               f"median_gap_after_{a.samples}_samples_pct": float(np.median([r["refined_gap_pct"] for r in rows])),
               "rank_draws": a.rank_draws, "temperature": list(temps),
               "median_ranked_candidates": float(np.median([r["ranked_candidates"] for r in rows])),
               "median_random_control_candidates": float(np.median([r["random_control_candidates"] for r in rows])),
               "median_ranked_gap_pct": float(np.median([r["ranked_gap_pct"] for r in rows])),
               "ranked_out_of_memory": sum(not r["ranked_feasible"] for r in rows),
               "median_random_control_gap_pct": float(np.median([r["random_control_gap_pct"] for r in rows])),
               "median_shipped_model_optimum_gap_pct": (float(np.median([r["shipped_model_optimum_gap_pct"] for r in rows]))
                                                        if a.truth else None),
               "median_ranked_s": float(np.median([r["ranked_s"] for r in rows])),
               "train": {k: v for k, v in (card or {}).items() if k != "train_scenarios"}, "rows": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=2))


if __name__ == "__main__":
    main()

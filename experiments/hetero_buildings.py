"""Buildings of different GPU speeds: use every building, or leave the slow ones out?

    python experiments/hetero_buildings.py                    # 12 generated scenarios
    python experiments/hetero_buildings.py --scenarios 4      # quicker
    python experiments/hetero_buildings.py --example          # the README's 3 x H100 + 2 x A100 example

Each scenario is a test-split design point (``autotune.envs.design_points.sample_scenario``,
seeded: not a preset, not a PPO training point) at 256 GPUs per building; then, seeded too, a GPU
pair (fast, slow) and which buildings get the slow GPU (at least one, not all). Three exact
optima (``exhaustive_search``) are compared at the same global batch:

- ``even``: every building, work shared evenly (every rank at the slowest GPU's pace);
- ``all``: every building, with ``hetero_split`` free (by_speed shares micro-batches or layers
  in proportion to speed, ``costmodel.hetero.hetero_shares``);
- ``fast only``: the fast buildings alone (the slow ones left out).

``all / fast only - 1`` < 0 means using every building pays. Writes
experiments/results/hetero_buildings.{json,md}.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from autotune.analysis import buildings_only
from autotune.envs.design_points import TIER, sample_scenario
from autotune.errors import UserInputError
from autotune.space import SearchSpace
from autotune.specs import build_scenario
from autotune.strategies.exhaustive import exhaustive_search
from autotune.sweep import dataclass_args

GPU_PAIRS = (("h100-sxm", "a100-80gb"), ("b200", "h100-sxm"), ("h200", "a100-80gb"))
"""(fast, slow) GPU pairs a site might mix: one generation apart."""


@dataclass
class Args:
    scenarios: int = 12         # generated scenarios
    seed: int = 23              # of the scenario generator (test split) and the GPU draws
    gpus_per_building: int = 256
    out: str = "experiments/results"
    example: bool = False       # only the README's example: llama3-405b x campus-5bldg, buildings 3 and 4 on A100


def best_time(scen, **space_opts):
    try:
        space = SearchSpace(scen, **space_opts).require_legal()
    except UserInputError:
        return None, None
    r = exhaustive_search(space)
    return (r.best_iteration_time_s, r.best_config) if r.best_config is not None else (None, None)


def readme_example() -> None:
    """The README's mixed-GPU example (its ``autotune search`` command): every building by speed,
    every building evenly, and the three H100 buildings alone at the same global batch."""
    scen = build_scenario("llama3-405b", "campus-5bldg",
                          overrides=["cluster.buildings.3.gpu=a100-80gb", "cluster.buildings.4.gpu=a100-80gb"])
    t_all, cfg = best_time(scen)
    t_even, _ = best_time(scen, hetero=("even",))
    t_fast, _ = best_time(buildings_only(scen, [0, 1, 2]))
    print(f"every building, shares free: {t_all:.2f} s ({cfg.hetero_split}); every building, even shares: "
          f"{t_even:.2f} s; the three H100 buildings alone: {t_fast:.2f} s")


def main() -> None:
    args = dataclass_args(Args, __doc__)
    if args.example:
        return readme_example()
    rng = np.random.default_rng(args.seed)
    rows = []
    t0 = time.perf_counter()
    for i in range(args.scenarios):
        gen = sample_scenario(rng, "test")
        tier = TIER[gen.cluster.name]
        B = gen.cluster.n_buildings
        fast, slow = GPU_PAIRS[rng.integers(len(GPU_PAIRS))]
        n_slow = int(rng.integers(1, B))
        slow_ids = sorted(rng.choice(B, size=n_slow, replace=False).tolist())
        net = [f"cluster.{tier}.{f}={getattr(getattr(gen.cluster, tier), f)}"
               for f in ("oversubscription", "distance_km", "loss_rate")]
        gpus = [f"cluster.buildings.{b}.gpu={slow if b in slow_ids else fast}" for b in range(B)]
        scen = build_scenario(gen.model.name, gen.cluster.name, gpus=args.gpus_per_building * B, overrides=net + gpus)
        c = scen.cluster
        fast_only = buildings_only(scen, [j for j in range(B) if j not in slow_ids])
        t_even, _ = best_time(scen, hetero=("even",))
        t_all, cfg_all = best_time(scen)
        t_fast, cfg_fast = best_time(fast_only)
        row = {"scenario": i, "model": scen.model.name, "cluster": c.name, "buildings": B,
               "fast": fast, "slow": slow, "slow_buildings": slow_ids, "global_batch": scen.global_batch_seqs,
               "even_s": t_even, "all_s": t_all, "fast_only_s": t_fast,
               "all_config": cfg_all.model_dump() if cfg_all else None,
               "fast_only_config": cfg_fast.model_dump() if cfg_fast else None}
        row["all_vs_fast_only_pct"] = 100 * (t_all / t_fast - 1) if t_all and t_fast else None
        row["even_vs_fast_only_pct"] = 100 * (t_even / t_fast - 1) if t_even and t_fast else None
        rows.append(row)
        print(f"{i:2d} {scen.model.name:16s} {c.name:13s} {fast}/{slow} slow={slow_ids}: even {t_even}, "
              f"all {t_all} ({cfg_all.hetero_split if cfg_all else '-'}), fast only {t_fast}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    both = [r for r in rows if r["all_vs_fast_only_pct"] is not None]
    summary = {"args": asdict(args), "elapsed_s": time.perf_counter() - t0, "compared": len(both),
               "all_beats_fast_only": sum(r["all_vs_fast_only_pct"] < 0 for r in both),
               "even_beats_fast_only": sum(r["even_vs_fast_only_pct"] < 0 for r in both if r["even_vs_fast_only_pct"] is not None),
               "median_all_vs_fast_only_pct": float(np.median([r["all_vs_fast_only_pct"] for r in both])) if both else None,
               "rows": rows}
    (out / "hetero_buildings.json").write_text(json.dumps(summary, indent=1))

    def f(x, spec=".3f"):
        return "-" if x is None else format(x, spec)
    lines = ["| # | model | cluster | fast / slow | slow buildings | even (s) | all (s) | split | fast only (s) | all vs fast only | even vs fast only |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['scenario']} | {r['model']} | {r['cluster']} | {r['fast']} / {r['slow']} | "
                     f"{r['slow_buildings']} of {r['buildings']} | {f(r['even_s'])} | {f(r['all_s'])} | "
                     f"{r['all_config']['hetero_split'] if r['all_config'] else '-'} | {f(r['fast_only_s'])} | "
                     f"{f(r['all_vs_fast_only_pct'], '+.1f')}% | {f(r['even_vs_fast_only_pct'], '+.1f')}% |")
    lines.append("")
    lines.append(f"Every building (shares free) beats the fast buildings alone in {summary['all_beats_fast_only']} of "
                 f"{summary['compared']} scenarios (median {f(summary['median_all_vs_fast_only_pct'], '+.1f')}%); "
                 f"with even shares in {summary['even_beats_fast_only']}. "
                 f"`python experiments/hetero_buildings.py --scenarios {args.scenarios} --seed {args.seed}`, "
                 f"{summary['elapsed_s']:.0f} s.")
    (out / "hetero_buildings.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

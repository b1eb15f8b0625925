"""Robust vs nominal optimum on generated scenarios whose crossing link varies over a run.

    python experiments/robust_regret.py                       # 6 generated scenarios, 16 draws
    python experiments/robust_regret.py --scenarios 2 --samples 8    # quicker

Each scenario is a test-split design point (``autotune.envs.design_points.sample_scenario``,
seeded: not a preset, not one of the PPO training points), at 256 GPUs per building to keep every
exact search short. The loss of its crossing tier is drawn over [1e-6, 1e-3] (log-uniform Latin
hypercube, seeded); then, apart, its bandwidth over [1/8, 1] of the nominal.
``autotune.robust.robust_search`` finds the configuration with the best expected (and worst-case)
iteration time over those draws, exactly (certified). The nominal optimum is the exact optimum at
the scenario's own values; its regret is how much slower it is than the robust optimum under the
same draws. Writes experiments/results/robust_regret.{json,md}.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from autotune.envs.design_points import TIER, sample_scenario
from autotune.robust import parse_ranges, robust_search
from autotune.specs import build_scenario
from autotune.sweep import dataclass_args


@dataclass
class Args:
    scenarios: int = 6          # generated scenarios
    seed: int = 11              # of the scenario generator (test split)
    samples: int = 16           # loss draws per scenario
    sample_seed: int = 0        # of the Latin hypercube
    low: float = 1e-6                # loss range
    high: float = 1e-3
    bandwidth_low_frac: float = 0.125   # bandwidth range: this fraction of the nominal .. the nominal
    gpus_per_building: int = 256
    out: str = "experiments/results"


def main() -> None:
    args = dataclass_args(Args, __doc__)
    rng = np.random.default_rng(args.seed)
    rows = []
    for i in range(args.scenarios):
        gen = sample_scenario(rng, "test")
        tier = TIER[gen.cluster.name]
        # the generated network, at a GPU count every exact search finishes in seconds
        scen = build_scenario(gen.model.name, gen.cluster.name, gpus=args.gpus_per_building * gen.cluster.n_buildings,
                              overrides=[f"cluster.{tier}.{f}={getattr(getattr(gen.cluster, tier), f)}"
                                         for f in ("oversubscription", "distance_km", "loss_rate")])
        t = getattr(scen.cluster, tier)
        cases = {"loss": f"cluster.{tier}.loss_rate={args.low}..{args.high}",
                 "bandwidth": f"cluster.{tier}.bandwidth_Bps={t.bandwidth_Bps * args.bandwidth_low_frac}..{t.bandwidth_Bps}"}
        row = {"scenario": i, "model": scen.model.name, "cluster": scen.cluster.name, "gpus": scen.n_gpus,
               "distance_km": t.distance_km, "spec_loss": t.loss_rate, "spec_bandwidth_Bps": t.bandwidth_Bps}
        for case, text in cases.items():
            ranges = parse_ranges([text], scen)
            for objective in ("mean", "worst"):
                t0 = time.perf_counter()
                try:
                    r = robust_search(scen, ranges, args.samples, objective, args.sample_seed)
                except Exception as e:  # noqa: BLE001 - e.g. nothing fits in memory at this size
                    row[f"{case}_{objective}"] = {"error": str(e)}
                    continue
                row[f"{case}_{objective}"] = {k: r[k] for k in (
                    "robust_s", "nominal_s", "nominal_regret_s", "nominal_regret_pct", "same_config", "exact", "top_k",
                    "candidates", "robust_config", "nominal_config")} | {"seconds": time.perf_counter() - t0}
        rows.append(row)
        print(json.dumps({k: (v if not isinstance(v, dict) else {x: v.get(x) for x in
                                                                  ("nominal_regret_pct", "same_config", "exact", "error")})
                          for k, v in row.items()}), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "robust_regret.json").write_text(json.dumps({"args": asdict(args), "rows": rows}, indent=1))
    lines = ["| # | model | cluster | km | varies | nominal regret, mean | nominal regret, worst | robust differs | exact |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        for case, label in (("loss", f"loss {args.low:g}..{args.high:g}"),
                            ("bandwidth", f"bandwidth {args.bandwidth_low_frac:g}x..1x")):
            m, w = r.get(f"{case}_mean", {}), r.get(f"{case}_worst", {})
            if "error" in m or "error" in w or not m or not w:
                lines.append(f"| {r['scenario']} | {r['model']} | {r['cluster']} | {r['distance_km']:g} | {label} | "
                             f"{(m.get('error') or w.get('error') or 'not run')[:80]} | | | |")
                continue
            lines.append(f"| {r['scenario']} | {r['model']} | {r['cluster']} | {r['distance_km']:g} | {label} | "
                         f"{m['nominal_regret_s']:.4f} s ({m['nominal_regret_pct']:.2f}%) | "
                         f"{w['nominal_regret_s']:.4f} s ({w['nominal_regret_pct']:.2f}%) | "
                         f"{'no' if m['same_config'] and w['same_config'] else 'yes'} | {m['exact'] and w['exact']} |")
    (out / "robust_regret.md").write_text(
        f"Robust vs nominal optimum over {args.samples} seeded draws of the crossing tier's loss, then of its "
        f"bandwidth "
        f"(`python experiments/robust_regret.py`)\n\n" + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

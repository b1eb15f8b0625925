"""Does a faster GPU ever make a configuration slower? Samples a scenario's space with a seed,
evaluates every row on the scenario's GPUs and on the same GPUs with ``--speedup`` times the bf16
peak, and counts the rows that got slower, with the shipped calibration and with the host floor
off (``host_layer_fwd_us`` 0). Prints a JSON summary.

    python experiments/faster_gpu_check.py --model llama3-8b --cluster metro-2bldg --rows 20000 --seed 0
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from autotune.costmodel import evaluate_batch
from autotune.costmodel.params import default_params
from autotune.space import SearchSpace
from autotune.specs import build_scenario


def faster(scen, speedup: float):
    """The scenario with every building's GPU ``speedup`` times faster in bf16."""
    bl = [b.model_copy(update={"gpu": b.gpu.model_copy(update={"peak_flops_bf16": b.gpu.peak_flops_bf16 * speedup})})
          for b in scen.cluster.buildings]
    return scen.model_copy(update={"cluster": scen.cluster.model_copy(update={"buildings": bl})})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="llama3-8b")
    ap.add_argument("--cluster", default="metro-2bldg")
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--speedup", type=float, default=1.3)
    a = ap.parse_args()
    scen = build_scenario(a.model, a.cluster)
    fast = faster(scen, a.speedup)
    batch = SearchSpace(scen).sample(a.rows, seed=a.seed)
    out = {"scenario": f"{a.model} x {a.cluster}", "rows": a.rows, "seed": a.seed, "speedup": a.speedup}
    for name, p in (("shipped", default_params()), ("no_host_floor", default_params().with_values(host_layer_fwd_us=0.0))):
        base, quick = evaluate_batch(scen, batch, p), evaluate_batch(fast, batch, p)
        ok = base["feasible"] & quick["feasible"]
        ratio = quick["iteration_time_s"][ok] / base["iteration_time_s"][ok]
        out[name] = {"feasible_rows": int(ok.sum()), "slower_rows": int((ratio > 1 + 1e-9).sum()),
                     "max_slowdown_pct": float(100 * (ratio.max() - 1)) if ratio.size else 0.0}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()

"""``autotune bench``: throughput of the cost model on the largest preset space."""
from __future__ import annotations

import time

import numpy as np

from .costmodel.heap import tune_heap
from .costmodel.iteration import evaluate, evaluate_batch
from .space import SearchSpace, config_at
from .specs.presets import build_scenario
from .strategies.exhaustive import exhaustive_search

BENCH_MODEL, BENCH_CLUSTER = "llama3-405b", "campus-5bldg"


def run_bench(rows: int = 1 << 18, scalar_samples: int = 2000, repeats: int = 5, seed: int = 0) -> dict:
    scen = build_scenario(BENCH_MODEL, BENCH_CLUSTER)
    space = SearchSpace(scen)
    batch = space.sample(rows, seed=seed)
    evaluate_batch(scen, batch, check=False)                          # warm caches (scenario constants, tables)
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        evaluate_batch(scen, batch, check=False)
        best = min(best, time.perf_counter() - t0)
    configs = [config_at(batch, i) for i in range(min(scalar_samples, rows))]
    t0 = time.perf_counter()
    for c in configs:
        evaluate(scen, c, check=False)
    scalar_us = (time.perf_counter() - t0) / len(configs) * 1e6
    ex = exhaustive_search(space)
    return {"scenario": f"{BENCH_MODEL} x {BENCH_CLUSTER}", "batch_rows": rows,
            "batch_configs_per_s": rows / best, "scalar_eval_us": scalar_us,
            "space_size": space.legal_count(), "raw_space_size": space.raw_size(),
            "exhaustive_s": ex.elapsed_s, "exhaustive_best_iteration_time_s": ex.best_iteration_time_s,
            "exhaustive_feasible": ex.feasible_count,
            "exact_search_effective_configs_per_s": space.legal_count() / ex.elapsed_s,
            "heap": tune_heap()}

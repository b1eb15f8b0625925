"""Speed of the cost model, measured with pytest-benchmark (no timing asserts)."""
from autotune.costmodel import evaluate, evaluate_batch
from autotune.space import SearchSpace, config_at


def test_bench_evaluate_batch(benchmark, campus):
    batch = SearchSpace(campus).sample(1 << 16, seed=0)
    out = benchmark(evaluate_batch, campus, batch)
    assert len(out["iteration_time_s"]) == 1 << 16


def test_bench_evaluate_scalar(benchmark, campus):
    cfg = config_at(SearchSpace(campus).sample(1, seed=0), 0)
    e = benchmark(evaluate, campus, cfg)
    assert e.iteration_time_s > 0

"""The step's wait for its slowest rank (costmodel/stragglers.py)."""
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.costmodel.params import default_params
from autotune.costmodel.stragglers import expected_max_std_normal, straggler_scale


def _exact_expected_max(n: int) -> float:
    """E[max of n standard normals] by quadrature: integral of x n phi(x) Phi(x)^(n-1)."""
    x = np.linspace(-10.0, 10.0, 200001)
    phi = np.exp(-x * x / 2.0) / math.sqrt(2.0 * math.pi)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    return float(np.trapezoid(x * n * phi * cdf ** (n - 1), x))


def test_blom_within_a_few_percent_of_the_exact_expectation():
    for n in (2, 8, 64, 1024):
        exact = _exact_expected_max(n)
        assert abs(expected_max_std_normal(n) - exact) / exact < 0.05, n
    assert abs(_exact_expected_max(2) - 1.0 / math.sqrt(math.pi)) < 1e-6   # the closed form at n = 2


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 200_000), st.floats(0.0, 0.2))
def test_scale_is_one_for_one_rank_and_grows_with_ranks_and_jitter(n, jitter):
    s = straggler_scale(n, jitter)
    assert s >= 1.0
    assert straggler_scale(n + 1, jitter) >= s
    assert straggler_scale(n, jitter + 0.01) >= s
    assert straggler_scale(1, jitter) == 1.0
    assert s <= 1.0 + jitter * math.sqrt(2.0 * math.log(max(n, 2)))   # below the asymptotic bound


def test_iteration_time_carries_the_factor():
    from autotune.costmodel import evaluate
    p = default_params()
    assert p.straggler_jitter > 0
    from autotune.validation.columns import shipped_runs_path
    from autotune.validation.predict import resolve_unstated
    from autotune.validation.runs_file import read_runs
    case = read_runs(shipped_runs_path())[0][0]
    cfg = resolve_unstated(case, p)
    with_j = evaluate(case.scenario, cfg, p, check=False).iteration_time_s
    without = evaluate(case.scenario, cfg, p.with_values(straggler_jitter=0.0), check=False).iteration_time_s
    assert math.isclose(with_j / without, straggler_scale(case.scenario.n_gpus, p.straggler_jitter), rel_tol=1e-12)

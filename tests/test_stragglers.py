"""The step's wait for its slowest rank (costmodel/stragglers.py)."""
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.costmodel import evaluate
from autotune.costmodel.params import default_params
from autotune.costmodel.stragglers import expected_max_std_normal, straggler_scale


def _exact_expected_max(n: int) -> float:
    """E[max of n standard normals] by quadrature: integral of x n phi(x) Phi(x)^(n-1)."""
    x = np.linspace(-10.0, 10.0, 200001)
    phi = np.exp(-x * x / 2.0) / math.sqrt(2.0 * math.pi)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    return float(np.trapezoid(x * n * phi * cdf ** (n - 1), x))


def test_blom_within_its_stated_accuracy_of_the_exact_expectation():
    """stragglers.py: within 4.5% at n = 2, 1.9% at 4, 1.1% at 6, 0.75% at 8, 0.5% from n = 16 on."""
    for n, tol in ((2, 0.045), (4, 0.0193), (6, 0.0114), (8, 0.0075), (16, 0.005), (64, 0.005), (1024, 0.005), (100_000, 0.005)):
        exact = _exact_expected_max(n)
        assert abs(expected_max_std_normal(n) - exact) / exact < tol, n
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


def test_the_simulator_waits_for_the_straggler_too():
    """The event simulator referees the closed form with the same step-end wait (a default-run
    check: the slow simulator tests compare them exactly)."""
    from autotune.costmodel.simulator import simulate
    from autotune.specs import Config, build_scenario
    s = build_scenario("llama3-8b", "single-building", gpus=64, global_batch=64)
    cfg = Config(tp=2, pp=4, dp=8, pp_schedule="1f1b", dp_flavour="zero1", micro_batch=1)
    p = default_params()
    on, off = simulate(s, cfg, p), simulate(s, cfg, p.with_values(straggler_jitter=0.0))
    assert math.isclose(on["iteration_time_s"] / off["iteration_time_s"], straggler_scale(64, p.straggler_jitter),
                        rel_tol=1e-12)
    assert on["iteration_time_s"] == __import__("pytest").approx(on["closed_form_iteration_time_s"], rel=0.03)


def test_policy_features_are_shares_of_the_time_before_the_wait():
    from autotune.envs.design_points import FEATURE_BREAKDOWN_KEYS, production_features
    from autotune.specs import Config, build_scenario
    s = build_scenario("llama3-8b", "single-building", gpus=64)
    ev = evaluate(s, Config(tp=2, pp=1, dp=32, dp_flavour="zero1", micro_batch=1))
    shares = production_features(s, ev)[:len(FEATURE_BREAKDOWN_KEYS)]
    assert ev.breakdown["straggler_s"] > 0 and math.isclose(float(shares.sum()), 1.0, rel_tol=1e-5)
    # a launch-bound pass (8B at tp 8, one sequence a micro-batch): the host gap is counted with compute
    ev = evaluate(s, Config(tp=8, pp=1, dp=8, dp_flavour="zero1", micro_batch=1))
    shares = production_features(s, ev)[:len(FEATURE_BREAKDOWN_KEYS)]
    assert ev.breakdown["host_s"] > 0 and math.isclose(float(shares.sum()), 1.0, rel_tol=1e-5)

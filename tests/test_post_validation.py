"""Optimizer post-validation (WorkloadSpec.optimizer_post_validation; Qi et al. 2024, sec. 4): ZB-2p
loses the step's wait for the first forward, the event simulator agrees, and nothing else changes."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.configbatch import batch_from_configs
from autotune.costmodel import evaluate_batch
from autotune.costmodel.pipeline import S_ZB2P, bubble_time
from autotune.costmodel.xp import SCALAR
from autotune.specs import Config, build_scenario
from autotune.validation.row_fields import _post_validation


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 64), v=st.sampled_from([1, 2, 4]), t_f=st.floats(1e-4, 1.0), b=st.floats(0.5, 3.0),
       w=st.floats(0.2, 1.0), sched=st.integers(0, 6))
def test_post_validation_never_lengthens_the_bubble_and_changes_only_zb2p(p, v, t_f, b, w, sched):
    t_b = b * t_f
    t_w = w * t_b                        # the weight-gradient half of the backward, at most all of it
    sync = bubble_time(sched, p, v, t_f, t_b, t_w, SCALAR)
    post = bubble_time(sched, p, v, t_f, t_b, t_w, SCALAR, post_validation=True)
    assert 0.0 <= post <= sync + 1e-15
    if sched != S_ZB2P:                 # no step-end wait to remove, or (V schedules) not priced
        assert post == sync
    if sched == S_ZB2P and t_f + t_b <= 2 * t_w:        # Qi et al.'s zero bubble when W is long enough
        assert post == 0.0


def test_whole_step_faster_only_for_zb2p():
    s = build_scenario("llama3-8b", "single-building", gpus=64, global_batch=256)
    on = s.model_copy(update={"workload": s.workload.model_copy(update={"optimizer_post_validation": True})})
    cfgs = [Config(tp=2, pp=8, dp=4, pp_schedule=sch, pp_chunks=2 if sch in ("interleaved_1f1b", "zbv") else 1,
                   dp_flavour="zero1", micro_batch=1) for sch in ("1f1b", "interleaved_1f1b", "zb1p", "zb2p", "zbv")]
    b = batch_from_configs(cfgs)
    t0 = evaluate_batch(s, b, check=False)["iteration_time_s"]
    t1 = evaluate_batch(on, b, check=False)["iteration_time_s"]
    assert list(t1[:3]) == list(t0[:3]) and t1[4] == t0[4]
    assert t1[3] < t0[3]


@pytest.mark.parametrize("p", [2, 4, 8])
def test_the_simulator_agrees_without_the_step_sync(p):
    """F = B = W, no communication: the simulator's longest single-rank span equals the closed form
    with post-validation, and its makespan the closed form without."""
    import numpy as np

    from autotune.costmodel.simulator import simulate_pipeline
    m, t = 4 * p, 1.0
    r = simulate_pipeline("zb2p", p, 1, m, [t] * p, [t] * p, [t] * p, lambda a, b: 0.0)
    code = np.array(S_ZB2P)
    assert r.unsynchronised_s == pytest.approx(3 * m * t + float(bubble_time(code, p, 1, t, t, t, post_validation=True)))
    assert r.makespan_s == pytest.approx(3 * m * t + float(bubble_time(code, p, 1, t, t, t)))


def test_simulate_honours_the_flag():
    from autotune.costmodel.simulator import simulate
    s = build_scenario("llama3-8b", "single-building", gpus=64, global_batch=64)
    on = s.model_copy(update={"workload": s.workload.model_copy(update={"optimizer_post_validation": True})})
    cfg = Config(tp=2, pp=8, dp=4, pp_schedule="zb2p", dp_flavour="zero1", micro_batch=1)
    off_r, on_r = simulate(s, cfg), simulate(on, cfg)
    assert on_r["iteration_time_s"] < off_r["iteration_time_s"]
    for r in (off_r, on_r):     # the simulator referees the closed form either way
        assert r["iteration_time_s"] == pytest.approx(r["closed_form_iteration_time_s"], rel=0.03)


def test_scenario_key_unchanged_by_fields_at_their_defaults():
    """Studies stored before activation_memory, optimizer_post_validation and the later workload
    fields existed keep their key: the keys below hold for every commit from 87ea782 (before those
    fields) as long as the presets describe the same hardware. The hardware presets' HBM sizes
    changed on 2026-11-29 (usable GiB, constants.HBM_USABLE_GIB_PER_NOMINAL_GB), so the keys did:
    f26c0f00ff03e37e and 56f093432aab427f before it (a study made then was evaluated on the old
    capacity and does not resume on the new one)."""
    for (model, cluster, gpus), key in ((("llama3-8b", "single-building", 64), "06524ba7931c45dc"),
                                        (("deepseek-v3", "region-pair", None), "2dfa4c14659f6251")):
        s = build_scenario(model, cluster, gpus=gpus)
        assert s.key == key
        for field, value in (("optimizer_post_validation", True), ("activation_memory", "eager"),
                             ("moe_unpermute", "scatter_add")):
            other = s.model_copy(update={"workload": s.workload.model_copy(update={field: value})})
            assert other.key != key


@pytest.mark.parametrize("text,want", [("yes", True), ("--enable-optimizer-post-validation", True), ("Post-validation", True),
                                       ("no", False), ("", False), ("0", False)])
def test_column_spellings(text, want):
    assumed = []
    assert _post_validation({"optimizer_post_validation": text}, assumed, "zb2p") is want
    assert (assumed == ["optimizer_post_validation=no (not stated)"]) == (text == "")
    assert _post_validation({"optimizer_post_validation": ""}, [], "zbv") is False

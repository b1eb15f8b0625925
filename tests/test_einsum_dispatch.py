"""GShard-style einsum dispatch (WorkloadSpec.moe_einsum_dispatch; DeepSpeed-MoE's MOELayer), issue 13:
two (e c) x s x h GEMMs a MoE layer forward, three backward, the masks kept for the backward, no
permutation; its cost grows with the square of the layer's tokens."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.configbatch import batch_from_configs, scalar_row
from autotune.costmodel import evaluate_batch
from autotune.costmodel.compute_pass import pass_compute
from autotune.costmodel.params import default_params
from autotune.costmodel.scenario_consts import einsum_columns, scenario_consts
from autotune.costmodel.terms import compute_terms, layout
from autotune.costmodel.xp import SCALAR
from autotune.specs import Config, build_scenario

SETTINGS = settings(max_examples=20, deadline=None)


def _scen(model="mixtral-8x7b", **wl):
    s = build_scenario(model, "single-building", gpus=64, global_batch=256)
    return s.model_copy(update={"workload": s.workload.model_copy(update=wl)})


def test_mask_columns_follow_the_routing():
    p = default_params()
    cap = _scen(moe_einsum_dispatch=True, moe_routing="capacity", moe_capacity_factor=1.25)
    k = cap.model.moe_top_k
    assert einsum_columns(cap.workload, cap.model, p) == pytest.approx(k * 1.25)
    drop = _scen(moe_einsum_dispatch=True, moe_routing="dropless")
    assert einsum_columns(drop.workload, drop.model, p) == pytest.approx(k * p.dropless_expert_imbalance)
    assert einsum_columns(_scen(moe_einsum_dispatch=False).workload, cap.model, p) == 0.0
    dense = _scen("llama3-8b", moe_einsum_dispatch=True)
    assert einsum_columns(dense.workload, dense.model, p) == 0.0


@SETTINGS
@given(mb=st.sampled_from([1, 2, 4]), tp=st.sampled_from([1, 2]), ep=st.sampled_from([1, 8]))
def test_einsum_replaces_the_permutation_and_grows_with_the_square_of_the_tokens(mb, tp, ep):
    p = default_params()
    on, off = (scenario_consts(_scen(moe_einsum_dispatch=e, moe_routing="capacity"), p) for e in (True, False))
    a = compute_terms(on, p, mb, 1, tp, ep, tp, SCALAR)
    b = compute_terms(off, p, mb, 1, tp, ep, tp, SCALAR)
    assert a.moe_einsum > 0.0 and b.moe_einsum == 0.0
    assert a.moe_permute == 0.0 < b.moe_permute
    assert a.moe_lin == pytest.approx(b.moe_lin + 2.0 * a.moe_einsum)
    # twice the tokens: four times the FLOPs, at an efficiency no lower (a larger GEMM)
    a2 = compute_terms(on, p, 2 * mb, 1, tp, ep, tp, SCALAR)
    assert 2.0 * a.moe_einsum < a2.moe_einsum <= 4.0 * a.moe_einsum * (1 + 1e-9)


@SETTINGS
@given(ep=st.sampled_from([1, 2, 8]), cf=st.sampled_from([1.0, 1.25, 2.0]))
def test_every_expert_runs_its_padded_slots(ep, cf):
    """Einsum dispatch pads each expert to c slots: the routed load is the capacity factor at every
    ep (the permuting dispatcher's load is min(cf, imbalance) across EP ranks and the mean at ep 1)."""
    from autotune.costmodel.scenario_consts import ep_load
    p = default_params()
    k = scenario_consts(_scen(moe_einsum_dispatch=True, moe_routing="capacity", moe_capacity_factor=cf), p)
    assert ep_load(k, float(ep), SCALAR) == pytest.approx(cf)
    plain = scenario_consts(_scen(moe_routing="capacity", moe_capacity_factor=cf), p)
    assert ep_load(plain, 1.0, SCALAR) == 1.0


def test_einsum_refuses_the_megatron_only_dispatch_options():
    from autotune.errors import UserInputError
    with pytest.raises((ValueError, UserInputError)):
        _scen(moe_einsum_dispatch=True, ep_token_dedup=True).workload.model_validate(
            {**_scen().workload.model_dump(), "moe_einsum_dispatch": True, "ep_token_dedup": True})


@pytest.mark.parametrize("recompute,rc_code", [("none", 0), ("full", 2)])
def test_backward_has_two_input_gradients_and_one_weight_gradient(recompute, rc_code):
    """Per MoE layer, against the permuting dispatcher: forward +2 einsums - the permutation; backward
    +2 (the input gradients) - the permutation, and under full recomputation the forward again;
    weight gradients +1 (the combine weights')."""
    p = default_params()
    cfg = Config(tp=1, pp=1, dp=8, ep=8, micro_batch=1, recompute=recompute, dp_flavour="zero1")
    row = scalar_row(cfg)
    out = {}
    for e in (True, False):
        k = scenario_consts(_scen(moe_einsum_dispatch=e, moe_routing="capacity"), p)
        out[e] = pass_compute(k, p, row, layout(k, row, SCALAR), SCALAR, 1.0, 1.0, 1.0, 8.0, 1.0, rc_code)
    moe_layers = layout(k, row, SCALAR).Ls_moe
    ein = k.compute_scale * out[True].ct.moe_einsum * moe_layers
    perm = k.compute_scale * out[False].ct.moe_permute * moe_layers
    again = 1.0 if recompute == "full" else 0.0
    assert ein > 0.0 and perm > 0.0
    assert out[True].t_f - out[False].t_f == pytest.approx(2.0 * ein - perm)
    assert out[True].t_b - out[False].t_b == pytest.approx((1.0 + again) * (2.0 * ein - perm))
    assert out[True].t_w - out[False].t_w == pytest.approx(ein)


def test_einsum_dispatch_costs_time_and_memory_on_moe_only():
    cfg = Config(tp=1, pp=1, dp=64, ep=8, micro_batch=2, recompute="none", dp_flavour="zero1")
    b = batch_from_configs([cfg])
    on, off = (evaluate_batch(_scen(moe_einsum_dispatch=e, moe_routing="capacity"), b, check=False)
               for e in (True, False))
    assert on["iteration_time_s"][0] > off["iteration_time_s"][0]
    assert on["memory_per_gpu_bytes"][0] > off["memory_per_gpu_bytes"][0]
    dense = [evaluate_batch(_scen("llama3-8b", moe_einsum_dispatch=e), batch_from_configs(
        [Config(tp=1, pp=1, dp=64, micro_batch=2, recompute="none", dp_flavour="zero1")]), check=False)
        for e in (True, False)]
    assert dense[0]["iteration_time_s"][0] == dense[1]["iteration_time_s"][0]


def test_csv_names_the_einsum_dispatcher():
    from autotune.validation.runs_file import load_runs
    runs = load_runs(None)
    rows = [c for c in runs.cases if c.scenario.workload.moe_einsum_dispatch]
    assert rows and all(c.scenario.model.moe_experts for c in rows)

"""MoE dispatch physics (issue 13): a de-duplicating dispatcher (WorkloadSpec.ep_token_dedup:
DeepEP, HybridEP) and Megatron-Core's EP overlap (WorkloadSpec.ep_comm_overlap), as invariants."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.configbatch import batch_from_configs
from autotune.costmodel import evaluate_batch
from autotune.costmodel.collectives import dedup_share
from autotune.costmodel.xp import SCALAR
from autotune.specs import Config, build_scenario

SETTINGS = settings(max_examples=30, deadline=None)


@SETTINGS
@given(nodes=st.integers(1, 64), m=st.sampled_from([1, 2, 4, 8]), k=st.integers(1, 16))
def test_dedup_share_is_a_share_falls_with_top_k_and_is_one_inside_a_node(nodes, m, k):
    n = float(nodes * m)
    s = dedup_share(n, float(m), float(k), SCALAR)
    assert 0.0 < s <= 1.0
    assert dedup_share(n, float(m), float(k + 1), SCALAR) <= s + 1e-12
    if nodes == 1:
        assert s == 1.0
    if k == 1:      # one expert per token: nothing to de-duplicate
        assert abs(s - 1.0) < 1e-9


def _scen(model="deepseek-v3", **wl):
    s = build_scenario(model, "single-building", gpus=256, global_batch=1024)
    return s.model_copy(update={"workload": s.workload.model_copy(update=wl)})


@SETTINGS
@given(ep=st.sampled_from([8, 16, 32, 64]), mb=st.sampled_from([1, 2]), pp=st.sampled_from([1, 4, 8]),
       v=st.sampled_from([2, 4]))
def test_dedup_and_overlap_never_slow_a_step_and_keep_at_least_one_micro_batch_exposed(ep, mb, pp, v):
    sched = {"pp_schedule": "interleaved_1f1b", "pp_chunks": v} if pp > 1 else {}
    cfg = Config(tp=1, pp=pp, dp=256 // pp, ep=ep, micro_batch=mb, recompute="selective", dp_flavour="zero1",
                 **sched)
    b = batch_from_configs([cfg])
    base = evaluate_batch(_scen(), b, check=False)
    dedup = evaluate_batch(_scen(ep_token_dedup=True), b, check=False)
    both = evaluate_batch(_scen(ep_token_dedup=True, ep_comm_overlap=True), b, check=False)
    assert dedup["ep_comm_s"][0] <= base["ep_comm_s"][0] * (1 + 1e-12)
    if ep <= 8:     # EP inside one node: NVLink only, nothing crosses twice
        assert np.isclose(dedup["ep_comm_s"][0], base["ep_comm_s"][0])
    else:
        assert dedup["ep_comm_s"][0] < base["ep_comm_s"][0]
    assert both["ep_comm_s"][0] <= dedup["ep_comm_s"][0] * (1 + 1e-12)
    m, vv = float(base["micro_batches"][0]), (v if pp > 1 else 1)
    assert both["ep_comm_s"][0] >= dedup["ep_comm_s"][0] / (m * vv) * (1 - 1e-12)   # one chunk pass unpaired
    assert both["iteration_time_s"][0] <= base["iteration_time_s"][0] * (1 + 1e-12)


@pytest.mark.parametrize("update", [{"pp_schedule": "1f1b"}, {"pp_schedule": "gpipe"}, {"recompute": "full"}])
def test_overlap_is_not_credited_where_megatron_refuses_it(update):
    """Megatron-Core runs EP overlap at pp 1 or under the interleaved schedule, without full
    recomputation: elsewhere the flag changes nothing."""
    cfg = Config(tp=1, pp=8, dp=32, ep=32, micro_batch=1, recompute="selective", dp_flavour="zero1",
                 pp_schedule="interleaved_1f1b", pp_chunks=2).model_copy(update=update)
    if update.get("pp_schedule") in ("1f1b", "gpipe"):
        cfg = cfg.model_copy(update={"pp_chunks": 1})
    b = batch_from_configs([cfg])
    off, on = (evaluate_batch(_scen(ep_comm_overlap=o), b, check=False) for o in (False, True))
    assert on["ep_comm_s"][0] == off["ep_comm_s"][0] > 0.0


def test_overlap_needs_a_second_micro_batch():
    cfg = Config(tp=1, pp=1, dp=256, ep=32, micro_batch=4, recompute="full", dp_flavour="zero1")
    b = batch_from_configs([cfg])
    off, on = (evaluate_batch(_scen(ep_comm_overlap=o), b, check=False) for o in (False, True))
    assert off["micro_batches"][0] == 1.0 and on["ep_comm_s"][0] == off["ep_comm_s"][0]


def test_dispatcher_and_overlap_spellings():
    from autotune.validation.row_fields import _ep_dispatcher, _ep_overlap
    for text, want in (("DeepEP", (True, False)), ("hybridep (NVL72)", (True, False)), ("flex dispatcher", (True, False)),
                       ("alltoall", (False, False)), ("NCCL all-to-all", (False, False)), ("allgather", (False, False)),
                       ("einsum (DeepSpeed-MoE)", (False, True)), ("GShard one-hot", (False, True))):
        assert _ep_dispatcher({"ep_dispatcher": text}, [], 8) == want, text
    said = []
    assert _ep_dispatcher({"ep_dispatcher": ""}, said, 8) == (False, False)
    assert said == ["ep_dispatcher=alltoall (not stated)"]
    for text, want in (("yes", True), ("--overlap-moe-expert-parallel-comm", True), ("Off", False)):
        assert _ep_overlap({"ep_comm_overlap": text}, [], 8) is want, text


def test_megatron_launch_names_the_dispatcher_and_sets_ep_overlap_only_where_it_runs():
    from autotune.launch import megatron_args
    base = dict(tp=1, pp=8, dp=32, ep=32, micro_batch=1, dp_flavour="zero1")
    ok = Config(**base, recompute="selective", pp_schedule="interleaved_1f1b", pp_chunks=2)
    args, notes = megatron_args(_scen(ep_token_dedup=True, ep_comm_overlap=True), ok)
    assert "--moe-token-dispatcher-type flex" in args and "--moe-flex-dispatcher-backend deepep" in args
    assert "--overlap-moe-expert-parallel-comm" in args and not any("ep_comm_overlap" in n for n in notes)
    bad = Config(**base, recompute="full")
    args, notes = megatron_args(_scen(ep_comm_overlap=True), bad)
    assert "--moe-token-dispatcher-type alltoall" in args and "--overlap-moe-expert-parallel-comm" not in args
    assert any("ep_comm_overlap" in n for n in notes)


def test_megatron_launch_states_the_routing():
    from autotune.launch import megatron_args
    cfg = Config(tp=1, pp=8, dp=32, ep=32, micro_batch=1, dp_flavour="zero1", recompute="selective")
    args, _ = megatron_args(_scen(moe_routing="capacity", moe_capacity_factor=1.25), cfg)
    assert "--moe-expert-capacity-factor 1.25" in args and "--moe-router-force-load-balancing" not in args
    args, notes = megatron_args(_scen(moe_routing="balanced"), cfg)
    assert "--moe-router-force-load-balancing" in args and any("benchmarking" in n for n in notes)
    args, _ = megatron_args(_scen(), cfg)
    assert not any("capacity" in a or "force-load" in a for a in args)

"""Expert tensor parallelism (Megatron-Core's MoE parallel folding, issue 13): the experts' own TP
degree ``etp``. Invariants as property tests: etp = tp is the unfolded model, FLOPs do not depend
on etp, experts without TP hold tp / etp times the expert weights and skip the dispatcher's
gather of the routed tokens over the expert-TP group; and the space's legality rule."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.configbatch import batch_from_configs
from autotune.costmodel import evaluate, evaluate_batch
from autotune.space import SearchSpace
from autotune.specs import Config, build_scenario

SCEN = build_scenario("mixtral-8x7b", "single-building", gpus=64, global_batch=256)
SETTINGS = settings(max_examples=25, deadline=None)


def _cfg(tp, ep, etp, mb=1, flavour="zero1", rec="none"):
    dp = SCEN.n_gpus // tp
    return Config(tp=tp, ep=ep, etp=etp, dp=dp, micro_batch=mb, dp_flavour=flavour, recompute=rec)


degrees = st.sampled_from([(2, 4), (2, 8), (4, 8), (8, 8), (4, 2), (8, 4)])
knobs = dict(mb=st.sampled_from([1, 2]), flavour=st.sampled_from(["ddp", "zero1", "fsdp"]),
             rec=st.sampled_from(["none", "selective", "full"]))


@SETTINGS
@given(deg=degrees, **knobs)
def test_etp_equal_to_tp_is_the_unfolded_model(deg, mb, flavour, rec):
    tp, ep = deg
    a, b = (evaluate(SCEN, _cfg(tp, ep, e, mb, flavour, rec), check=False) for e in (0, tp))
    assert a.iteration_time_s == b.iteration_time_s and a.memory_per_gpu_bytes == b.memory_per_gpu_bytes


@SETTINGS
@given(deg=degrees, **knobs)
def test_folding_keeps_flops_drops_the_expert_tp_gather_and_holds_more_expert_weights(deg, mb, flavour, rec):
    tp, ep = deg
    if tp == 1:
        return
    cfgs = [_cfg(tp, ep, tp, mb, flavour, rec), _cfg(tp, ep, 1, mb, flavour, rec)]
    out = evaluate_batch(SCEN, batch_from_configs(cfgs))
    assert out["mfu"][0] * out["iteration_time_s"][0] == pytest.approx(out["mfu"][1] * out["iteration_time_s"][1])
    # Mixtral has no shared expert: its MoE blocks' TP traffic is the dispatcher's gather of the
    # routed tokens over the expert-TP group (charged with the EP exchange), gone under folding
    assert out["tp_comm_s"][1] == pytest.approx(out["tp_comm_s"][0])
    assert out["ep_comm_s"][1] < out["ep_comm_s"][0]
    if flavour != "fsdp":     # FSDP shards the expert weights over the (larger) expert-DP group
        assert out["memory_per_gpu_bytes"][1] > out["memory_per_gpu_bytes"][0]


def test_a_batch_without_an_etp_column_reads_as_etp_0():
    cfgs = [_cfg(4, 8, 0), _cfg(2, 4, 0, flavour="fsdp")]
    full = batch_from_configs(cfgs)
    bare = {k: v for k, v in full.items() if k != "etp"}
    a, b = evaluate_batch(SCEN, full), evaluate_batch(SCEN, bare)
    assert np.array_equal(a["iteration_time_s"], b["iteration_time_s"])


def test_space_rule_for_etp():
    space = SearchSpace(SCEN)
    ok = [_cfg(4, 8, 1), _cfg(4, 8, 2), _cfg(4, 8, 0)]
    bad = [_cfg(4, 8, 3), _cfg(8, 8, 1).model_copy(update={"ep": 16})]
    mask = space.legal_mask(batch_from_configs(ok + bad))
    assert list(mask) == [True, True, True, False, False]
    dense = SearchSpace(build_scenario("llama3-8b", "single-building", gpus=64, global_batch=256))
    c = Config(tp=2, etp=1, dp=dense.scenario.n_gpus // 2)
    assert not dense.legal_mask(batch_from_configs([c]))[0]
    assert dense.legal_mask(batch_from_configs([c.model_copy(update={"etp": 0})]))[0]


def test_folded_expert_dp_must_span_the_buildings_under_dp_out():
    """ep = 8 over tp x dp = 8 GPUs of 2 buildings leaves one expert-DP member: the EP group itself
    would cross the buildings, which dp_out does not price (review of this change)."""
    s = build_scenario("mixtral-8x7b", "metro-2bldg", gpus=8, global_batch=16)
    space = SearchSpace(s)
    folded = Config(tp=4, ep=8, etp=1, dp=2, placement="dp_out")
    ok = Config(tp=4, ep=4, etp=1, dp=2, placement="dp_out")
    mask = space.legal_mask(batch_from_configs([folded, ok]))
    assert list(mask) == [False, True]


def test_shared_experts_keep_their_tp_collectives():
    s = build_scenario("llama4-maverick", "single-building", gpus=64, global_batch=256)
    assert s.model.moe_shared_experts > 0
    cfgs = [Config(tp=4, ep=8, etp=e, dp=16) for e in (0, 1)]
    out = evaluate_batch(s, batch_from_configs(cfgs), check=False)
    assert out["tp_comm_s"][0] == out["tp_comm_s"][1]


def test_config_at_and_launch_files_carry_etp():
    from autotune.configbatch import config_at
    from autotune.launch import megatron_args
    b = batch_from_configs([_cfg(4, 8, 1)])
    assert config_at(b, 0).etp == 1
    assert config_at({k: v for k, v in b.items() if k != "etp"}, 0).etp == 0
    args, _ = megatron_args(SCEN, _cfg(4, 8, 1))
    assert "--expert-tensor-parallel-size 1" in args
    assert not any("expert-tensor" in a for a in megatron_args(SCEN, _cfg(4, 8, 0))[0])


@pytest.mark.parametrize("tp, ep", [(2, 4), (4, 8), (8, 8)])
def test_unfolded_experts_gather_top_k_copies_of_each_token_over_their_tp_group(tp, ep):
    """Megatron-Core's all-to-all dispatcher all-gathers the routed tokens it received over the
    expert-TP group (gather_from_sequence_parallel_region) and reduce-scatters them in the combine:
    at etp = tp a gathered buffer of tok x top_k rows, top_k (2 for Mixtral) times a dense
    sequence all-gather. The EP term grows by at least those bytes at NVLink's peak rate, 4
    collectives per MoE layer and micro-batch (dispatch and combine, forward and backward)."""
    out = evaluate_batch(SCEN, batch_from_configs([_cfg(tp, ep, tp), _cfg(tp, ep, 1)]))
    m, L = SCEN.global_batch_seqs // (SCEN.n_gpus // tp), SCEN.model.n_layers
    tok_bytes = SCEN.seq_len * SCEN.model.moe_top_k * SCEN.model.hidden * 2
    nvlink = SCEN.cluster.buildings[0].gpu.nvlink_bandwidth_Bps
    floor = 4 * m * L * (tp - 1) / tp * tok_bytes / nvlink
    assert out["ep_comm_s"][0] - out["ep_comm_s"][1] >= floor

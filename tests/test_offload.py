"""Fine-grained activation offloading (WorkloadSpec.offload_modules, Megatron-Core's
--offload-modules): each module's input leaves HBM for host memory in the forward and returns for
the backward over the GPU's host link (HardwareSpec.host_link_Bps); docs/cost_model.md."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autotune.validation as V
from autotune.costmodel import constants as C
from autotune.costmodel import evaluate
from autotune.specs import Config, Scenario, build_scenario
from autotune.specs.workload import OFFLOAD_MODULES, WorkloadSpec
from autotune.validation.columns import map_offload_modules

from test_runs_schema import _write

CFG = Config(tp=2, ep=8, pp=4, dp=8, pp_schedule="1f1b", micro_batch=1, recompute="selective")


def _moe(mods=(), *over, gpus=64):
    sets = ([f"workload.offload_modules={','.join(mods)}"] if mods else []) + list(over)
    return build_scenario("mixtral-8x7b", "single-building", gpus=gpus, overrides=sets)


def _host_link(s, Bps):
    d = s.model_dump()
    for b in d["cluster"]["buildings"]:
        b["gpu"]["host_link_Bps"] = Bps
    return Scenario.model_validate(d)


def _mem(s, cfg=CFG):
    return evaluate(s, cfg, check=False).memory_per_gpu_bytes


def test_nothing_offloaded_is_the_default_and_leaves_the_scenario_key_alone():
    a = build_scenario("mixtral-8x7b", "single-building")
    assert a.workload.offload_modules == ()
    b = _host_link(a, 1e9)
    assert a.key == b.key          # the host link matters only where something is offloaded
    assert _moe(("expert_fc1",)).key != a.key


def test_expert_fc1_frees_the_permuted_copies_but_one_layer():
    """Mixtral-8x7B, tp 2, pp 4 (8 layers a stage), 1F1B: the first stage holds 4 micro-batches;
    expert_fc1 takes each routed copy's h-wide input (top-2 x the dropless imbalance, bf16) off
    all of them except the layer in transit."""
    from autotune.costmodel.params import default_params
    s0, s1 = _moe(), _moe(("expert_fc1",))
    tok, h, tp = 4096, 4096, 2
    per_layer = 2.0 * tok / tp * 2 * default_params().dropless_expert_imbalance * h
    saved = 4 * 8 * per_layer - per_layer
    assert _mem(s0) - _mem(s1) == pytest.approx(saved, rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(st.sets(st.sampled_from([m for m in OFFLOAD_MODULES if m not in ("attn_proj", "fused_group_mlp")])),
       st.sampled_from(["attn_norm", "qkv_linear", "core_attn", "mlp_norm", "expert_fc1", "moe_act"]))
def test_one_more_module_never_holds_more(mods, extra):
    a, b = _moe(tuple(mods)), _moe(tuple(mods | {extra}))
    assert _mem(b) <= _mem(a) * (1 + 1e-12)


def test_full_recomputation_offloads_nothing():
    full = CFG.model_copy(update={"recompute": "full"})
    a, b = _moe(), _moe(("core_attn", "attn_proj", "expert_fc1", "moe_act"))
    ea, eb = evaluate(a, full, check=False), evaluate(b, full, check=False)
    assert ea.memory_per_gpu_bytes == eb.memory_per_gpu_bytes and ea.iteration_time_s == eb.iteration_time_s


def test_a_slow_host_link_lengthens_the_step_and_a_fast_one_hides_the_copies():
    """qkv_linear's inputs (8 layers x 2,048 tokens x 4,096 x 2 B = 134 MB a micro-batch) hide
    behind the forward at PCIe 5.0 and make each pass last their copies at 1 GB/s; all of the
    attention's and the experts' inputs (~3.1 GB) outlast the forward even at PCIe 5.0."""
    base = evaluate(_moe(), CFG, check=False).iteration_time_s
    fast = evaluate(_moe(("qkv_linear",)), CFG, check=False).iteration_time_s
    slow = evaluate(_host_link(_moe(("qkv_linear",)), 1e9), CFG, check=False).iteration_time_s
    heavy = evaluate(_moe(("core_attn", "attn_proj", "expert_fc1", "moe_act")), CFG, check=False).iteration_time_s
    assert fast == pytest.approx(base, rel=1e-9)
    assert slow > 2 * base
    assert heavy > 1.05 * base


@pytest.mark.parametrize("mods, words", [
    ("attn_proj", "needs core_attn"),
    ("fused_group_mlp,moe_act", "without expert_fc1 or moe_act"),
    ("banana", "offload_modules"),
])
def test_bad_module_lists_are_refused(mods, words):
    with pytest.raises(ValueError, match=words):
        WorkloadSpec(offload_modules=mods)


def test_moe_modules_need_experts_and_no_whole_moe_recompute():
    with pytest.raises(ValueError, match="mixture-of-experts"):
        build_scenario("llama3-8b", "single-building", overrides=["workload.offload_modules=expert_fc1"])
    with pytest.raises(ValueError, match="recompute_modules moe"):
        WorkloadSpec(offload_modules="moe_act", recompute_modules="moe")
    with pytest.raises(ValueError, match="fused"):
        WorkloadSpec(offload_modules="core_attn", activation_memory="eager")


def test_spellings_and_the_runs_column(tmp_path):
    assert map_offload_modules("fine-grained activation offloading of expert_fc1 and moe_act (required)") \
        == "expert_fc1,moe_act"
    assert map_offload_modules("--fine-grained-activation-offloading --offload-modules core_attn attn_proj") \
        == "core_attn,attn_proj"
    assert map_offload_modules("none") == "" and map_offload_modules("fc1, rope") is None
    p = _write(tmp_path, [
        {"offload_modules": "fc1+act", "moe_experts": "8", "moe_topk": "2"},
        {"offload_modules": "core_attn, rope"},
        {"offload_modules": "attn_proj"},
    ])
    cases, skipped = V.read_runs(p)
    assert [c.scenario.workload.offload_modules for c in cases] == [("expert_fc1", "moe_act")]
    assert len(skipped) == 2 and skipped[0].get("column") == "offload_modules"
    assert skipped[0].get("value") == "core_attn, rope" and "needs core_attn" in skipped[1]["reason"]


def test_megatron_launch_flags():
    from autotune.launch import megatron_args
    args, _ = megatron_args(_moe(("expert_fc1", "moe_act")), CFG)
    assert "--fine-grained-activation-offloading" in args and "--offload-modules expert_fc1 moe_act" in args
    args, _ = megatron_args(_moe(), CFG)
    assert not any("offload" in a for a in args)


def test_host_link_efficiency_is_a_share():
    assert 0.0 < C.HOST_LINK_EFFICIENCY <= 1.0


def test_the_host_link_enters_the_key_once_something_is_offloaded():
    a = _moe(("expert_fc1",))
    assert _host_link(a, 1e9).key != a.key


def test_mla_modules_recomputed_are_not_offloaded_again():
    """DeepSeek-V3 (MLA): under selective recomputation with mla_up_proj the up-projected queries,
    keys and values are not kept, so core_attn has (almost) nothing of them to offload; with
    layernorm the input norm's output, qkv_linear's input, is not kept either."""
    cfg = Config(tp=2, pp=8, ep=8, dp=16, pp_schedule="1f1b", micro_batch=1, recompute="selective")

    def mem(off, rc_mods):
        s = build_scenario("deepseek-v3", "single-building", gpus=256, overrides=[
            f"workload.recompute_modules={rc_mods}"] + ([f"workload.offload_modules={off}"] if off else []))
        return evaluate(s, cfg, check=False).memory_per_gpu_bytes
    plain = mem("", "core_attn") - mem("core_attn", "core_attn")
    after_up = mem("", "core_attn,mla_up_proj") - mem("core_attn", "core_attn,mla_up_proj")
    assert plain > 1e9 and 0.0 <= after_up < 0.2 * plain
    assert mem("", "core_attn,layernorm") == pytest.approx(mem("qkv_linear", "core_attn,layernorm"), rel=1e-12)
    assert mem("qkv_linear", "core_attn") < mem("", "core_attn")


def test_batches_agree_with_one_row_at_a_time():
    import numpy as np
    from autotune.configbatch import config_at
    from autotune.costmodel import evaluate_batch
    from autotune.space import SearchSpace
    s = _moe(("core_attn", "attn_proj", "expert_fc1", "moe_act"), gpus=256)
    batch = SearchSpace(s).sample(300, np.random.default_rng(1))
    out = evaluate_batch(s, batch, check=False)
    for i in range(0, 300, 17):
        one = evaluate(s, config_at(batch, i), check=False)
        assert out["iteration_time_s"][i] == pytest.approx(one.iteration_time_s, rel=1e-9)
        assert out["memory_per_gpu_bytes"][i] == pytest.approx(one.memory_per_gpu_bytes, rel=1e-9)


def test_no_offload_flags_under_full_recomputation():
    from autotune.launch import megatron_args
    args, notes = megatron_args(_moe(("expert_fc1",)), CFG.model_copy(update={"recompute": "full"}))
    assert not any("offload" in a for a in args) and any("offload_modules" in n for n in notes)

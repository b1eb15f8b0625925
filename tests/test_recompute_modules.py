"""Selective recomputation by module (WorkloadSpec.recompute_modules, Megatron-Core's
--recompute-modules): each module drops what it keeps for the backward and re-runs its forward
there (docs/cost_model.md, "Recomputation by module")."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autotune.validation as V
from autotune.costmodel import evaluate
from autotune.specs import Config, build_scenario
from autotune.specs.workload import RECOMPUTE_MODULES, WorkloadSpec
from autotune.validation.columns import map_recompute_modules

from test_runs_schema import _write


def _moe(mods=("core_attn",), **over):
    """Mixtral-8x7B with one shared expert (so that every module applies)."""
    sets = [f"workload.recompute_modules={','.join(mods)}", "model.moe_shared_experts=1"] + [
        f"{k}={v}" for k, v in over.items()]
    return build_scenario("mixtral-8x7b", "single-building", gpus=64, overrides=sets)


GQA_MODULES = tuple(m for m in RECOMPUTE_MODULES if m != "mla_up_proj")
CONFIGS = (Config(tp=2, ep=8, pp=4, dp=8, pp_schedule="1f1b", micro_batch=1, recompute="selective"),
           Config(tp=1, ep=8, pp=1, dp=64, dp_flavour="zero1", micro_batch=2, recompute="selective"),
           Config(tp=4, ep=4, pp=2, dp=8, pp_schedule="interleaved_1f1b", pp_chunks=2, micro_batch=1,
                  recompute="selective"))


@settings(max_examples=40, deadline=None)
@given(st.sets(st.sampled_from(GQA_MODULES), min_size=1), st.sampled_from(GQA_MODULES), st.sampled_from(CONFIGS))
def test_one_more_module_never_holds_more_or_runs_faster(mods, extra, cfg):
    """Adding a module to the list: memory never grows, the step never gets shorter."""
    a = evaluate(_moe(tuple(mods)), cfg, check=False)
    b = evaluate(_moe(tuple(mods | {extra})), cfg, check=False)
    assert b.memory_per_gpu_bytes <= a.memory_per_gpu_bytes * (1 + 1e-12)
    assert b.iteration_time_s >= a.iteration_time_s * (1 - 1e-12)


def test_modules_matter_only_under_selective_and_the_default_is_the_attention_core():
    for rc in ("none", "full"):
        cfg = CONFIGS[0].model_copy(update={"recompute": rc})
        a, b = evaluate(_moe(), cfg, check=False), evaluate(_moe(("layernorm", "moe")), cfg, check=False)
        assert (a.iteration_time_s, a.memory_per_gpu_bytes) == (b.iteration_time_s, b.memory_per_gpu_bytes)
    assert WorkloadSpec().recompute_modules == ("core_attn",)
    assert _moe().key == build_scenario("mixtral-8x7b", "single-building", gpus=64,
                                        overrides=["model.moe_shared_experts=1"]).key
    assert _moe(("layernorm", "moe_act")).key != _moe().key


def test_the_moe_block_is_the_big_saving_for_many_routed_copies():
    """Top-2 of 8 experts at 14,336 wide: recomputing the MoE block drops its routed copies and
    intermediates, more than the norms and the activation together; it costs the block's
    forward and its dispatch and combine again."""
    cfg = CONFIGS[0]
    base = evaluate(_moe(), cfg, check=False)
    small = evaluate(_moe(("core_attn", "layernorm", "moe_act")), cfg, check=False)
    whole = evaluate(_moe(("core_attn", "layernorm", "moe")), cfg, check=False)
    assert whole.memory_per_gpu_bytes < small.memory_per_gpu_bytes < base.memory_per_gpu_bytes
    assert whole.iteration_time_s > small.iteration_time_s > base.iteration_time_s


def test_spellings_and_canonical_order():
    assert WorkloadSpec(recompute_modules="moe_act, layernorm").recompute_modules == ("layernorm", "moe_act")
    assert map_recompute_modules("--recompute-modules moe_act layernorm") == "moe_act,layernorm"
    assert map_recompute_modules("'norm, act, shared_expert'") == "layernorm,moe_act,shared_experts"
    assert map_recompute_modules("selective 'layernorm moe'") == "layernorm,moe"
    assert map_recompute_modules("--recompute-modules mlp up_proj") == "mlp,mla_up_proj"
    assert map_recompute_modules("mlp, rope") is None
    assert map_recompute_modules("core_attn") == "core_attn"


@pytest.mark.parametrize("bad", [{"recompute_modules": "foo"},
                                 {"recompute_modules": "mlp", "activation_memory": "eager"}])
def test_bad_module_lists_are_refused(bad):
    with pytest.raises(ValueError, match="recompute_modules|core_attn"):
        WorkloadSpec(**bad)


def test_runs_column(tmp_path):
    p = _write(tmp_path, [
        {"recompute": "selective", "recompute_modules": "norm, act", "moe_experts": "8", "moe_topk": "2"},
        {"recompute": "", "recompute_modules": "--recompute-modules layernorm", "micro_batch": "1"},
        {"recompute": "full", "recompute_modules": "layernorm"},
        {"recompute": "selective", "recompute_modules": "mla_up_proj mlp"},      # GQA model: no MLA
        {"recompute": "selective", "recompute_modules": "mlp, rope"},
    ])
    cases, skipped = V.read_runs(p)
    assert [c.scenario.workload.recompute_modules for c in cases] == [("layernorm", "moe_act"), ("layernorm",)]
    assert cases[1].config.recompute == "selective" and cases[1].recompute_stated
    assert "recompute=selective (recompute_modules stated)" in cases[1].assumptions
    assert len(skipped) == 3 and skipped[0].get("column") == skipped[2].get("column") == "recompute_modules"
    assert map_recompute_modules("--recompute-granularity selective --recompute-modules moe-act moe_layer") == "moe_act,moe"
    assert "need recompute selective" in skipped[0]["reason"]
    assert "mla_up_proj" in skipped[1]["reason"] and "multi-latent" in skipped[1]["reason"]
    assert skipped[1].get("column") == "recompute_modules"
    assert skipped[2].get("value") == "mlp, rope"


def test_launch_notes_name_the_modules():
    from autotune.launch import megatron_args
    args, _ = megatron_args(_moe(("layernorm", "moe_act")), CONFIGS[1])
    assert "--recompute-granularity selective" in args and "--recompute-modules layernorm moe_act" in args
    args, _ = megatron_args(_moe(), CONFIGS[1])
    assert not any(a.startswith("--recompute-modules") for a in args)


def test_attention_keeps_each_tensor_at_its_width():
    """Multi-head attention with heads x head_dim = h keeps Korthikanti's 5h elements (10 sbh);
    GQA keeps narrower keys and values; DeepSeek-V3's MLA keeps its 128 up-projected heads
    (q and k 192 wide, v 128) and its two latents: 13x h, of which mla_up_proj drops 9.1x h."""
    gpt3 = build_scenario("gpt3-175b", "single-building", gpus=64).model
    llama = build_scenario("llama3-70b", "single-building", gpus=64).model
    ds = build_scenario("deepseek-v3", "single-building", gpus=64).model
    assert gpt3.attention_saved_elems == 5 * gpt3.hidden and gpt3.mla_up_elems == 0 and gpt3.mla_up_gemms == ()
    assert llama.attention_saved_elems == 8192 + 8192 + 2 * 1024 + 8192
    assert ds.attention_saved_elems == 7168 + 24576 + 128 * (192 + 128) + 16384 + 2 * (1536 + 512)
    assert ds.mla_up_elems == 24576 + 128 * (192 + 128)
    assert ds.mla_up_gemms == ((1536, 128 * 192), (512, 128 * (128 + 128)))
    lite = ds.model_copy(update={"q_lora_rank": 0})          # DeepSeek-V2-Lite style: no query latent
    assert lite.mla_up_gemms[0] == (7168, 128 * 192)


def test_mla_up_proj_trades_memory_for_the_up_projections():
    over = ["workload.recompute_modules=core_attn,mla_up_proj"]
    base = build_scenario("deepseek-v3", "single-building", gpus=1024)
    up = build_scenario("deepseek-v3", "single-building", gpus=1024, overrides=over)
    cfg = Config(tp=1, ep=64, pp=16, dp=64, pp_schedule="1f1b", micro_batch=1, recompute="selective")
    a, b = evaluate(base, cfg, check=False), evaluate(up, cfg, check=False)
    assert b.memory_per_gpu_bytes < a.memory_per_gpu_bytes and b.iteration_time_s > a.iteration_time_s
    with pytest.raises(ValueError, match="mla_up_proj needs multi-latent attention"):
        _moe(("mla_up_proj",))


def test_modules_that_do_not_apply_are_refused():
    with pytest.raises(ValueError, match="need a mixture-of-experts model"):
        build_scenario("llama3-8b", "single-building", gpus=8, overrides=["workload.recompute_modules=moe_act"])
    with pytest.raises(ValueError, match="needs shared experts"):
        build_scenario("mixtral-8x7b", "single-building", gpus=8, overrides=["workload.recompute_modules=shared_experts"])
    with pytest.raises(ValueError, match="core_attn only"):     # with_workload validates again
        _moe().with_workload(activation_memory="eager", recompute_modules=("mlp",))


def test_full_recomputation_re_runs_at_least_what_any_module_list_does():
    """Full recomputation re-runs every layer's forward, the MoE dispatch and combine and the TP
    collectives included: never faster, and never holding more, than selective with every module."""
    every = tuple(m for m in GQA_MODULES)
    for cfg in CONFIGS:
        full = evaluate(_moe(every), cfg.model_copy(update={"recompute": "full"}), check=False)
        sel = evaluate(_moe(every), cfg, check=False)
        assert full.iteration_time_s >= sel.iteration_time_s
        assert full.memory_per_gpu_bytes <= sel.memory_per_gpu_bytes


def test_ep_overlap_is_off_under_the_moe_module():
    from autotune.launch import megatron_args
    scen = _moe(("layernorm", "moe"), **{"workload.ep_comm_overlap": "true", "workload.ep_token_dedup": "true"})
    args, notes = megatron_args(scen, CONFIGS[1])
    assert "--overlap-moe-expert-parallel-comm" not in args and any("moe recompute module" in n for n in notes)
    cfg = CONFIGS[1]
    on = evaluate(_moe(("layernorm", "moe_act"), **{"workload.ep_comm_overlap": "true"}), cfg, check=False)
    off = evaluate(_moe(("layernorm", "moe_act")), cfg, check=False)
    assert on.iteration_time_s < off.iteration_time_s       # overlap hides some all-to-all
    on_m = evaluate(_moe(("layernorm", "moe"), **{"workload.ep_comm_overlap": "true"}), cfg, check=False)
    off_m = evaluate(_moe(("layernorm", "moe")), cfg, check=False)
    assert on_m.iteration_time_s == off_m.iteration_time_s  # refused under the moe module

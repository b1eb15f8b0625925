"""Activations an fp8 run keeps: TransformerEngine saves each GEMM input its weight gradient needs
as one 1-byte copy (constants.ACT_FP8_GEMM_INPUT_CUT_SHARE; memory.act_per_microbatch)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.costmodel import evaluate
from autotune.costmodel.memory import act_per_microbatch
from autotune.costmodel.params import default_params
from autotune.costmodel.scenario_consts import ep_load, scenario_consts
from autotune.costmodel.xp import SCALAR
from autotune.specs import Config, build_scenario
from autotune.specs.codes import Recompute

R_NONE, R_SELECTIVE, R_FULL = Recompute.codes()


def _acts(model: str, precision: str, rc: int, tok: float, tp: int, ep: int = 1, overrides=()):
    scen = build_scenario(model, "single-building", gpus=64,
                          overrides=[f"workload.precision={precision}", *overrides])
    k = scenario_consts(scen, default_params())
    m = scen.model
    n_moe = m.n_moe_layers
    load = float(ep_load(k, ep, SCALAR))     # the busiest EP rank's routed copies over the mean
    return scen, act_per_microbatch(k, rc, tok, tp, ep, float(m.n_layers), float(m.n_layers - n_moe),
                                    float(n_moe), SCALAR), load


def test_a_dense_layer_keeps_its_three_gemm_inputs_at_one_byte():
    """Llama-3 8B (h 4,096, FFN 14,336, GQA): the QKV projection's normed input (h), fc1's normed
    input (h) and fc2's input (the FFN's width) each keep 1 B instead of 2; nothing else changes."""
    tok, tp = 8192.0, 2
    scen, (bf16, bf16_layer), _ = _acts("llama3-8b", "bf16", R_NONE, tok, tp)
    _, (fp8, fp8_layer), _ = _acts("llama3-8b", "fp8", R_NONE, tok, tp)
    m = scen.model
    per_token_layer = 1.0 * (m.hidden + m.hidden + m.ffn_hidden)      # bytes each no longer keeps
    assert bf16 - fp8 == pytest.approx(tok / tp * per_token_layer * m.n_layers, rel=1e-12)
    assert bf16_layer - fp8_layer == pytest.approx(tok / tp * per_token_layer, rel=1e-12)


def test_full_recomputation_keeps_the_16_bit_layer_input_either_way():
    _, (bf16, _), _ = _acts("llama3-8b", "bf16", R_FULL, 4096.0, 1)
    _, (fp8, _), _ = _acts("llama3-8b", "fp8", R_FULL, 4096.0, 1)
    assert bf16 == fp8


def test_an_moe_layer_keeps_each_routed_copys_inputs_at_one_byte():
    """Mixtral-8x7B (top-2 of 8 experts 14,336 wide, h 4,096): per routed copy the permuted input (h)
    and fc2's input (the expert's width) halve, on the busiest EP rank's copies (``ep_load``); the
    attention's QKV input as in a dense layer."""
    tok, tp, ep = 4096.0, 1, 8
    scen, (bf16, _), load = _acts("mixtral-8x7b", "bf16", R_NONE, tok, tp, ep)
    _, (fp8, _), load = _acts("mixtral-8x7b", "fp8", R_NONE, tok, tp, ep)
    m = scen.model
    routed = m.moe_top_k * load * (m.hidden + m.moe_ffn_hidden)
    assert bf16 - fp8 == pytest.approx(tok / tp * (m.hidden + routed) * m.n_layers, rel=1e-9)


def test_mla_keeps_its_down_projections_input_at_16_bits():
    """DeepSeek-V3: Megatron-Core saves MLA's down projections' input at 16 bits
    (save_original_input); only the up projections' normed latents (q_lora + kv_lora) drop to 1 B."""
    tok = 4096.0
    scen, (bf16, _), load = _acts("deepseek-v3", "bf16", R_NONE, tok, 1, 8)
    _, (fp8, _), load = _acts("deepseek-v3", "fp8", R_NONE, tok, 1, 8)
    m = scen.model
    n_moe = m.n_moe_layers
    attn = m.q_lora_rank + m.kv_lora_rank
    dense = m.hidden + m.ffn_hidden
    routed = m.moe_top_k * load * (m.hidden + m.moe_ffn_hidden) + m.moe_shared_experts * m.moe_ffn_hidden
    expected = tok * (attn * m.n_layers + dense * (m.n_layers - n_moe) + routed * n_moe)
    assert bf16 - fp8 == pytest.approx(expected, rel=1e-9)


CONFIGS = (Config(tp=2, ep=8, pp=4, dp=8, pp_schedule="1f1b", micro_batch=1, recompute="selective"),
           Config(tp=1, ep=8, pp=1, dp=64, dp_flavour="zero1", micro_batch=2, recompute="none"),
           Config(tp=4, ep=4, pp=2, dp=8, pp_schedule="interleaved_1f1b", pp_chunks=2, micro_batch=1,
                  recompute="selective"),
           Config(tp=8, ep=1, pp=2, dp=4, pp_schedule="1f1b", micro_batch=2, recompute="full"))


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(("mixtral-8x7b", "llama3-70b", "deepseek-v3")), st.sampled_from(CONFIGS),
       st.sets(st.sampled_from(("core_attn", "layernorm", "moe_act", "mlp", "moe", "shared_experts")),
               min_size=1))
def test_fp8_never_keeps_more_than_bf16(model, cfg, mods):
    """Same layout and recomputation: an fp8 run's memory per GPU is never above bf16's (its
    weights, gradients and optimizer states are the same bytes without fp8_param_gather)."""
    if model == "llama3-70b":
        mods = {m for m in mods if m in ("core_attn", "layernorm", "mlp")} or {"core_attn"}
        cfg = cfg.model_copy(update={"ep": 1, "dp": cfg.dp * cfg.ep})
    over = [f"workload.recompute_modules={','.join(sorted(mods))}"]
    if model == "mixtral-8x7b":
        over.append("model.moe_shared_experts=1")
    a = evaluate(build_scenario(model, "single-building", gpus=64, overrides=over + ["workload.precision=bf16"]),
                 cfg, check=False)
    b = evaluate(build_scenario(model, "single-building", gpus=64, overrides=over + ["workload.precision=fp8"]),
                 cfg, check=False)
    assert b.memory_per_gpu_bytes <= a.memory_per_gpu_bytes * (1 + 1e-12)


def _sel(model, precision, mods, tok, tp, ep=1, extra=()):
    return _acts(model, precision, R_SELECTIVE, tok, tp, ep,
                 overrides=[f"workload.recompute_modules={','.join(mods)}", *extra])


def test_a_recomputed_module_drops_only_what_fp8_kept():
    """A module that recomputes drops the bytes the run kept: under fp8 the 1-byte copies, so the
    bf16 - fp8 gap is what the modules left kept (each case's gap derived by hand)."""
    tok = 4096.0
    scen, (b, _), _ = _sel("llama3-8b", "bf16", ("core_attn", "mlp"), tok, 1)
    _, (f, _), _ = _sel("llama3-8b", "fp8", ("core_attn", "mlp"), tok, 1)
    m = scen.model
    assert b - f == pytest.approx(tok * m.hidden * m.n_layers, rel=1e-12)     # the QKV input alone
    one = ["model.moe_shared_experts=1"]
    gaps = {}
    for mods in (("core_attn", "moe_act"), ("core_attn", "moe"), ("core_attn", "shared_experts")):
        scen, (b, _), load = _sel("mixtral-8x7b", "bf16", mods, tok, 1, 8, one)
        _, (f, _), load = _sel("mixtral-8x7b", "fp8", mods, tok, 1, 8, one)
        gaps[mods[1]] = (b - f) / (tok * scen.model.n_layers)
    m, copies = scen.model, scen.model.moe_top_k * load
    assert gaps["moe_act"] == pytest.approx(m.hidden + copies * m.hidden + m.moe_ffn_hidden, rel=1e-9)
    assert gaps["moe"] == pytest.approx(m.hidden, rel=1e-9)
    assert gaps["shared_experts"] == pytest.approx(m.hidden + copies * (m.hidden + m.moe_ffn_hidden), rel=1e-9)


def test_offloaded_gemm_inputs_move_as_their_one_byte_copies():
    from autotune.costmodel.memory import offload_bytes
    out = {}
    for prec in ("bf16", "fp8"):
        for mods in ("expert_fc1", "moe_act"):
            scen = build_scenario("mixtral-8x7b", "single-building", gpus=64, overrides=[
                f"workload.precision={prec}", f"workload.offload_modules={mods}"])
            k = scenario_consts(scen, default_params())
            out[prec, mods] = offload_bytes(k, R_SELECTIVE, 4096.0, 1, 8, 32.0, 32.0, SCALAR)
    assert out["fp8", "expert_fc1"][0] == pytest.approx(0.5 * out["bf16", "expert_fc1"][0], rel=1e-12)
    assert out["fp8", "moe_act"] == out["bf16", "moe_act"]       # fc1's output stays 16-bit


def test_a_narrow_ffn_never_keeps_less_than_nothing():
    """An FFN far narrower than h (512 at h 4,096): recomputing the MLP never adds memory."""
    narrow = ["model.ffn_hidden=512"]
    _, (a, _), _ = _sel("llama3-8b", "fp8", ("core_attn",), 4096.0, 1, extra=narrow)
    _, (b, _), _ = _sel("llama3-8b", "fp8", ("core_attn", "mlp"), 4096.0, 1, extra=narrow)
    assert 0 < b <= a

"""What the backward runs again under recomputation, beyond the compute (``compute_pass``) and the
memory (``memory``): the TP collectives, the MoE all-to-alls and the recomputed FLOPs, by
``recompute`` and WorkloadSpec.recompute_modules (Megatron-Core's --recompute-modules)."""
from __future__ import annotations

from ..specs.codes import Recompute

R_FULL, R_SELECTIVE = int(Recompute.FULL), int(Recompute.SELECTIVE)


def tp_collectives_rerun(k, rc, tp_colls, Ls_dense, Ls_moe, moe_tp, xp):
    """TP collectives the backward runs again per micro-batch: all of them under full
    recomputation, those of the MLP blocks the selective modules re-run (mlp; moe or shared_experts)."""
    mods = k.rc_modules
    sel = 2 * (Ls_dense * ("mlp" in mods) + Ls_moe * moe_tp * (("moe" in mods) | ("shared_experts" in mods)))
    return xp.select([rc == R_FULL, rc == R_SELECTIVE], [tp_colls, sel], 0.0)


def moe_block_rerun(k, rc):
    """Whether the backward re-runs the MoE block with its dispatch and combine (full recomputation
    or the moe module); Megatron-Core refuses EP overlap there."""
    return (rc == R_FULL) | ((rc == R_SELECTIVE) & ("moe" in k.rc_modules))


def selective_flops_per_token(k, attn_core_flops_tok):
    """Forward FLOPs per token that selective recomputation re-runs: the recomputed modules' GEMMs
    and the attention core where core_attn is among them (the hardware FLOP convention)."""
    mods = k.rc_modules
    moe_block = k.moe_other_params - k.attn_params + k.top_k * k.expert_params
    return k.L * (attn_core_flops_tok * ("core_attn" in mods)
                  + 2 * (1 - k.moe_frac) * k.dense_mlp_params * ("mlp" in mods)
                  + 2 * k.moe_frac * (moe_block * ("moe" in mods)
                                      + k.shared * k.expert_params * ("shared_experts" in mods and "moe" not in mods))
                  + 2 * sum(K_ * N_ for K_, N_ in k.mla_up_gemms) * ("mla_up_proj" in mods))


def step_flops(k, rc, tokens_step, xp):
    """(model FLOPs, recomputed FLOPs) of one step: 6 x active parameters per token plus the
    attention core at the model's key count (non-causal: the PaLM / Megatron MFU convention) and
    the head; recomputation re-runs the forward (full) or ``selective_flops_per_token``."""
    act_params_layer = (k.attn_params + (1 - k.moe_frac) * k.dense_mlp_params
                        + k.moe_frac * (k.moe_other_params - k.attn_params + k.top_k * k.expert_params))
    attn_core_flops_tok = 2 * k.model_attn_keys * k.qv_width   # 4 s h for standard attention
    flops_tok_fwd = k.L * (2 * act_params_layer + attn_core_flops_tok) + 2 * k.h * k.vocab
    sel_flops_tok = selective_flops_per_token(k, attn_core_flops_tok)
    recompute = xp.select([rc == R_FULL, rc == R_SELECTIVE], [flops_tok_fwd, sel_flops_tok], 0.0) * tokens_step
    return 3 * flops_tok_fwd * tokens_step, recompute

"""Memory per GPU: states, activations by recomputation (and by module), logits, buffers
(``memory_per_gpu``, the bottleneck rank's peak; ``iteration_formulas`` checks it against HBM)."""
from __future__ import annotations

from ..specs.codes import DPFlavour, Recompute
from . import constants as C
from .pipeline import PipeMemory
from .scenario_consts import (FSDP_EVERY_PASS, FSDP_GATHER_MODULE, FSDP_GATHER_PARAMETER, FSDP_NEVER,
                              ScenarioConsts, ep_load)
from .zero3 import zero3_live_params

F_DDP, F_ZERO1, F_FSDP, F_HSDP = DPFlavour.codes()   # codes: specs/codes.py
R_NONE, R_SELECTIVE, R_FULL = Recompute.codes()


def memory_per_gpu(k: ScenarioConsts, fl, rc, rg, owned, P_dense, P_exp, tp, ep, et, tok, Ls, Ls_dense, Ls_moe,
                   pm: PipeMemory, xp, offload=(0.0, 0.0)):
    """Bytes one GPU holds at its peak (the bottleneck rank), as (held, fixed): their sum is the
    peak; ``held`` (states and activations) scales with the layers a rank holds, ``fixed`` (the
    gather buffer and the reserve) does not (``hetero.typed_memory`` scales it per GPU type):
    - states: mixed-precision Adam, 2 + 4 + 12 bytes per parameter (ZeRO paper), the optimizer's
      ``owned`` share sharded per DP flavour, and under ZeRO-2 (``k.shard_gradients``, zero1
      rows) the gradients with it (Rajbhandari et al. 2020: 2 + (4 + 12) / N_d a parameter);
      FSDP that does not reshard within the step holds unsharded gradients (regather forward,
      never) and weights (never) between micro-batches;
    - FSDP's gather buffer: two layers' unsharded weights (a unit and its prefetch), or, where
      ZeRO-3 gathers by module (``fsdp_gather`` module or parameter: DeepSpeed), the parameters
      its coordinator keeps live (``zero3.zero3_live_params``) when that is less;
    - activations per micro-batch in flight: Korthikanti et al. 2022's per-layer bytes by
      recomputation (16-bit; fp32 doubles them), attention scores where the attention is unfused,
      one layer's full activations under full recomputation; under eager autograd
      (``activation_memory``) the tensors PyTorch saves (``act_per_microbatch``);
    - the logits (``logits_bytes``) on the rank that holds the head;
    - eager (torch.distributed.pipelining): the stages' receive buffers, one micro-batch's
      activations (tok x h) each (``pipeline.pipe_memory``);
    - the framework's fixed reserve (CUDA context, NCCL buffers; ``constants``);
    - offloaded activations (``offload_bytes``) leave the micro-batches in flight, one layer's
      (the copy in transit) stays.
    The first rank holds ``pm.infl`` micro-batches, the rank with the head ``pm.infl_head`` and their
    logits (the same rank at pp 1 and in V schedules: ``head_on_first``); the peak is the larger
    (both hold the same parameters: the embedding and the head are the same size). That is measured
    for eager (``autotune memory``). The fused accounting keeps adding one micro-batch's logits to the
    first rank under a pipeline: an in-sample choice, the playbook's measured nanotron peaks (60
    rows) are 9.3% off that way and 16.1% with the larger of the two ranks, as their pipeline ranks
    hold more than this accounting explains (most pp > 1 rows are under-predicted either way)."""
    per_param_full = k.weight_bytes + k.grad_bytes + k.optimizer_bytes
    sharded_all = (fl == F_FSDP) | (fl == F_HSDP)
    held = (k.grad_bytes if rg != FSDP_EVERY_PASS else 0.0) + (k.weight_bytes if rg == FSDP_NEVER else 0.0)
    grads = xp.where(fl == F_ZERO1, owned, P_dense + P_exp) if k.shard_gradients else P_dense + P_exp
    states = xp.where(sharded_all, per_param_full * owned + held * (P_dense + P_exp - owned),
                      k.weight_bytes * (P_dense + P_exp) + k.grad_bytes * grads + k.optimizer_bytes * owned)
    layer_params = (k.attn_params + xp.maximum(k.dense_mlp_params, k.moe_other_params - k.attn_params
                                               + k.experts * k.expert_params * tp / (ep * et))) / tp
    live = 2 * layer_params
    if k.fsdp_gather in (FSDP_GATHER_MODULE, FSDP_GATHER_PARAMETER):
        live = xp.minimum(live, zero3_live_params(k, tp, rc == R_FULL, xp))
    gather_buf = xp.where(sharded_all, k.weight_bytes * live, 0.0)
    act_mb, act_layer_full = act_per_microbatch(k, rc, tok, tp, ep, Ls, Ls_dense, Ls_moe, xp)
    full_extra = xp.where(rc == R_FULL, act_layer_full, 0.0)
    first = pm.infl * act_mb + full_extra
    if k.offload:       # offload = offload_bytes(...), computed once by the caller
        off_mb, off_layer = offload
        off_mb = xp.minimum(off_mb, act_mb)
        first = first - pm.infl * off_mb + xp.minimum(off_layer, off_mb)
    if k.eager_acts:
        recv = pm.recv_buffers * k.wire_bytes * tok * k.h / tp
        head = pm.infl_head * act_mb + full_extra + recv + logits_bytes(k, tok, tp, pm.pp, pm.infl_head)
        acts = xp.where(pm.head_on_first, first + recv + logits_bytes(k, tok, tp, pm.pp, 1.0),
                        xp.maximum(first + recv, head))
    else:       # fused: one micro-batch's logits on top of the first rank's activations (see the docstring)
        acts = first + logits_bytes(k, tok, tp, pm.pp, 1.0)
    return states + acts, gather_buf + C.FRAMEWORK_RESERVED_BYTES


def act_per_microbatch(k: ScenarioConsts, rc, tok, tp, ep, Ls, Ls_dense, Ls_moe, xp):
    """(bytes one micro-batch's layers keep for the backward, one layer's full activations).
    fused: Korthikanti et al. 2022 (attention 15 sbh, MLP 19 sbh scaled to the FFN's width and
    gating, 5 a s^2 b of scores where unfused); an MoE layer keeps, per routed copy of a token
    (top_k x the imbalance factor), its permuted input for the expert's first GEMM and its expert
    output for the gradient of its routing probability (2 x h, ``ACT_MOE_ROUTED_COPY_*``) and the
    expert's intermediates (the MLP's bytes less its input, at the expert's width). Under fp8
    (``ACT_FP8_GEMM_INPUT_CUT_SHARE``) the inputs TransformerEngine keeps for weight gradients are
    1 B: the QKV projection's normed input (MLA: the up projections' normed latents; its two
    down projections keep a 1-byte copy each of the same input, 2 B), fc1's normed input and
    fc2's input of a dense MLP, each routed copy's permuted input and fc2 input, a shared
    expert's fc2 input. With many
    small experts the copies dominate (Megatron-Core's permuted tokens; top-8 of 2,048-wide
    experts at h = 6,144 keeps 2.6x what scaling the dense MLP by width gave). Selective
    recomputation drops what its modules keep (WorkloadSpec.recompute_modules, Megatron-Core's
    --recompute-modules): core_attn the scores, layernorm the two norms' outputs, mlp a dense MLP's
    intermediates, moe_act each routed copy's activation output (fc2's input), shared_experts the
    shared experts' intermediates, moe the whole MoE block's.
    eager: the elements PyTorch autograd saves per token (``constants``: two RMSNorms 3h each,
    queries, keys, values and the attention output, the MLP's 4 (gated) or 2 elements per FFN
    width, each routed copy's expert input and output), in the activation dtype."""
    act_scale = k.wire_bytes / C.ACTIVATION_BYTES     # Korthikanti's bytes are 16-bit; fp32 doubles them
    load = ep_load(k, ep, xp)       # the busiest EP rank's routed copies over the mean
    # GShard einsum dispatch (WorkloadSpec.moe_einsum_dispatch): the dispatch mask and the combine
    # weights, s x (e c) each in the activation dtype, kept for the backward on every TP rank
    masks = Ls_moe * act_scale * 2.0 * C.ACTIVATION_BYTES * tok * tok * k.einsum_cols
    if k.eager_acts:
        mats = C.ACT_EAGER_GATED_MLP_ELEMS_PER_TOKEN_FFN if k.mlp_mats == 3 else C.ACT_EAGER_PLAIN_MLP_ELEMS_PER_TOKEN_FFN
        routed = k.top_k * load
        moe = routed * (C.ACT_MOE_ROUTED_COPY_ELEMS_PER_TOKEN_HIDDEN * k.h + mats * k.ffn_e) + k.shared * mats * k.ffn_e
        per_layer = 2 * C.ACT_EAGER_NORM_ELEMS_PER_TOKEN_HIDDEN * k.h + k.qv_width + k.kv_width
        act_lin = k.wire_bytes * tok / tp * (per_layer * Ls + mats * k.ffn * Ls_dense + moe * Ls_moe) + masks
    else:
        swiglu = 1.5 if k.mlp_mats == 3 else 1.0
        mlp_dense_k = k.ffn * swiglu / (4 * k.h)
        width_e = k.ffn_e * swiglu / (4 * k.h)
        inner = C.ACT_MLP_BYTES_PER_TOKEN_HIDDEN - C.ACT_MLP_INPUT_BYTES_PER_TOKEN_HIDDEN
        # fp8 (``fp8_input_cut``): the GEMM inputs kept for the weight gradients at 1 B (constants)
        cut = k.fp8_input_cut
        fc2_in_d, fc2_in_e = (C.ACT_MLP_FC2_INPUT_BYTES_PER_TOKEN_HIDDEN * f / (4 * k.h) for f in (k.ffn, k.ffn_e))
        in_cut = cut * C.ACT_MLP_INPUT_BYTES_PER_TOKEN_HIDDEN      # a normed or permuted h-wide input
        # scenario constants only, so a plain max (at zero: an FFN narrower than about h / 6 keeps
        # less at width than fc1's h-wide input)
        mlp_dense = max(C.ACT_MLP_BYTES_PER_TOKEN_HIDDEN * mlp_dense_k - in_cut - cut * fc2_in_d, 0.0)
        mlp_moe = C.ACT_MOE_INPUT_BYTES_PER_TOKEN_HIDDEN + k.top_k * load * (
            C.ACT_MOE_ROUTED_COPY_ELEMS_PER_TOKEN_HIDDEN * C.ACTIVATION_BYTES + inner * width_e
            - in_cut - cut * fc2_in_e) + k.shared * (C.ACT_MLP_BYTES_PER_TOKEN_HIDDEN * width_e - cut * fc2_in_e)
        attn = C.ACT_ATTN_MASK_AND_NORMS_BYTES_PER_TOKEN_HIDDEN + C.ACTIVATION_BYTES * (
            k.attn_act_elems - cut * ((1.0 - k.mla) * k.h + k.mla_latent_elems)) / k.h
        act_lin = act_scale * tok * k.h / tp * (attn * Ls + mlp_dense * Ls_dense + Ls_moe * mlp_moe) + masks
        mods = k.rc_modules
        routed_moe = k.top_k * load * (1.0 - cut) * fc2_in_e
        shared_moe = k.shared * (inner * width_e - cut * fc2_in_e)
        # layernorm drops the separate norms' outputs (MLA's input norm, an MoE layer's pre-MLP norm:
        # the MoE block's input); moe keeps that input as its checkpoint's; a fused dense MLP's
        # checkpoint drops all of its 19 sbh (fc1's normed input is computed inside it)
        dropped = (C.ACT_NORM_OUTPUT_BYTES_PER_TOKEN_HIDDEN * (Ls * k.mla + Ls_moe) * ("layernorm" in mods)
                   + C.ACTIVATION_BYTES * k.mla_up_elems / k.h * Ls * ("mla_up_proj" in mods)
                   + mlp_dense * Ls_dense * ("mlp" in mods)
                   + Ls_moe * ((mlp_moe - C.ACT_MOE_INPUT_BYTES_PER_TOKEN_HIDDEN) if "moe" in mods else
                               routed_moe * ("moe_act" in mods) + shared_moe * ("shared_experts" in mods)))
        act_sel = act_lin - act_scale * tok * k.h / tp * dropped - masks * ("moe" in mods)
    act_scores = 0.0 if k.flash else act_scale * Ls * C.ACT_SCORES_BYTES_PER_TOKEN_HEAD_SEQ * k.heads * tok * k.seq / tp
    if k.eager_acts:
        act_sel = act_lin
    elif k.dots_acts:
        act_sel = dots_kept_bytes(k, tok, tp, Ls, Ls_dense) + act_scale * tok * k.h / tp * mlp_moe * Ls_moe + masks
    elif "core_attn" not in k.rc_modules:
        act_sel = act_sel + act_scores
    act_mb = xp.select([rc == R_NONE, rc == R_SELECTIVE],
                       [act_lin + act_scores, act_sel],
                       act_scale * C.ACT_FULL_RECOMPUTE_BYTES_PER_TOKEN_HIDDEN * tok * k.h / tp * Ls)
    return act_mb, (act_lin + act_scores) / Ls


def dots_kept_bytes(k: ScenarioConsts, tok, tp, Ls, Ls_dense):
    """Bytes a micro-batch keeps under JAX rematerialisation that saves the weight matmuls' outputs
    (``jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims``) and the attention output named
    "context" (MaxText's remat_policy minimal_flash, MaxText/layers/models.py; WorkloadSpec.activation_memory
    = dots under recompute selective), per token and layer in the activation dtype: what the
    backward needs of those, the layer's input (the remat boundary), the queries, keys and values,
    the context, the output projection's output (the post-attention norm's input is recomputed
    from it); per dense MLP its up projections' outputs ((mlp_mats - 1) ffn: wi_0 and wi_1 when
    gated). The down projection's output only feeds the residual add, which the backward does not
    need. Norms, rotary embeddings and the activation function are recomputed; TransformerEngine's
    fused attention also names its fp32 log-sum-exp "context" (4 B a head, left out). An MoE
    block keeps the fused count (``act_per_microbatch``)."""
    attn = 2.0 * k.h + k.q_width + k.kv_width + k.v_out_width     # input, q, k and v, context, out_proj
    mlp = (k.mlp_mats - 1.0) * k.ffn
    return k.wire_bytes * tok / tp * (attn * Ls + mlp * Ls_dense)


def logits_bytes(k: ScenarioConsts, tok, tp, pp, n_in_flight):
    """Logit memory on the rank that holds the head with ``n_in_flight`` micro-batches there:
    fused, LOGITS_BYTES per logit and micro-batch; eager, EAGER_LOGITS_KEPT_BYTES each (twice under
    a pipeline, which keeps the stage output) plus EAGER_LOGITS_TRANSIENT_BYTES once."""
    per_mb = tok * k.vocab / tp
    if k.eager_acts:
        kept = C.EAGER_LOGITS_KEPT_BYTES * (1.0 + (pp > 1))
        return per_mb * (kept * n_in_flight + C.EAGER_LOGITS_TRANSIENT_BYTES)
    return per_mb * C.LOGITS_BYTES * n_in_flight



def offload_bytes(k: ScenarioConsts, rc, tok, tp, ep, Ls, Ls_moe, xp):
    """(bytes a micro-batch offloads on the rank, one layer's of them): fine-grained activation
    offloading (WorkloadSpec.offload_modules, Megatron-Core's --offload-modules) moves each listed
    module's input to host memory in the forward and back before its backward. Per token, in the
    activation dtype (Korthikanti et al.'s 16-bit units, like ``act_per_microbatch``):
    attn_norm h (MLA's separate input norm; fused into qkv_linear otherwise: Megatron skips an
    IdentityOp), qkv_linear h, core_attn the queries, keys and values (heads d_qk + the key and value
    widths), attn_proj the attention output (heads d_v), mlp_norm h (an MoE layer's separate pre-MLP
    norm), expert_fc1 h per routed copy (top_k x the busiest rank's load), moe_act fc1's output
    ((mlp_mats - 1) ffn_e per copy), fused_group_mlp both and fc2's input (ffn_e per copy); less
    what selective recomputation drops already (on MLA: mla_up_proj's queries, keys and values,
    layernorm's input-norm output). Under fp8 a GEMM input moves as the 1-byte copy
    ``act_per_microbatch`` keeps (qkv_linear off MLA, expert_fc1, fused_group_mlp's fc1 and fc2
    inputs); Megatron-Core on Hopper keeps expert_fc1's input at 16 bits when it offloads it
    (save_original_input): the same bytes freed, a copy twice as long, not charged. Nothing under
    full recomputation, which keeps only each layer's input."""
    off = k.offload
    if not off:
        return 0.0, 0.0
    # what selective recomputation already drops is not kept, so not offloaded: MLA's up-projected
    # queries, keys and values (mla_up_proj: core_attn's input) and its input norm's output
    # (layernorm: qkv_linear's input on an MLA layer)
    sel = rc == R_SELECTIVE
    cut = k.fp8_input_cut
    qkv_in = k.h * (1.0 - xp.where(sel, k.mla * ("layernorm" in k.rc_modules), 0.0)) * (1.0 - cut * (1.0 - k.mla))
    core_in = k.q_width + k.kv_width - xp.where(sel, k.mla_up_elems * ("mla_up_proj" in k.rc_modules), 0.0)
    attn = (k.h * k.mla * ("attn_norm" in off) + qkv_in * ("qkv_linear" in off)
            + xp.maximum(core_in, 0.0) * ("core_attn" in off) + k.v_out_width * ("attn_proj" in off))
    fused = "fused_group_mlp" in off
    per_copy = ((1.0 - cut) * k.h * ("expert_fc1" in off or fused)
                + (k.mlp_mats - 1.0) * k.ffn_e * ("moe_act" in off or fused) + (1.0 - cut) * k.ffn_e * fused)
    moe = k.h * ("mlp_norm" in off) + k.top_k * ep_load(k, ep, xp) * per_copy if k.experts else 0.0
    scale = k.wire_bytes * tok / tp          # bytes per element: 16-bit, fp32 twice
    per_mb = scale * (attn * Ls + moe * Ls_moe)
    layer = scale * (attn + xp.where(Ls_moe > 0, moe, 0.0))
    none = rc == R_FULL
    return xp.where(none, 0.0, per_mb), xp.where(none, 0.0, layer)

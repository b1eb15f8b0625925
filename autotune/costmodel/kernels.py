"""Kernel-level compute terms: the time of one GEMM, one expert block, one attention core and
one memory-bound pass, by shape. ``iteration_formulas`` builds a layer from these, and
``autotune kernels`` checks each against kernels measured on an H100 (``autotune/data/h100``).
Written once for arrays and scalars (``xp``).
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from . import constants as C
from .params import CostParams


def gemm_efficiency(M, K, N, ridge: float, p: CostParams, out_weight=1.0):
    """Achieved fraction of peak of an M x K x N GEMM from its arithmetic intensity
    I = MKN / (MK + KN + MN) FLOP/byte (bf16 operands): e_max I / (I^n + (k ridge)^n)^(1/n), with
    ridge the GPU's roofline ridge point, peak FLOP/s / HBM B/s (Williams et al. 2009), and n
    (``gemm_knee_sharpness``) how sharply it bends from the bandwidth-bound to the compute-bound
    regime (n = 1: the hyperbola e_max I / (I + k ridge); large n: the roofline's corner).
    An fp8 GEMM (``out_weight`` 2) reads 1-byte operands but writes its M x N output in bf16:
    against its doubled peak (ridge x 2) its intensity is 2MKN / (MK + KN + 2MN), so on the bf16
    scale the output counts twice, and small-K shapes gain less from fp8 (the measured H100 fp8
    speed-up over bf16 runs from 1.3x at K = 512 to 1.9x at K >= 2,048, ``data/h100``)."""
    intensity = M * K * N / (M * K + K * N + out_weight * M * N)
    knee = p.gemm_half_intensity_ridge_ratio * ridge
    n = p.gemm_knee_sharpness
    if n == 1.0:
        return p.gemm_efficiency_max * intensity / (intensity + knee)
    return p.gemm_efficiency_max * intensity / (intensity ** n + knee ** n) ** (1.0 / n)


def gemm_out_weight(dtype) -> float:
    """``out_weight`` of a GEMM in ``dtype``: an fp8 GEMM's bf16 output counts twice in its intensity."""
    return 2.0 if dtype == "fp8" else 1.0


def gemm_time_s(M, K, N, peak_flops: float, ridge: float, p: CostParams, out_weight=1.0):
    """Seconds of one M x K x N GEMM: 2 M K N FLOPs at ``gemm_efficiency`` of ``peak_flops``."""
    return 2.0 * M * K * N / (peak_flops * gemm_efficiency(M, K, N, ridge, p, out_weight))


@lru_cache(maxsize=8)
def isolated_curve(p: CostParams) -> CostParams:
    """``p`` with the in-step GEMM curve's knee and half-intensity replaced by those of kernels run
    alone (``CostParams.isolated_gemm_knee_sharpness``)."""
    return replace(p, gemm_knee_sharpness=p.isolated_gemm_knee_sharpness,
                   gemm_half_intensity_ridge_ratio=p.isolated_gemm_half_intensity_ridge_ratio)


def split_gemm_ratio(gemms, M, ridge: float, p: CostParams, out_weight=1.0):
    """Time of a block's GEMMs run in pieces over their time whole: ``gemms`` holds (K, N, pieces)
    per GEMM, each run as ``pieces`` GEMMs of M / pieces rows (1: whole), on the isolated-kernel
    curve (``isolated_curve``): the work is the same, the smaller pieces run at a lower arithmetic
    intensity. A ratio of kernels, so the level (``gemm_efficiency_max``) and the peak cancel (peak 1
    below). Measured on the H200 (``data/h200``, ``gemm_chunks``) at GPT-3 175B's and MT-NLG 530B's
    tp-8 shapes, M 2,048-8,192, tp pieces take 0.99-1.64x the whole GEMM, 1.03-1.27x summed over
    a layer's GEMMs."""
    q = isolated_curve(p)
    whole = pieces = 0.0
    for K, N, n in gemms:
        whole = whole + gemm_time_s(M, K, N, 1.0, ridge, q, out_weight)
        pieces = pieces + n * gemm_time_s(M / n, K, N, 1.0, ridge, q, out_weight)
    return pieces / whole


def te_pieces(gemms, tp, forward: bool):
    """(K, N, pieces) per GEMM of a block under TransformerEngine's comm-GEMM overlap
    (``initialize_ub``'s methods, TE 1.0-2.x): in the forward a column-parallel GEMM ("N": QKV,
    fc1) consumes the all-gathered input one TP rank's piece at a time ("ring_exchange", tp
    pieces) and a row-parallel one ("K": proj, fc2) reduce-scatters its output as it goes
    ("pipeline", ``constants.TE_PIPELINE_SPLIT_PIECES``); in the backward the row-parallel
    GEMMs' input gradients ride the ring (tp pieces) and the column-parallel ones run whole
    beside a bulk all-gather. Replicated GEMMs ("": MLA's down projections) run whole."""
    out = []
    for K, N, split in gemms:
        if split == "N":
            n = tp if forward else 1.0
        elif split == "K":
            n = C.TE_PIPELINE_SPLIT_PIECES if forward else tp
        else:
            n = 1.0
        out.append((K, N, n))
    return out

def expert_block_time_s(tokens_per_expert, hidden, ffn_e, mlp_mats, experts, peak_flops: float, ridge: float,
                        p: CostParams, out_weight=1.0):
    """Seconds of ``experts`` expert MLPs, each over ``tokens_per_expert`` tokens: the fused up
    projection (hidden -> (mlp_mats - 1) ffn_e) and the down projection (ffn_e -> hidden), each at
    the efficiency of its own (small-M) shape."""
    up = (mlp_mats - 1.0) * ffn_e
    return experts * (gemm_time_s(tokens_per_expert, hidden, up, peak_flops, ridge, p, out_weight)
                      + gemm_time_s(tokens_per_expert, ffn_e, hidden, peak_flops, ridge, p, out_weight))


def attention_flops_fwd(tokens, keys_per_query, qv_width):
    """Forward FLOPs of the attention core: QK^T (2 d_qk per query-key pair and head) and PV
    (2 d_v) for ``tokens`` queries, each against ``keys_per_query`` keys;
    qv_width = heads x (d_qk + d_v). Causal masking and windows enter through
    ``keys_per_query`` (``ModelSpec.attention_keys_per_query``: s/2 where the kernel skips
    masked blocks, FlashAttention; Dao 2023)."""
    return 2.0 * tokens * keys_per_query * qv_width


def attention_core_efficiency(head_dim, chunk_len, p: CostParams):
    """Achieved fraction of peak of the attention core: ``attention_core_efficiency`` scaled by
    d / (d + d_half) for head size d and L / (L + L_half) for the query chunk length L (both
    saturating, as the GEMM curve is; 1 where the half-points are 0)."""
    return (p.attention_core_efficiency * head_dim / (head_dim + p.attention_head_dim_half)
            * chunk_len / (chunk_len + p.attention_seq_half))


def fa2_speed_ratio(head_dim) -> float:
    """FlashAttention-2's speed over the native kernel on compute capability 9.0 and newer:
    ``FA2_HOPPER_SPEED_RATIO_HDIM64`` at head dim <= 64, ``..._HDIM128`` at >= 128, linear between
    (the two head dims the FlashAttention-3 paper measures both passes at)."""
    w = min(max((float(head_dim) - 64.0) / 64.0, 0.0), 1.0)
    return C.FA2_HOPPER_SPEED_RATIO_HDIM64 + w * (C.FA2_HOPPER_SPEED_RATIO_HDIM128 - C.FA2_HOPPER_SPEED_RATIO_HDIM64)


def attention_core_fwd_time_s(tokens, keys_per_query, qv_width, peak_flops: float, p: CostParams,
                              head_dim, chunk_len):
    """Seconds of the attention core's forward at ``attention_core_efficiency`` of peak; the
    backward is charged ``attention_backward_time_ratio`` times this (``iteration_formulas``).
    ``chunk_len``: query tokens per sequence on the rank (seq / cp)."""
    eff = attention_core_efficiency(head_dim, chunk_len, p)
    return attention_flops_fwd(tokens, keys_per_query, qv_width) / (peak_flops * eff)


def memory_bound_time_s(bytes_moved, hbm_Bps: float):
    """Seconds of a memory-bound kernel that reads and writes ``bytes_moved`` at the rate a streaming
    kernel sustains: the datasheet ``hbm_Bps`` x ``HBM_ACHIEVED_FRACTION`` (the H100's measured copy)."""
    return bytes_moved / (hbm_Bps * C.HBM_ACHIEVED_FRACTION)


def eager_gated_activation_time_s(elems, hbm_Bps: float):
    """Seconds of eager PyTorch's ``F.silu(a) * b`` over ``elems`` bf16 outputs with ``a, b`` the
    two strided halves of one fused up-projection: two kernels, ``silu`` (reads 2 B, writes 2 B an
    element) and the product (reads 4 B, writes 2 B), each the slower of its traffic at the streaming
    rate and its elements at ``STRIDED_ELEMENTWISE_BF16_ELEMENTS_PER_S`` (both read a strided view)."""
    per_elem = 1.0 / C.STRIDED_ELEMENTWISE_BF16_ELEMENTS_PER_S
    silu = max(per_elem, memory_bound_time_s(2 * C.ACTIVATION_BYTES, hbm_Bps))
    product = max(per_elem, memory_bound_time_s(3 * C.ACTIVATION_BYTES, hbm_Bps))
    return elems * (silu + product)


def moe_token_move_time_s(routed_elems, hbm_Bps: float, scatter_add: bool):
    """Seconds to move ``routed_elems`` routed bf16 elements between token order and expert order:
    a gather (the permutation, ``index_select``) or a fused un-permutation (Megatron-Core's
    ``moe_unpermute``) reads and writes each once at the streaming rate (half of
    ``MOE_PERMUTE_TRAFFIC_BYTES_PER_ROUTED_ELEMENT``); eager PyTorch's atomic
    scatter-add (``scatter_add_``, ``index_add_``: ``scatter_add`` true) reads the source and
    reads and writes the destination (6 B) and is bound by the atomics' rate
    (``SCATTER_ADD_BF16_ELEMENTS_PER_S``), whichever is slower."""
    fused = memory_bound_time_s(C.MOE_PERMUTE_TRAFFIC_BYTES_PER_ROUTED_ELEMENT / 2 * routed_elems, hbm_Bps)
    if not scatter_add:
        return fused
    return routed_elems * max(1.0 / C.SCATTER_ADD_BF16_ELEMENTS_PER_S,
                              memory_bound_time_s(3 * C.ACTIVATION_BYTES, hbm_Bps))

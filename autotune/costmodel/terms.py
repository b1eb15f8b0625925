"""Named terms of the cost model that depend on a few knobs only, each a function of the
scenario constants and the batch columns it reads.

A term that reads few knobs can be computed once per distinct combination of them and spread
back to every row (``evaluate_batch`` does this for the data-parallel term, the most expensive
one); the scalar path calls the same functions on one row.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..specs.codes import DPFlavour, Placement

from . import constants as C
from .collectives import KIND_AG, KIND_AR, collective
from .network import effective_bandwidth_Bps, recovery_stall
from .params import CostParams
from .pipeline import head_on_first_rank
from .scenario_consts import FSDP_GATHER_MODULE, FSDP_GATHER_PARAMETER, LAYOUT_ENDS, LAYOUT_EVEN, ScenarioConsts, ep_load
from .spans import ring_tier_of_span
from .stage_split import LossBlocks, rank_layers
from .zero1 import zero1_broadcasts
from .zero3 import fsdp_calls

P_DP_OUT, P_PP_OUT, P_HYBRID, P_EP_OUT, P_CP_OUT = Placement.codes()   # codes: specs/codes.py
F_DDP, F_ZERO1, F_FSDP, F_HSDP = DPFlavour.codes()   # codes: specs/codes.py

TRANSPORT_KNOBS = ("xb_load_balancing", "xb_loss_recovery", "xb_queue_pairs", "nccl_channels", "nccl_buffer_mib")

DP_KNOBS = ("tp", "cp", "ep", "etp", "pp", "pp_chunks", "dp", "placement", "dp_flavour", "collective",
            "nccl_protocol", "dp_bucket_mib") + TRANSPORT_KNOBS
"""Every batch column the data-parallel term reads (``dp_comm_groups`` sees only these)."""


class Transport:
    """The cross-building transport knobs of a batch and the rows grouped by them: goodput and
    loss stalls depend on these five knobs (and a flow count), so they are computed once per
    distinct setting."""

    def __init__(self, k: ScenarioConsts, batch, xp):
        self.k, self.xp = k, xp
        self.lb, self.lr = batch["xb_load_balancing"], batch["xb_loss_recovery"]
        self.qp, self.ch = xp.asfloat(batch["xb_queue_pairs"]), xp.asfloat(batch["nccl_channels"])
        self.buf = xp.asfloat(batch["nccl_buffer_mib"]) * 2.0**20
        self.rows = xp.group_rows(tuple(batch[x] for x in TRANSPORT_KNOBS))

    def _rate(self, lb_, qp_, lr_, flows_, channels_, cap_):
        k = self.k
        return effective_bandwidth_Bps(lb_, qp_, lr_, flows_, k.x_uplink_Bps, k.nic_Bps, k.x_paths, k.x_rtt_s,
                                       k.x_loss, k.x_mtu, k.net_eff, channels_, cap_, k.x_rto_s, self.xp)

    def goodput(self, flows, channels, cap):
        """Per-row cross-building goodput per connection (``network.effective_bandwidth_Bps``);
        where ``flows`` is one number for every row it is computed once per transport setting
        (grouping per-row flows as well was measured slower: the sort costs more than it saves)."""
        if np.ndim(flows):
            return self._rate(self.lb, self.qp, self.lr, flows, channels, cap)
        return self.xp.by_group(self.rows, self._rate, self.lb, self.qp, self.lr, flows, channels, cap)

    def goodput_where(self, crosses, flows, channels, cap):
        """``goodput`` on the rows where ``crosses`` holds (a group that spans buildings), 1.0
        elsewhere: a finite rate that those rows' formulas multiply by zero crossings."""
        xp = self.xp

        def rate(*args):
            return (self._rate(*args),)
        rate.n_out = 1
        bw, = xp.on_rows(crosses, rate, self.lb, self.qp, self.lr, flows + 0.0 * self.qp, channels, cap)
        return xp.where(crosses, bw, 1.0)

    def stall(self, channels, cap):
        """Round-trip stretch of a window-bound crossing connection under loss
        (``network.recovery_stall``; it does not depend on how many connections share the link)."""
        k, xp = self.k, self.xp
        if k.x_loss <= 0.0 or k.x_rtt_s <= 0.0:
            return 1.0

        def f(lb_, qp_, lr_, channels_, cap_):
            return recovery_stall(lb_, qp_, lr_, k.x_rtt_s, k.x_loss, k.x_mtu, channels_, cap_, k.x_rto_s, xp)
        return xp.by_group(self.rows, f, self.lb, self.qp, self.lr, channels, cap)


class ComputeTerms(NamedTuple):
    """Seconds of one micro-batch's forward per layer (and of the LM head) on one GPU, before the
    framework factor: each GEMM at the efficiency of its own shape (``kernels``)."""
    attn_lin: object      # attention projections
    mlp_dense: object     # dense MLP
    moe_lin: object       # routed (with the expert imbalance) and shared experts, the router, einsum dispatch
    core: object          # attention core (FlashAttention skips masked blocks; unfused streams scores)
    elem: object          # element-wise passes (norms, activation, residuals)
    moe_permute: object   # MoE permutation and un-permutation, per MoE layer
    head: object          # LM head (last rank)
    attn_lin_split: object  # attention projections' forward in TransformerEngine's pieces (tp_comm_overlap, kernels.te_pieces)
    mlp_dense_split: object  # dense MLP the same way
    attn_lin_split_b: object  # their input-gradient GEMMs in the backward's pieces
    mlp_dense_split_b: object
    loss_f: object        # cross-entropy over the head's logits, forward (memory-bound; last rank)
    loss_b: object        # its backward
    rc_dense: object      # selective recomputation's re-run per dense layer beyond the attention core
    rc_moe: object        # the same per MoE layer (WorkloadSpec.recompute_modules)
    moe_einsum: object    # one GShard-style dispatch or combine GEMM per MoE layer (in moe_lin twice)


def compute_terms(k: ScenarioConsts, p: CostParams, mb, cp, tp, ep, et, xp) -> ComputeTerms:
    """Per-layer forward compute of a micro-batch of ``mb`` sequences split over cp (tokens
    mb s / cp), TP tp, EP ep and the experts' TP et (``expert_tp``). It depends on these five
    knobs only, so ``iteration_formulas`` computes it once per distinct combination.

    Experts under MoE parallel folding (Liu et al. 2025, arXiv:2504.14960, sec. 3): a rank
    dispatches its tok / tp sequence-parallel tokens over the EP group, then gathers over the
    experts' TP group of et ranks, so it runs tok top_k et / tp routed tokens through its
    experts / ep local experts, each at ffn_e / et width: the FLOPs per rank do not depend on
    et, the GEMM shapes do (et = tp: Megatron-Core without folding)."""
    from .kernels import (attention_core_fwd_time_s, expert_block_time_s, gemm_time_s, memory_bound_time_s,
                          moe_token_move_time_s, split_gemm_ratio, te_pieces)
    tok = mb * k.seq / cp

    def gemm_time(M, K, N):
        return gemm_time_s(M, K, N, k.peak_lin, k.ridge, p, k.gemm_out_weight)
    # the blocks' GEMMs as (K, N, tp-split dimension) on one TP rank: ModelSpec.attn_gemms (2 for
    # GQA, 4-5 for MLA) and the MLP (fused gate+up for SwiGLU, then down)
    attn_kn = [(K_ / tp if s_ == "K" else K_, N_ / tp if s_ == "N" else N_, s_) for K_, N_, s_ in k.attn_gemms]
    up_n = (k.mlp_mats - 1.0) * k.ffn / tp
    mlp_kn = [(k.h, up_n, "N"), (k.ffn / tp, k.h, "K")]

    def block_time(kn, M):
        t = 0.0
        for K_, N_, _ in kn:
            t = t + gemm_time(M, K_, N_)
        return t
    attn_lin, mlp_dense = block_time(attn_kn, tok), block_time(mlp_kn, tok)
    # TransformerEngine's comm-GEMM overlap (WorkloadSpec.tp_comm_overlap; Wang et al., ASPLOS'23)
    # runs TP-adjacent GEMMs in pieces: the same FLOPs at a smaller GEMM's efficiency, charged as the
    # block's in-step time times what the split costs kernels run alone (kernels.split_gemm_ratio)
    if k.tp_overlap:
        def in_pieces(whole, kn, forward):
            ratio = split_gemm_ratio(te_pieces(kn, tp, forward), tok, k.ridge, p, k.gemm_out_weight)
            return whole * xp.where(tp > 1, ratio, 1.0)
        attn_split, attn_split_b = in_pieces(attn_lin, attn_kn, True), in_pieces(attn_lin, attn_kn, False)
        mlp_split, mlp_split_b = in_pieces(mlp_dense, mlp_kn, True), in_pieces(mlp_dense, mlp_kn, False)
    else:
        attn_split = attn_split_b = attn_lin
        mlp_split = mlp_split_b = mlp_dense
    moe_lin = moe_permute = moe_act = shared = moe_einsum = 0.0
    if k.experts:
        tok_e = xp.maximum(tok * k.top_k * ep * et / (tp * k.experts), 1.0)   # tokens per local expert
        routed = expert_block_time_s(tok_e, k.h, k.ffn_e / et, k.mlp_mats, k.experts / ep, k.peak_lin, k.ridge, p,
                                     k.gemm_out_weight)
        shared = expert_block_time_s(tok, k.h, k.ffn_e / tp, k.mlp_mats, k.shared, k.peak_lin, k.ridge, p,
                                     k.gemm_out_weight)
        # the busiest EP rank's routed load over the mean; at ep 1 every rank holds every expert
        load = ep_load(k, ep, xp)
        moe_lin = routed * load + shared + 2.0 * tok * k.h * k.experts / (k.peak_lin * p.gemm_efficiency_max)
        if k.einsum_cols:
            # GShard-style dispatch (DeepSpeed-MoE's MOELayer): einsum("sec,sm->ecm") gathers the
            # slots, einsum("sec,ecm->sm") combines them, each a (e c) x s x h bf16 GEMM over the
            # rank's whole micro-batch (no sequence parallelism in that layer); no permutation
            moe_einsum = gemm_time_s(tok * k.einsum_cols, tok, k.h, k.peak_bf16, k.ridge, p)
            moe_lin = moe_lin + 2.0 * moe_einsum
        else:
            # permute before dispatch (tok / tp a rank under SP), sort by local expert after the experts'
            # TP gather (tok et / tp), un-permute both on the way back (eager: k.scatter_unpermute)
            first = tok * k.top_k * k.h / tp
            routed_elems = tok * k.top_k * k.h * (1.0 + et * load) / tp
            moe_permute = memory_bound_time_s(C.MOE_PERMUTE_TRAFFIC_BYTES_PER_ROUTED_ELEMENT * routed_elems, k.hbm_Bps)
            if k.scatter_unpermute:    # torchtitan splits tokens over TP only under EP with etp 1; Megatron under SP
                whole = xp.where((ep > 1) & (et == 1) | (not k.moe_input_tp_replicated), first, first * tp)
                moe_permute = moe_permute + (moe_token_move_time_s(whole, k.hbm_Bps, True)
                                             - moe_token_move_time_s(first, k.hbm_Bps, False))
        # moe_act re-runs the activation on each routed copy this rank's experts hold: it reads fc1's
        # output ((mlp_mats - 1) ffn_e / et) and writes ffn_e / et, bf16
        act_elems = tok * k.top_k * load * et / tp * k.mlp_mats * k.ffn_e / et
        moe_act = memory_bound_time_s(C.ACTIVATION_BYTES * act_elems, k.hbm_Bps)
    core = attention_core_fwd_time_s(tok, k.attn_keys, k.qv_width / tp, k.peak_bf16, p, k.qk_head_dim, k.seq / cp) / k.attn_speed
    if not k.flash:
        core = core + memory_bound_time_s(C.UNFUSED_SOFTMAX_TRAFFIC_BYTES_PER_SCORE * k.heads * tok * k.seq / tp, k.hbm_Bps)
    elem = memory_bound_time_s(C.ELEMENTWISE_TRAFFIC_BYTES_PER_TOKEN_HIDDEN * tok * k.h / tp, k.hbm_Bps)
    head = gemm_time(tok, k.h, k.vocab / tp)
    logits = tok * k.vocab / tp
    loss_f = memory_bound_time_s(C.CROSS_ENTROPY_FWD_TRAFFIC_BYTES_PER_LOGIT * logits, k.hbm_Bps)
    loss_b = memory_bound_time_s(C.CROSS_ENTROPY_BWD_TRAFFIC_BYTES_PER_LOGIT * logits, k.hbm_Bps)
    # selective recomputation beyond the attention core (WorkloadSpec.recompute_modules), per layer
    mods = k.rc_modules
    norm = memory_bound_time_s(C.NORM_RECOMPUTE_TRAFFIC_BYTES_PER_TOKEN_HIDDEN * tok * k.h / tp, k.hbm_Bps) \
        if "layernorm" in mods else 0.0
    attn_rc = norm * k.mla          # MLA's input norm is separate (a GQA layer's is fused into linear_qkv)
    if "mla_up_proj" in mods:
        for K_, N_ in k.mla_up_gemms:
            attn_rc = attn_rc + gemm_time(tok, K_, N_ / tp)
    rc_dense = attn_rc + (mlp_split if "mlp" in mods else 0.0)     # re-run as the forward ran it
    rc_moe = attn_rc + norm + (moe_lin + moe_permute + moe_act if "moe" in mods else
                               moe_act * ("moe_act" in mods) + shared * ("shared_experts" in mods))
    return ComputeTerms(attn_lin, mlp_dense, moe_lin, core, elem, moe_permute, head, attn_split, mlp_split,
                        attn_split_b, mlp_split_b, loss_f, loss_b, rc_dense, rc_moe, moe_einsum)


def layers_on_rank(k: ScenarioConsts, pp, v, v_style, xp):
    """(all, dense, MoE) layers on the rank holding the most layers, the layers on the rank
    holding the head (``Ls_last``) and where nanotron's split puts the logits' cast and the loss
    on other ranks, those (``LossBlocks``), for pp ranks of v virtual stages each, in the
    workload's pipeline layout (WorkloadSpec.pipeline_layout):

    - even (Megatron's default): ceil(L / (pp v)) a virtual stage, the head on top of a full share
      (Ls_last = Ls);
    - ends (torchtitan) and balanced (nanotron): the frameworks' own splits
      (``stage_split.rank_layers``), once per distinct (pp, v, V placement) of the batch.
    At pp v = 1 every layer is on the one rank."""
    if k.pp_layout == LAYOUT_EVEN:
        Ls = xp.ceil(k.L / (pp * v)) * v
        Ls_last, loss = Ls, LossBlocks()
    else:
        layout = "ends" if k.pp_layout == LAYOUT_ENDS else "balanced"
        Ls, Ls_last, *blocks = xp.per_pair(
            lambda a, b: rank_layers(int(k.L), layout, k.head_layer_equiv, a, b // 2, bool(b % 2), k.loss_blocks),
            pp, 2 * v + xp.where(v_style, 1, 0), n_out=5)
        loss = LossBlocks(*blocks)
    Ls_moe = Ls * k.moe_frac
    return Ls, Ls - Ls_moe, Ls_moe, Ls_last, loss


def expert_tp(batch, xp):
    """The experts' TP degree of each row: ``etp``, or tp where etp is 0 or the batch has no
    ``etp`` column (no folding)."""
    f = xp.asfloat
    tp = f(batch["tp"])
    if batch.get("etp") is None:
        return tp
    etp = f(batch["etp"])
    return xp.where(etp > 0, etp, tp)


def stage_params(k: ScenarioConsts, tp, ep, et, pp, head_on_first, Ls_dense, Ls_moe, xp):
    """(dense, expert) parameters one GPU holds before any data-parallel sharding: its layers'
    share over TP (experts over the experts' TP x EP), plus the embedding and head (both on one
    rank at pp 1 and in V schedules, whose first rank also runs the last stage)."""
    P_dense = (Ls_dense * (k.attn_params + k.dense_mlp_params) + Ls_moe * k.moe_other_params) / tp \
        + k.vocab * k.h / tp * xp.where(head_on_first, 2.0, 1.0)
    P_exp = Ls_moe * k.experts * k.expert_params / (et * ep)
    return P_dense, P_exp


def building_spans(k: ScenarioConsts, pl, xp):
    """Buildings spanned by (pp, dense dp, expert dp, ep, cp) groups under each placement."""
    B = k.B
    b_pp = xp.where(pl == P_PP_OUT, B, xp.where(pl == P_HYBRID, k.b_pp_hybrid, 1.0))
    b_dp = xp.where((pl == P_DP_OUT) | (pl == P_EP_OUT) | (pl == P_CP_OUT), B,
                    xp.where(pl == P_HYBRID, k.b_dp_hybrid, 1.0))
    x_exp = xp.where(pl == P_EP_OUT, 1.0, b_dp)
    x_ep = xp.where(pl == P_EP_OUT, B, 1.0)
    x_cp = xp.where(pl == P_CP_OUT, B, 1.0)
    return b_pp, b_dp, x_exp, x_ep, x_cp


class Layout(NamedTuple):
    """Where a configuration puts layers, parameters and buildings (``layout``)."""
    Ls: object; Ls_dense: object; Ls_moe: object      # layers on the busiest rank
    Ls_last: object                                  # layers beside the head (layers_on_rank)
    P_dense: object; P_exp: object                   # parameters per GPU before DP sharding
    b_pp: object; b_dp: object; x_exp: object; x_ep: object; x_cp: object   # building_spans
    head_on_first: object                            # embedding and head on one rank (pp 1, V schedules)
    loss: LossBlocks                                 # nanotron's cast and loss apart from the head (layers_on_rank)


def layout(k: ScenarioConsts, batch, xp) -> Layout:
    """``layers_on_rank``, ``stage_params`` and ``building_spans`` of the rows."""
    f = xp.asfloat
    tp, ep, pp, v = (f(batch[x]) for x in ("tp", "ep", "pp", "pp_chunks"))
    head_on_first = head_on_first_rank(batch["pp_schedule"], pp)
    Ls, Ls_dense, Ls_moe, Ls_last, loss = layers_on_rank(k, pp, v, head_on_first & (pp > 1), xp)
    return Layout(Ls, Ls_dense, Ls_moe, Ls_last, *stage_params(k, tp, ep, expert_tp(batch, xp), pp, head_on_first, Ls_dense,
                                                      Ls_moe, xp),
                  *building_spans(k, batch["placement"], xp), head_on_first, loss)


class DPComm(NamedTuple):
    """Data-parallel collectives per step, before exposure (seconds and cross-building bytes per
    GPU), summed over the dense and the expert groups."""
    ar: object      # DDP all-reduce time (gradients, at reduce_bytes)
    xar: object     # its cross-building bytes
    rs: object      # ZeRO-1 / FSDP reduce-scatter time (gradients, at reduce_bytes; FSDP at fsdp_reduce_bytes)
    xrs: object     # its cross-building bytes
    ag: object      # ZeRO-1 / FSDP all-gather time (parameters, at weight_bytes)
    xag: object     # its cross-building bytes
    rs_in: object   # HSDP reduce-scatter inside the replica
    ag_in: object   # HSDP all-gather inside the replica
    hs_x: object    # HSDP all-reduce of the shard across replicas
    hxs: object     # its cross-building bytes
    calls: object   # reductions per step (buckets, or FSDP / ZeRO-3 reduce-scatters: fsdp_calls)
    gcalls: object  # parameter all-gathers per pass (ZeRO-1's buckets, FSDP / ZeRO-3's: fsdp_calls)


def dp_comm_groups(k: ScenarioConsts, p: CostParams, batch, xp, t: Transport | None = None,
                   lay: Layout | None = None) -> tuple:
    """The data-parallel term, one DPComm per group: (dense,) or (dense, expert). Collectives per step: DDP / ZeRO-1 reduce per gradient bucket
    (dp_bucket_mib); FSDP / HSDP gather and reduce at the workload's granularity (``fsdp_calls``:
    per unit of workload.fsdp_unit_layers layers, per module or per parameter tensor).
    Each call pays its own start-up, ring steps and window; the bytes split evenly over the
    calls (buckets hold the reduced gradients: framework_bucket, dp_bucket_mib).
    Gradients are reduced at ``k.reduce_bytes`` an element (fp32 under Megatron's default;
    ``k.fsdp_reduce_bytes`` for FSDP and HSDP), the parameters gathered at ``k.weight_bytes`` (WorkloadSpec.grad_reduce_dtype, fp8_param_gather);
    where the two differ the gathers are a second collective on the rows that gather.
    ``t``, ``lay``: the rows' ``Transport`` and ``layout`` where the caller has them already."""
    f = xp.asfloat
    tp, cp, ep, dp = (f(batch[x]) for x in ("tp", "cp", "ep", "dp"))
    fl, coll, proto = batch["dp_flavour"], batch["collective"], batch["nccl_protocol"]
    bucket_mib = f(batch["dp_bucket_mib"])
    default_bucket = xp.maximum(k.bucket_min_bytes, k.bucket_bytes_per_rank * dp * cp)   # framework_bucket
    if k.ddp_bucket_bytes > 0:
        default_bucket = xp.where(fl == F_DDP, k.ddp_bucket_bytes, default_bucket)
    if k.one_bucket_without_overlap:     # Megatron-Core: bucket_size = None without overlap_grad_reduce
        default_bucket = xp.where(f(batch["overlap_dp"]) > 0, default_bucket, float("inf"))
    bucket = xp.where(bucket_mib > 0, bucket_mib * 2.0**20, default_bucket)
    t = t or Transport(k, batch, xp)
    lay = lay or layout(k, batch, xp)
    ch, buf = t.ch, t.buf
    Ls, P_dense, P_exp, b_dp, x_exp = lay.Ls, lay.P_dense, lay.P_exp, lay.b_dp, lay.x_exp
    n_in_d = dp * cp / b_dp
    et = expert_tp(batch, xp)
    n_in_e = xp.maximum(dp * cp * tp / (et * ep), 1.0) / x_exp
    bw_x_all = t.goodput(float(k.G_b), ch, ch * buf)   # every GPU of the building crosses at once
    ax_all = k.x_alpha_s * t.stall(ch, ch * buf)
    is_ddp, is_fsdp, is_hsdp = fl == F_DDP, fl == F_FSDP, fl == F_HSDP
    units = xp.ceil(Ls / k.fsdp_unit_layers)

    def group(P, n_in, n_x, stride, layers):
        """One group's collectives per step: DDP all-reduce; ZeRO-1 and FSDP reduce-scatter;
        HSDP reduce-scatter inside and all-reduce of the shard across; one ``collective`` call
        for the reduction of every row, one for the parameters' all-gathers where they move other
        bytes (ZeRO-1, FSDP, HSDP inside), one for HSDP's all-reduce across. Members ``stride`` GPUs
        apart: at least a node apart, the group has one rank per node and NCCL may run PAT for
        its all-gathers and reduce-scatters."""
        bw_in, a_in = ring_tier_of_span(k, stride, n_in, xp)
        bw_ring = t.goodput_where(n_x > 1.0, k.G_b / n_in, ch, ch * buf)    # a crossing ring's rate
        pat_ok = xp.where(stride >= k.node, 1.0, 0.0)
        nb = xp.maximum(1.0, xp.ceil(P * k.reduce_bytes / bucket))     # buckets of reduced gradients
        sharded = is_fsdp | is_hsdp
        reduces, gathers = fsdp_calls(k, P, layers, units, xp)
        calls = xp.where(sharded, reduces, nb)
        gcalls = xp.where(sharded, gathers, nb)
        rb = k.reduce_bytes if k.fsdp_reduce_bytes == k.reduce_bytes else \
            xp.where(sharded, k.fsdp_reduce_bytes, k.reduce_bytes)
        c = P * rb / calls
        is_z1 = fl == F_ZERO1
        # InternEvo's zero1 (zero1_param_sync broadcast) all-reduces its gradients as DDP does
        kind = xp.where((is_ddp | is_z1) if k.zero1_bcast else is_ddp, float(KIND_AR), float(KIND_AG))
        n_x1 = xp.where(is_hsdp, 1.0, n_x)
        # list collectives copy each rank's entry out of (into) the flat buffer (fsdp_gather = parameter)
        copies = xp.where(is_fsdp, n_in * n_x * C.LIST_COLLECTIVE_COPY_s, 0.0) \
            if k.fsdp_gather == FSDP_GATHER_PARAMETER else 0.0

        t1, x1 = collective(kind, coll, proto, c, n_in, n_x1, bw_in, a_in, bw_ring, bw_x_all,
                            ax_all, ch, buf, k.ll128, xp, p.nccl_overhead_scale, ax_all, pat_ok)
        if k.reduce_bytes == k.weight_bytes == k.fsdp_reduce_bytes and k.fsdp_gather != FSDP_GATHER_MODULE:
            t_ag, x_ag = t1, x1
        else:       # the parameters' all-gathers move other bytes or run in other calls: priced apart
            def gather(size, ni, nx, bwi, ai, bwr, cl, pr, chn, bf, bwxa, axa, pok):
                return collective(KIND_AG, cl, pr, size, ni, nx, bwi, ai, bwr, bwxa, axa, chn, bf, k.ll128, xp,
                                  p.nccl_overhead_scale, axa, pok)
            apart = xp.logical_not(is_ddp) & ((rb != k.weight_bytes) | (gcalls != calls))
            t_g, x_g = xp.on_rows(apart, gather, P * k.weight_bytes / gcalls, n_in, n_x1, bw_in,
                                  a_in, bw_ring, coll, proto, ch, buf, bw_x_all, ax_all, pat_ok)
            t_ag, x_ag = xp.where(apart, t_g, t1), xp.where(apart, x_g, x1)
        t1, t_ag = t1 + copies, t_ag + copies

        def across(cl, size, ni, nx, bwi, ai, bwxa, al, pr, chn, bf, axa, pok):
            tt, x = collective(KIND_AR, al, pr, size / ni, xp.full_like(ni, 1.0), nx, bwi, ai, bwxa, bwxa, axa,
                               chn, bf, k.ll128, xp, p.nccl_overhead_scale, axa, pok)
            return cl * tt, cl * x
        hs_x_, hxs_ = xp.on_rows(is_hsdp, across, calls, c, n_in, n_x, bw_in, a_in, bw_x_all, coll, proto, ch, buf,
                                 ax_all, pat_ok)
        t1, x1, t_ag, x_ag = calls * t1, calls * x1, gcalls * t_ag, gcalls * x_ag
        if k.zero1_bcast:       # ... and syncs its parameters by one broadcast per shard owner
            t_bc, x_bc, g = zero1_broadcasts(k, p, t, P, n_in, n_x, stride, coll, proto, bw_x_all, ax_all, is_z1, xp)
            t_ag, x_ag, gcalls = (xp.where(is_z1, t_bc, t_ag), xp.where(is_z1, x_bc, x_ag),
                                  xp.where(is_z1, xp.maximum(g, 1.0), gcalls))
        is_shard = (fl == F_ZERO1) | is_fsdp
        return DPComm(xp.where(is_ddp, t1, 0.0), xp.where(is_ddp, x1, 0.0), xp.where(is_shard, t1, 0.0),
                      xp.where(is_shard, x1, 0.0), xp.where(is_shard, t_ag, 0.0), xp.where(is_shard, x_ag, 0.0),
                      xp.where(is_hsdp, t1, 0.0), xp.where(is_hsdp, t_ag, 0.0), hs_x_, hxs_, calls, gcalls)

    parts = [group(P_dense, n_in_d, b_dp, tp, Ls)]
    if k.experts:
        parts.append(group(P_exp, n_in_e, x_exp, et * ep, xp.maximum(lay.Ls_moe, 1.0)))
    if p.dp_collective_scale != 1.0:                     # 0 must give 0 even where a time is infinite
        s = p.dp_collective_scale
        parts = [g._replace(**{n: xp.where(s == 0.0, 0.0, getattr(g, n) * s) for n in ("ar", "rs", "ag", "rs_in",
                                                                                         "ag_in", "hs_x")})
                 for g in parts]
    return tuple(parts)


def sum_groups(parts: tuple) -> DPComm:
    """The dense and (if any) expert groups' DPComm added field by field (the expert group's
    buckets / units are calls too)."""
    out = parts[0]
    for e in parts[1:]:
        out = DPComm(*(u + w for u, w in zip(out, e)))
    return out

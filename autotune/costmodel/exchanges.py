"""The exchanges of one micro-batch on the bottleneck rank, one named term each
(docs/cost_model.md): the cross-building send/recv link that PP, CP and EP share, the
tensor-parallel collectives and context parallelism's K/V ring. Expert parallelism's dispatch
and combine are ``ep_dispatch.ep_terms``."""
from __future__ import annotations

from typing import NamedTuple

from . import constants as C
from . import nccl as N
from .collectives import tp_collective_time, tp_exposed
from .recompute import tp_collectives_rerun
from .spans import tier_of_span


class P2PLink(NamedTuple):
    """NCCL send/recv across buildings (PP, CP and EP), per connection."""
    channels: float   # NCCL's P2P channels per peer at the NIC's speed (nccl.p2p_channels)
    window: float     # bytes one connection keeps in flight: channels x NCCL_STEPS chunks
    goodput: object   # bytes/s of one connection, bound by its window over the round trip
    stall: object     # factor on a round trip from loss recovery (terms.Transport.stall)


def p2p_link(k, t, xp) -> P2PLink:
    """Cross-building goodput per connection of send/recv: NCCL's P2P channel count per peer,
    NCCL_STEPS chunks of NCCL_P2P_NET_CHUNKSIZE per round trip, each round trip stretched by loss
    recovery (``t``: the scenario's ``terms.Transport``)."""
    ch = float(N.p2p_channels(k.nic_Bps))
    window = ch * N.NCCL_STEPS * N.P2P_NET_CHUNK_BYTES
    bw = t.goodput(float(k.G_b), ch, window)
    stall = t.stall(ch, window)
    bw = xp.minimum(bw, window / (k.x_rtt_s * stall)) if k.x_rtt_s > 0 else bw
    return P2PLink(ch, window, bw, stall)


class TPTerms(NamedTuple):
    """Tensor-parallel (sequence-parallel) collectives of one micro-batch: 2 all-gathers and 2
    reduce-scatters per layer pass (Korthikanti et al. 2022, sec. 4.2.2)."""
    s_bytes: object   # one collective's whole buffer: tok x h at the wire precision
    colls: object     # collectives of the forward
    rerun: object     # collectives the backward runs again under recomputation
    f_link: object    # forward seconds on NVLink
    b_link: object    # backward seconds on NVLink (with the re-run ones)
    f: object         # of the forward's, exposed
    b: object         # of the backward's, exposed


def tp_terms(k, p, rc, tok, tp, lay, lin_f, lin_x, lin_xb, xp) -> TPTerms:
    """The TP collectives of ``tok`` tokens a micro-batch over the rank's layers (``lay``). An MoE
    layer's sequence-sized TP collectives are its shared experts' (they run at tp); its routed
    experts' TP gather is the dispatcher's (``ep_dispatch``). ``lin_f``, ``lin_x``, ``lin_xb``: the
    forward GEMMs whole, and the forward and input-gradient GEMMs as TP comm overlap splits them
    (``compute_pass.PassCompute``)."""
    s_tp = tok * k.h * k.wire_bytes
    t_coll = xp.where(tp > 1, tp_collective_time(s_tp, tp, k.nvlink_Bps, p.nccl_overhead_scale, k.ll128, xp), 0.0)
    moe_tp = 1.0 if k.shared > 0 else 0.0
    colls = 2 * lay.Ls + 2 * (lay.Ls_dense + lay.Ls_moe * moe_tp)
    rerun = tp_collectives_rerun(k, rc, colls, lay.Ls_dense, lay.Ls_moe, moe_tp, xp)
    f_link = colls * t_coll
    b_link = (colls + rerun) * t_coll
    return TPTerms(s_tp, colls, rerun, f_link, b_link, *tp_hidden(k, f_link, b_link, lin_f, lin_x, lin_xb, tp, xp))


def tp_hidden(k, f_link, b_link, lin_f, lin_x, lin_xb, tp, xp):
    """(forward, backward) TP seconds exposed: all of the link time, or under TP comm overlap
    (WorkloadSpec.tp_comm_overlap) what the GEMMs beside it leave (``collectives.tp_exposed``):
    the forward's GEMMs as split (``lin_x``), the backward's input-gradient GEMMs as split
    (``lin_xb``) and its weight-gradient GEMMs (``lin_f``). The piece that cannot overlap follows
    TransformerEngine's methods (``kernels.te_pieces``): in the forward, half the collectives are
    ring all-gathers (one of tp pieces exposed) and half pipelined reduce-scatters (the last of
    ``TE_PIPELINE_SPLIT_PIECES``); in the backward, half ride the ring (one of tp) and half run
    in bulk beside a whole GEMM (no piece of their own)."""
    if not k.tp_overlap:
        return f_link, b_link
    f_floor = 0.5 / tp + 0.5 / C.TE_PIPELINE_SPLIT_PIECES
    return tp_exposed(f_link, lin_x, f_floor, xp), tp_exposed(b_link, lin_xb + lin_f, 0.5 / tp, xp)


class CPTerms(NamedTuple):
    """Context parallelism's ring of K/V blocks, per micro-batch (TransformerEngine's P2P ring
    attention)."""
    cp_in: object     # CP members inside one building
    bw: object        # bytes/s of a ring step's link
    alpha: object     # its latency, seconds
    kv_bytes: object  # one K/V block
    f: object         # forward seconds exposed
    b: object         # backward seconds exposed


def cp_terms(k, p, tok, tp, cp, x_cp, Ls, t_core, link: P2PLink, xp) -> CPTerms:
    """cp steps per layer pass; each of the cp - 1 transfers (the next K/V block; in the backward
    also the dK/dV block, 2x the bytes) overlaps only its own step's attention, ``t_core`` / cp:
    a step whose transfer outlasts its compute exposes the difference, and every step pays the
    link's latency. A ring across buildings (``x_cp`` > 1) runs at the slower of NVLink/NIC and
    the crossing's send/recv goodput (``link``)."""
    cp_in = cp / x_cp
    bw_in, a_in = tier_of_span(k, tp * cp_in, xp)
    bw = xp.where(x_cp > 1, xp.minimum(bw_in, link.goodput), bw_in)
    a = xp.where(x_cp > 1, k.x_alpha_s, a_in)
    kv_bytes = tok * k.kv_width * k.wire_bytes / tp
    step_core = t_core / cp
    f = Ls * (cp - 1) * xp.maximum(0.0, kv_bytes / bw + a - step_core)
    b = Ls * (cp - 1) * xp.maximum(0.0, 2 * kv_bytes / bw + a - p.attention_backward_time_ratio * step_core)
    return CPTerms(cp_in, bw, a, kv_bytes, f, b)

"""The expert-parallel dispatch (or combine) of one MoE layer and micro-batch: the all-to-all over
the EP group, then the experts' TP gather of the routed tokens, and the charge of all of a micro-batch's
dispatches (``ep_terms``: four a layer, six where the backward recomputes the MoE block)."""
from __future__ import annotations

from typing import NamedTuple

from .collectives import all_to_all_time, dedup_share, expert_tp_gather_time
from .params import CostParams
from .pipeline import S_DUALPIPEV, paired_share
from .recompute import moe_block_rerun
from .scenario_consts import ScenarioConsts, ep_load
from .spans import members_per_node, tier_of_span


class EPDispatch(NamedTuple):
    ep_in: object        # EP members inside one building
    a2a_bytes: object    # the mean rank's routed bytes one all-to-all moves
    m_ep: object         # EP members per node (they exchange on NVLink)
    ep_nic: object       # share of the node-leaving bytes a de-duplicating dispatcher sends
    t_a2a: object        # seconds of one all-to-all, the busiest rank's
    t_etp: object        # seconds of its experts' TP gather


def ep_dispatch(k: ScenarioConsts, p: CostParams, tok, tp, ep, et, x_ep, bw_x_p2p, xp) -> EPDispatch:
    """One dispatch of ``tok`` tokens a micro-batch, over ``ep`` members of which ``x_ep`` span
    buildings (``bw_x_p2p``: the crossing link's rate).

    Rank order (Megatron-Core's MoE parallel folding: the expert mesh is tp-ep-dp-pp with cp
    folded into ep and expert dp, parallel_state.py's expert RankGenerator has cp=1): EP members
    are tp GPUs apart, whatever cp is (et apart in the expert mesh etp-ep-dp). With sequence
    parallelism each TP rank holds tok / tp of the micro-batch's tokens and dispatches only those
    (Megatron-Core's all-to-all token dispatcher: all-to-all over the EP group, then an all-gather
    over the expert-TP group on NVLink). The busiest rank receives (dispatch) and sends back
    (combine) ``ep_load`` times the mean tokens, and its experts' TP group gathers them: every
    rank waits for it."""
    ep_in = ep / x_ep
    bw_ep_in, a_ep_in = tier_of_span(k, et * ep_in, xp)
    a2a_bytes = tok * k.top_k * k.h * k.wire_bytes / tp
    m_ep = members_per_node(k, et, ep_in, xp)  # in a building: these exchange on NVLink, the rest on the NIC
    # de-duplicated inside a building only; an EP group across buildings is charged as before
    ep_nic = xp.where(x_ep > 1, 1.0, dedup_share(ep_in, m_ep, k.top_k, xp)) if k.ep_dedup else 1.0
    busy = a2a_bytes * ep_load(k, ep, xp)
    B = k.B
    t_a2a = xp.where(x_ep > 1, (B - 1) / B * busy / bw_x_p2p + k.x_alpha_s,
                     all_to_all_time(busy, ep, bw_ep_in, a_ep_in, xp, m_ep, k.nvlink_Bps, ep_nic))
    t_etp = expert_tp_gather_time(busy, et, k.nvlink_Bps, p.nccl_overhead_scale, k.ll128, xp) if k.experts else 0.0
    return EPDispatch(ep_in, a2a_bytes, m_ep, ep_nic, t_a2a, t_etp)


class EPTerms(NamedTuple):
    """Expert parallelism per micro-batch: dispatch and combine of every MoE layer, forward 2 and
    backward 2 (6 where the backward re-runs the MoE block)."""
    d: EPDispatch     # one dispatch (or combine)
    f: object         # forward seconds exposed
    b: object         # backward seconds exposed
    passes: object    # all-to-alls per MoE layer and micro-batch


def ep_terms(k: ScenarioConsts, p: CostParams, sc, pp, v, m, rc, tok, tp, ep, et, lay, ct, bw_x_p2p, xp) -> EPTerms:
    """The dispatches (``ep_dispatch``: the all-to-all, then the experts' TP gather) of the rank's
    MoE layers. DualPipeV pairs one micro-batch's forward with another's backward, each hiding the
    other's all-to-alls; so does Megatron-Core's EP overlap (WorkloadSpec.ep_comm_overlap) in its
    paired passes, where it runs at all (pp 1 or interleaved, no re-run of the MoE block:
    ``pipeline.paired_share``). ``ct``: the layer's kernel times (``terms.ComputeTerms``)."""
    d = ep_dispatch(k, p, tok, tp, ep, et, lay.x_ep, bw_x_p2p, xp)
    t_disp = d.t_a2a + d.t_etp
    moe_rerun = moe_block_rerun(k, rc)
    paired = xp.where(~moe_rerun & (ep > 1), paired_share(sc, pp, v, m, xp), 0.0) if k.ep_overlap else 0.0
    hide = xp.where(sc == S_DUALPIPEV, 1.0, paired)
    layer_f = ct.attn_lin + ct.moe_lin + ct.core
    Ls_moe = lay.Ls_moe
    f = Ls_moe * ((1.0 - hide) * 2 * t_disp + hide * xp.maximum(0.0, 2 * t_disp - layer_f))
    b = Ls_moe * ((1.0 - hide) * 2 * t_disp + hide * xp.maximum(0.0, 2 * t_disp - 2 * layer_f))
    # recomputing the MoE block (full recomputation, or the moe module) dispatches and combines again
    b = b + xp.where(moe_rerun, Ls_moe * 2 * t_disp, 0.0)
    return EPTerms(d, f, b, 4.0 + xp.where(moe_rerun, 2.0, 0.0))

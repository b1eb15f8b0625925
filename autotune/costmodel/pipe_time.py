"""The pipeline over the step: the stage-to-stage sends (``pp_links``), the pace of one
micro-batch on the bottleneck rank (``pace``) and the whole pipeline's time from that pace
(``pipeline_time``). The schedules' closed forms are ``pipeline``'s."""
from __future__ import annotations

from typing import NamedTuple

from .collectives import p2p_time
from .exchanges import P2PLink
from .pipeline import S_1F1B, S_DUALPIPEV, S_GPIPE, S_INTERLEAVED, S_ZBV, bubble_time, chain_hops, in_flight_microbatches
from .spans import tier_of_span


class PPLinks(NamedTuple):
    """Pipeline point-to-point sends of one micro-batch."""
    s_bytes: object     # one activation (or its gradient) a GPU sends: tok x h / tp at wire precision
    stage_gpus: object  # GPUs of one stage inside one building
    t_in: object        # seconds of one send inside a building
    t_x: object         # seconds of one send across buildings (NCCL send/recv)
    hops: object        # stage boundaries one micro-batch crosses (all chunks)
    xhops: object       # of which across buildings
    chain: object       # seconds down the whole chain of hops (D_chain)
    msgs: object        # sends per micro-batch and rank (v; 2 for the V schedules)
    bw_bound: object    # seconds per micro-batch the link's rate alone takes (a floor on the pace)


def stage_tier(k, b_pp, pp, xp):
    """(GPUs one pipeline stage spans in a building, and the (bandwidth, alpha) of the in-building
    tier joining two adjacent stages: ``tier_of_span`` of both stages' GPUs)."""
    stage_gpus = k.G_b * b_pp / pp
    return (stage_gpus, *tier_of_span(k, 2 * stage_gpus, xp))


def pp_links(k, p, t, link: P2PLink, tok, tp, pp, v, sc, b_pp, xp) -> PPLinks:
    """The sends between stages: inside a building on its tier (``tier_of_span`` of the two stages'
    GPUs); across buildings NCCL send/recv in 128 KiB chunks, NCCL_STEPS in flight per channel
    (``collectives.p2p_time``), each round trip stretched by loss recovery. Every schedule,
    DualPipeV included, moves its messages through the link: the window-bound rate caps the pace
    even where the transfer overlaps compute."""
    s_pp = tok * k.h * k.wire_bytes / tp
    stage_gpus, bw_in, a_in = stage_tier(k, b_pp, pp, xp)
    bw_x = t.goodput_where(b_pp > 1, xp.maximum(stage_gpus, 1.0), link.channels, link.window)
    t_in = s_pp / bw_in + a_in
    ax = k.x_alpha_s * link.stall
    t_x = xp.where(b_pp > 1, p2p_time(s_pp, bw_x, ax, link.channels, xp, p.nccl_overhead_scale), 0.0)
    bw_x_eff = xp.minimum(bw_x, link.window / (2.0 * ax)) if k.x_rtt_s > 0 else bw_x
    hops, xhops = chain_hops(sc, pp, v, b_pp, xp)
    has_pp = pp > 1
    chain = xp.where(has_pp, (hops - xhops) * t_in + xhops * t_x, 0.0)
    msgs = xp.where((sc == S_ZBV) | (sc == S_DUALPIPEV), 2.0, v)
    bw_bound = xp.where(has_pp, msgs * xp.maximum(s_pp / bw_in, xp.where(b_pp > 1, s_pp / bw_x_eff, 0.0)), 0.0)
    return PPLinks(s_pp, stage_gpus, t_in, t_x, hops, xhops, chain, msgs, bw_bound)


def pace(tf, tb, tw, gf, gb, overlap, xp):
    """(forward, backward, micro-batch) pace of the bottleneck rank: FSDP gathers (``gf``, ``gb``)
    overlap the forward and backward they feed (prefetch, ``overlap``) or add to them; the weight
    gradients (``tw``) are compute only. Monotone in every bandwidth and latency."""
    tf_p = xp.where(overlap, xp.maximum(tf, gf), tf + gf)
    tb_p = xp.where(overlap, xp.maximum(tb, gb), tb + gb)
    return tf_p, tb_p, tf_p + tb_p + tw


class PipeTime(NamedTuple):
    """The pipeline's time over one step."""
    infl: object      # micro-batches the first rank admits without waiting
    cycle: object     # seconds between later admissions
    waiting: object   # micro-batches admitted on the cycle
    bubble: object    # the schedule's fill-and-drain idle time (pipeline.bubble_time)
    total: object     # the pipeline's seconds (T_pipe)


def pipeline_time(k, sc, pp, v, m, T_pace, t_f_p, t_b_p, t_w, links: PPLinks, b_pp, xp) -> PipeTime:
    """The first rank admits ``infl`` micro-batches without waiting; each later one waits for the
    backward of the one ``infl`` before it to come back, so it starts at most one round trip
    (every rank's work plus the chain both ways) per ``infl`` micro-batches: the steady cycle.
    1F1B-style alternation waits at least the slowest hop per micro-batch
    (send_forward_recv_backward). The admitted ones' latency is the fill and drain (2 chains).
    Matches the event simulator exactly for 1F1B and interleaved 1F1B with cross-building delays
    (tests/test_simulator.py)."""
    has_pp = pp > 1
    infl = in_flight_microbatches(sc, pp, v, m, xp)
    round_trip = pp * T_pace + 2 * links.chain
    hop = xp.where((sc == S_1F1B) | (sc == S_INTERLEAVED), xp.where(b_pp > 1, links.t_x, links.t_in), 0.0)
    cycle = xp.where(has_pp & (sc != S_GPIPE),
                     xp.maximum(T_pace + hop, round_trip / xp.maximum(infl, 1.0)), T_pace)
    waiting = m - infl                                # GPipe admits all m
    bubble = xp.where(has_pp, bubble_time(sc, pp, v, t_f_p, t_b_p, t_w, xp, k.post_validation, m,
                                          T_pace - t_f_p - t_b_p), 0.0)
    return PipeTime(infl, cycle, waiting, bubble, infl * T_pace + waiting * cycle + bubble + 2 * links.chain)

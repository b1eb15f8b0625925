"""Pipeline schedules in closed form: bubble, in-flight micro-batches, boundary crossings.

Stage times per micro-batch are for a whole pipeline rank (all of its v chunks): t_f forward,
t_b backward for inputs, t_w backward for weights (t_b + t_w = the usual backward).
"""
from __future__ import annotations

from typing import NamedTuple

from ..specs.codes import PPSchedule
from .xp import NUMPY

S_GPIPE, S_1F1B, S_INTERLEAVED, S_ZB1P, S_ZB2P, S_ZBV, S_DUALPIPEV = PPSchedule.codes()   # codes: specs/codes.py


def bubble_time(sched, p, v, t_f, t_b, t_w, xp=NUMPY, post_validation: bool = False, m=None, w_fill=None):
    """Idle time of the slowest rank beyond m (t_f + t_b + t_w).

    GPipe / 1F1B: (p-1)(t_f+t_b+t_w) (Huang et al. 2019; Narayanan et al. 2021).
    Interleaved 1F1B with v chunks: (p-1)(t_f+t_b+t_w)/v (Narayanan et al. 2021, sec. 2.2.2).
    ZB-H1: (p-1)(t_f+t_b-t_w) (Qi et al. 2024, sec. 3).
    ZB-H2: Qi et al. give (p-1) max(0, t_f+t_b-2t_w), which assumes the optimizer step is not
    synchronised (their post-validation, ``post_validation``: WorkloadSpec.optimizer_post_validation);
    with a synchronous step the last rank still waits for the first forward to reach it, so the
    bubble is (p-1) max(t_f, t_f+t_b-2t_w). Our event simulator reproduces exactly this on uniform
    stages.
    ZBV and DualPipeV (2 chunks per rank in a V): the same bound at chunk granularity (/v), with
    the synchronous step's floor whatever ``post_validation`` says: the first rank runs the last
    chunk too, so its own span is the whole step (the event simulator agrees; post-validation is
    priced for ZB-2p only, the schedule Qi et al. give its bubble for).
    DeepSeek-V3's DualPipe bubble (p/2-1)(F&B+B-3W) is of the same order.

    The zero-bubble forms assume enough micro-batches to fill the bubble. With ``m`` micro-batches
    given and a synchronous step (docs/cost_model.md): a rank can fill its bubble with at most its
    own m weight-gradient passes (m t_w in all), so the fill is min(k (p-1) t_w / v, m t_w) with k
    the form's 1 or 2 (without the cap, a longer weight pass shortened the step at m < 2(p-1));
    and the step is held to two critical paths that bound any schedule from below: the last
    micro-batch's forward leaves the first rank after m - 1 others and crosses p v chunk stages,
    its backward crosses them back, then the first rank runs its weight gradient:
    (m - 1 + p v) t_f / v + p t_b + t_w / v; and the last rank starts (p - 1) t_f / v late, then
    runs all of its work. Against the event simulator on random stage times the zero-bubble forms
    were up to 97% too fast at m < p; ``experiments/zero_bubble_bounds.py`` measures both.
    GPipe and 1F1B's exact forms are never below either path. ``w_fill`` (default ``t_w``): the
    time a weight pass fills the bubble with; the cost model passes the paced cycle's time beyond
    the forward and backward (the weight pass, plus the idle time a P2P-bound pace leaves in each
    cycle), so that a longer weight pass inside a cycle whose pace another bound sets neither
    lengthens nor shortens the step. Post-validation (Qi et al.'s unsynchronised step) is priced
    for ZB-2p only: its rows keep the published form; every other row keeps the cap and bounds.
    """
    pm1 = p - 1.0
    full = t_f + t_b + t_w
    wf = t_w if w_fill is None else w_fill

    def forms(fill1, fill2, floor):
        return xp.select(
            [sched == S_GPIPE, sched == S_1F1B, sched == S_INTERLEAVED, sched == S_ZB1P, sched == S_ZB2P],
            [pm1 * full, pm1 * full, pm1 * full / v, pm1 * (t_f + t_b) - fill1,
             xp.maximum(pm1 * floor, pm1 * (t_f + t_b) - fill2)],
            default=xp.maximum(pm1 * t_f, pm1 * (t_f + t_b) - fill2) / v)
    if m is None:
        return forms(pm1 * wf, 2 * pm1 * wf, 0.0 if post_validation else t_f)
    capped = forms(xp.minimum(pm1 * wf, m * wf), xp.minimum(2 * pm1 * wf / v, m * wf) * v, t_f)
    # against the step's m paced cycles (t_f + t_b + w_fill each), which the caller adds
    last_microbatch = (m - 1.0 + p * v) * t_f / v + p * t_b + t_w / v - m * (t_f + t_b + wf)
    bounded = xp.maximum(capped, xp.maximum(last_microbatch, pm1 * t_f / v))
    if not post_validation:
        return bounded
    return xp.where(sched == S_ZB2P, forms(pm1 * wf, 2 * pm1 * wf, 0.0), bounded)   # Qi et al.'s ZB-2p form


def in_flight_microbatches(sched, p, v, m, xp=NUMPY):
    """Micro-batches whose activations the first rank holds at peak (docs/cost_model.md):
    GPipe m; 1F1B p; interleaved p (1 + (p-1)/(p v)); ZB1P, ZBV p; ZB2P 2p; DualPipeV p + 1."""
    infl = xp.select(
        [sched == S_GPIPE, sched == S_1F1B, sched == S_INTERLEAVED, sched == S_ZB2P, sched == S_DUALPIPEV],
        [m, p, p * (1.0 + (p - 1.0) / (p * v)), 2.0 * p, p + 1.0],
        default=p,
    )
    return xp.minimum(infl, m)


class PipeMemory(NamedTuple):
    """What the pipeline schedule puts in one GPU's memory (``pipe_memory``)."""
    infl: object            # micro-batches whose activations the first rank holds at peak
    infl_head: object       # ... the rank that holds the head (the last, or the first in V schedules)
    head_on_first: object   # the head is on the first rank (pp 1, V schedules)
    recv_buffers: object    # micro-batch activation-sized receive buffers a rank keeps (eager)
    pp: object


def head_on_first_rank(sched, p):
    """Whether the embedding and the head are on the same (first) rank: at pp 1, and in V
    schedules (ZBV, DualPipeV), whose first rank also runs the last stage."""
    return (p == 1) | (sched == S_ZBV) | (sched == S_DUALPIPEV)


def pipe_memory(sched, p, v, m, infl, head_on_first, xp=NUMPY) -> PipeMemory:
    """The last rank runs one micro-batch's forward and then its backward (1F1B, ZB); GPipe holds
    all m; interleaved ((v-1)p + 1)/v (Megatron-Core's warm-up on the last rank, (v-1)p chunk
    passes, plus the one in flight, in whole micro-batches); V schedules put the head on the first
    rank; at pp 1 it is the only rank. torch.distributed.pipelining allocates, per local stage,
    one receive buffer per micro-batch for its input (not the first stage) and one for its output
    gradient (not the last), and keeps them: (2v - 1) m on a rank, 2 m for the V pair."""
    is_v = (sched == S_ZBV) | (sched == S_DUALPIPEV)
    n = xp.select([sched == S_GPIPE, sched == S_INTERLEAVED], [m, ((v - 1.0) * p + 1.0) / v], default=1.0)
    chunks = xp.where(is_v, 2.0, v)
    recv = xp.where(p > 1, m * (2.0 * chunks - 1.0 - is_v), 0.0)
    return PipeMemory(infl, xp.minimum(n, m), head_on_first, recv, p)


def sync_windows(sched, p, v, m, xp=NUMPY):
    """(window, last_share): how many of the first rank's micro-batch backwards (forwards) the
    step-end gradient reduction (the next step's parameter gather) can hide behind, and the
    share of its bytes that waits for the very last one.

    Megatron-Core's interleaved 1F1B (pipeline_parallel/schedules.py) launches a model chunk's
    gradient sync (``config.grad_sync_func``) as soon as that chunk's last micro-batch backward
    is done (``is_last_microbatch_for_model_chunk``), and the next chunk's parameter gather
    (``config.param_sync_func``) during the forward of the one before. In the cool-down the first
    rank runs chunk v-1, ..., 0 of the last min(m, p) micro-batches in turn (p per chunk), so
    chunk j's 1/v of the bytes is ready j min(m, p) chunk-backwards before the end: the window is
    its last chunk's own backward (1/v of a micro-batch) plus (v-1)/v min(m, p) micro-batch
    backwards, and 1/v of the bytes can hide only behind the last chunk. The warm-up mirrors it
    for the forward. Every other schedule syncs in the last micro-batch's backward (buckets):
    window 1, share 1."""
    looped = (sched == S_INTERLEAVED) & (v > 1)
    vv = xp.maximum(v, 1.0)
    window = xp.where(looped, 1.0 / vv + (vv - 1.0) / vv * xp.minimum(m, p), 1.0)
    return window, xp.where(looped, 1.0 / vv, 1.0)


def step_end_exposed(link, t_pass, calls, window, last_share, overlap, xp=NUMPY):
    """Seconds of a step-end DP collective (``link`` seconds in ``calls`` buckets or units) left
    exposed: all of it without overlap; with it, the last bucket cannot hide behind the pass that
    produced it, nor the last chunk's share outlast its own pass (``t_pass`` per micro-batch), nor
    the whole outlast the ``window`` (``sync_windows``)."""
    hidden = xp.maximum(xp.maximum(link / calls, last_share * (link - t_pass)), link - window * t_pass)
    return xp.where(overlap, hidden, link)


def paired_share(sched, p, v, m, xp=NUMPY):
    """Share of the first rank's chunk passes that run paired, one micro-batch's forward beside
    another's backward, under Megatron-Core's EP overlap (combined 1F1B,
    ``--overlap-moe-expert-parallel-comm``): at pp 1 all but the first forward and last backward
    (1 - 1/m); interleaved, all but the warm-up's min(2(p-1) + (v-1)p, m v) of the m v chunk
    passes (schedules.py, rank 0's warm-up count); 0 for every other schedule, which Megatron-Core
    refuses the overlap with."""
    mv = m * xp.maximum(v, 1.0)
    warm = xp.minimum(2.0 * (p - 1.0) + (v - 1.0) * p, mv)
    return xp.where(p <= 1, 1.0 - 1.0 / m,
                    xp.where(sched == S_INTERLEAVED, 1.0 - xp.maximum(1.0, warm) / mv, 0.0))


def chain_hops(sched, p, v, b_pp, xp=NUMPY):
    """Boundaries one micro-batch crosses going forward through all p*v chunks, and how many
    of them cross a building boundary when the p ranks are cut into b_pp contiguous groups.

    Looping schedules (interleaved) go round the ranks v times: p v - 1 hops, each loop
    crossing b_pp - 1 building boundaries plus the wrap from the last rank back to the first.
    V-shaped schedules (ZBV, DualPipeV) go down and back: 2p - 1 hops, no wrap.
    """
    is_v = (sched == S_ZBV) | (sched == S_DUALPIPEV)
    hops = xp.where(is_v, 2.0 * p - 1.0, p * v - 1.0)
    bx = b_pp - 1.0
    wraps = xp.where(b_pp > 1, 1.0, 0.0)
    xhops = xp.where(is_v, 2.0 * bx, v * bx + (v - 1.0) * wraps)
    return hops, xhops

"""Collectives and send/recv as NCCL runs them, in closed form, vectorised over configurations.

A group has n_in members inside each of n_x buildings, in rank order, so a ring crosses a
building boundary n_x times (once per building, per channel). Each connection moves the
protocol's slices (``nccl.py``) with at most NCCL_STEPS slots in flight; a slot is freed when
the receiver forwards its data and the credit comes back one one-way latency later.

Per slice (s: wire time of a slice on the hop, o: per-slice software overhead, a: one-way
latency, W: slices in flight, nsl: slices per ring step, k ring steps per loop, G slices in all):
- serialisation: P_ser = max_h (s_h + o_h);
- credit loop on the crossing hop: P_cr = (s_x + o_x + 2 a_x) / W: W slices per round trip.
  Simple keeps 2 ring steps in flight, so a step across the long link costs about RTT/2; LL and
  LL128 keep 8 one-slot steps (4x less). Large messages become window bound:
  goodput per connection <= channels x buffer / RTT;
- data chain: every ring step waits for the previous step from the left neighbour: per loop,
  k-1 hops of max(s+o+a, nsl (s+o)) plus one step of serialisation; the first loop pays the
  worst rank's share of crossing hops, later loops the average.
T = max(G P_ser (or W P_ser + (G-W) P_cr once the window is full) + a_end, chain).
Derived from the event graph that ``collsim.simulate_ring`` walks, and checked against it
(``experiments/collective_closed_form_check.py``). A pipelined ring does *not* pay only the sum of
its hop latencies: that holds for unbounded buffers only.

Algorithms (only what a real library runs; NCCL has no halving-doubling):
- ring (NCCL): all-reduce 2(n-1) steps, all-gather / reduce-scatter n-1;
- tree (NCCL double binary tree, all-reduce only): one rank per node, the worst root-to-leaf path
  of NCCL's own trees (``collsim.tree_path``: ceil(log2 n_x) + 1 crossings); 2 S / bw with the
  crossing edge's window bound; one-slot chunks;
- PAT (NCCL, all-gather / reduce-scatter, Simple, one rank per node; ``pat_time``, ``patsim``);
- hierarchical (HSDP, NCCLX-style, as frameworks build it): reduce-scatter inside, an all-reduce
  of the 1/n_in shard across buildings by every rank at once, all-gather inside;
- nccl_auto: NCCL's tuner choice among ring, tree and PAT by its own estimate, which never sees
  distance (the network plugin reports latency 0; ``nccl.py``).
"""
from __future__ import annotations

import math

import numpy as np

from ..specs.codes import Collective
from . import nccl as N
from .nccl_tuner import KIND_AG, KIND_AR, _all, _by_proto, nccl_choice, nccl_estimate, pat_estimate  # noqa: F401 - public here too
from .xp import NUMPY

COLL_AUTO, COLL_RING, COLL_TREE, COLL_HIER = Collective.codes()   # codes: specs/codes.py


_SLICES = {p: N.RING_SLOTS_PER_STEP[p] // N.RING_SLOTS_PER_SLICE[p] for p in (1, 2, 3)}
_WINDOW = {p: N.in_flight_slices(p) for p in (1, 2, 3)}
_CHUNK = {p: N.ring_chunk_data_bytes(p) for p in (1, 2, 3)}
_SLOT = {p: N.slot_data_bytes(p) for p in (1, 2, 3)}


_CONSTS = np.array([[0.0, 0.0, 0.0, 0.0, 0.0]] + [[_CHUNK[c], _SLICES[c], _WINDOW[c], N.PAYLOAD_FRACTION[c],
                                                     N.NET_STEP_OVERHEAD_s[c]] for c in (1, 2, 3)])
_CONSTS[0] = _CONSTS[N.PROTO_SIMPLE]                 # auto resolves before use; never read
_CONSTS_T = np.ascontiguousarray(_CONSTS.T)


def proto_consts(proto, buffer_bytes, xp=NUMPY):
    """(chunk payload per ring step, slices per step, slices in flight, payload fraction,
    per-step network overhead) per row; Simple's chunk follows NCCL_BUFFSIZE. One gather for all
    five (numpy)."""
    simple_chunk = buffer_bytes / N.NCCL_STEPS * N.RING_SLOTS_PER_STEP[N.PROTO_SIMPLE]
    if xp is NUMPY and np.ndim(proto):
        chunk, nsl, W, pay, ovh = np.take(_CONSTS_T, np.asarray(proto).astype(np.intp), axis=1)   # 2.6x fancy indexing
    else:
        chunk, nsl, W, pay, ovh = (xp.take_table(_CONSTS_T[i], proto) for i in range(5))
    return xp.where(proto == N.PROTO_SIMPLE, simple_chunk, chunk), nsl, W, pay, ovh


def _window_bound(G, W, p_ser, cycle, xp):
    """Seconds until the last of G slices leaves the sender when each takes p_ser on the wire and
    slice g may not start before slice g - W's credit is back (``cycle`` after it started):
    start(g) = floor(g / W) cycle + (g mod W) p_ser when the window binds, g p_ser when not."""
    g1 = G - 1.0
    q = xp.floor(g1 / W)
    return xp.maximum(G * p_ser, q * cycle + (g1 - q * W) * p_ser + p_ser)


def ring_time(kind, size_bytes, n_in, n_x, bw_in, a_in, bw_x, a_x, proto, channels, buffer_bytes, xp=NUMPY,
              ovh_scale=1.0):
    """Seconds for a ring collective of ``size_bytes`` per member (all-reduce: the buffer;
    all-gather: the output; reduce-scatter: the input). bw_* are per member's connection (all
    channels together), a_* one-way latencies; kind = KIND_AR or KIND_AG."""
    n = n_in * n_x
    live = n > 1.0
    n1 = xp.maximum(n, 2.0)
    k = kind * (n1 - 1.0)
    chunk, nsl, W, pay, ovh = proto_consts(proto, buffer_bytes, xp)
    ovh = ovh * ovh_scale
    D = size_bytes / channels
    loops = xp.maximum(1.0, xp.ceil(D / (n1 * chunk)))
    wire = D / (n1 * loops) / nsl / pay               # bytes of one slice on the wire
    spans = n_x > 1.0
    o = ovh / nsl
    s_in = wire * channels / bw_in
    s_x = wire * channels / bw_x
    hx = xp.where(spans, n_x, 0.0)
    ser_in = xp.where(n_in > 1.0, s_in + o, 0.0)
    p_ser = xp.where(spans, xp.maximum(ser_in, s_x + o), s_in + o)
    cycle = xp.where(spans, xp.maximum(s_x + o + 2.0 * a_x, s_in + o + 2.0 * a_in), s_in + o + 2.0 * a_in)
    c_in = xp.maximum(s_in + o + a_in, nsl * (s_in + o))
    c_x = xp.maximum(s_x + o + a_x, nsl * (s_x + o))
    x_first = xp.ceil((k - 1.0) * hx / n1)
    x_avg = (k - 1.0) * hx / n1
    loop_first = x_first * c_x + (k - 1.0 - x_first) * c_in + nsl * p_ser
    loop_avg = x_avg * c_x + (k - 1.0 - x_avg) * c_in + nsl * p_ser
    G = k * loops * nsl
    a_end = xp.where(spans, a_x, a_in)
    tput = _window_bound(G, W, p_ser, cycle, xp) + a_end
    chain = loop_first + (loops - 1.0) * loop_avg + a_end
    t = xp.maximum(tput, chain) + ovh_scale * _by_proto(proto, N.RING_BASE_LATENCY_s, xp)
    return xp.where(live & (size_bytes > 0), t, 0.0)


def p2p_time(size_bytes, bw, a, channels, xp=NUMPY, ovh_scale=1.0):
    """One send/recv over one connection: NCCL_P2P_NET_CHUNKSIZE chunks (4x smaller below one
    chunk, 2x below 8), NCCL_STEPS in flight per channel, freed on arrival. ``bw`` is the
    connection's rate over all its channels. Same event graph as the ring with one step."""
    D = size_bytes / channels
    c = N.P2P_NET_CHUNK_BYTES
    chunk = xp.where(D < c, c / 4.0, xp.where(D < 8 * c, c / 2.0, float(c)))
    G = xp.maximum(1.0, xp.ceil(D / chunk))
    o = ovh_scale * N.NET_STEP_OVERHEAD_s[N.PROTO_SIMPLE] / N.RING_SLOTS_PER_STEP[N.PROTO_SIMPLE]
    s = D / G * channels / bw
    t = _window_bound(G, float(N.NCCL_STEPS), s + o, s + o + 2.0 * a, xp) + a
    return xp.where(size_bytes > 0, t, 0.0)


def tree_chunk(proto, bytes_per_channel, n, buffer_bytes, xp=NUMPY):
    """Payload of one tree chunk, as ``collsim.tree_chunk_bytes`` (enqueue.cc): one slot; LL128
    halves it while a channel has fewer than 64 (to <= 128 KiB), then 16 (to <= 32 KiB), chunks
    per tree step (1 + log2 n + 0.1 steps). Halvings: the fewest that meet the count, capped by
    the floor: ceil(log2(steps x m x c / D)) and ceil(log2(c / floor))."""
    slot = xp.where(proto == N.PROTO_SIMPLE, buffer_bytes / N.NCCL_STEPS, _by_proto(proto, _SLOT, xp))
    steps = 1.0 + xp.floor(xp.log2(xp.maximum(n, 1.0))) + 0.1
    c = slot
    for mult, floor in ((64.0, 131072.0), (16.0, 32768.0)):
        need = xp.ceil(xp.log2(xp.maximum(steps * mult * c / xp.maximum(bytes_per_channel, 1.0), 1.0)))
        cap = xp.ceil(xp.log2(xp.maximum(c / floor, 1.0)))
        c = xp.where(proto == N.PROTO_LL128, c / xp.exp2(xp.minimum(need, cap)), c)
    return c


def tree_allreduce_time(size_bytes, n_in, n_x, bw_in, a_in, bw_x, a_x, proto, channels, buffer_bytes, xp=NUMPY,
                        ovh_scale=1.0):
    """NCCL's double binary tree all-reduce (trees.cc, ``runTreeSplit`` in all_reduce.h), as
    ``collsim.simulate_tree_allreduce`` runs it: each tree half the data on half the channels,
    reduce and broadcast pipelined per one-slot chunk. Per chunk a rank's connection carries 4
    sends over the two trees (up, and down to two children, in the tree where it is interior;
    up in the other): 2 s per chunk with s = its wire time at the full rate, plus the step
    overhead. Latency: the root-to-leaf path with the most crossings (``collsim.tree_path``),
    up and down; each crossing edge keeps NCCL_STEPS chunks in flight per round trip."""
    from .collsim import tree_path
    n = n_in * n_x
    _, _, _, pay, ovh = proto_consts(proto, buffer_bytes, xp)
    ovh = ovh * ovh_scale
    channels = xp.maximum(channels, 2.0)             # at least one channel per tree (connect.cc doubles them)
    D = size_bytes / channels
    G = xp.maximum(1.0, xp.ceil(D / tree_chunk(proto, D, n, buffer_bytes, xp)))
    wire = D / G / pay
    spans = n_x > 1.0
    lin, lx = xp.per_pair(tree_path, n_in, n_x)
    s_in = 2.0 * wire * channels / bw_in
    s_x = 2.0 * wire * channels / bw_x
    W = float(N.NCCL_STEPS)
    p_ser = xp.maximum(s_in + ovh, xp.where(spans, s_x + ovh, 0.0))
    cycle = xp.where(spans, s_x + ovh + 2.0 * a_x, s_in + ovh + 2.0 * a_in)
    latency = 2.0 * (lin * (s_in + ovh + a_in) + lx * (s_x + ovh + a_x))
    # after the first chunk: serialisation, or one round trip per W chunks once the window binds
    t = latency + _window_bound(G, W, p_ser, cycle, xp) - p_ser + ovh_scale * _by_proto(proto, N.TREE_BASE_LATENCY_s, xp)
    return xp.where((n > 1.0) & (size_bytes > 0), t, 0.0)


def _pat_sums(n1, P, n_in, xp):
    """Over PAT's dimensions d (distance 2^d < n), with n_d = floor((n - 1 - 2^d) / 2^(d+1)) + 1
    blocks a rank sends on d: (messages sum_d ceil(n_d / P), messages on dimension 0, blocks
    that cross buildings per rank on average, sum_d n_d min(2^d / n_in, 1))."""
    if xp is NUMPY:
        n1 = np.asarray(n1, dtype=float)
        dmax = int(np.ceil(np.log2(max(float(n1.max()), 2.0)))) if n1.size else 1
        step = np.exp2(np.arange(dmax, dtype=float)).reshape((-1,) + (1,) * n1.ndim)
        nd = np.where(step < n1, np.floor((n1 - 1.0 - step) / (2.0 * step)) + 1.0, 0.0)
        msgs = np.ceil(nd / P)
        return msgs.sum(axis=0), msgs[0], (nd * np.minimum(step / n_in, 1.0)).sum(axis=0)
    msgs = x_blocks = msgs0 = 0.0
    d = 0
    while (1 << d) < n1:
        step = float(1 << d)
        nd = math.floor((n1 - 1.0 - step) / (2.0 * step)) + 1.0
        m = math.ceil(nd / P)
        msgs0 = m if d == 0 else msgs0
        msgs, x_blocks = msgs + m, x_blocks + nd * min(step / n_in, 1.0)
        d += 1
    return msgs, msgs0, x_blocks


def pat_time(kind, size_bytes, n_in, n_x, bw_in, a_in, bw_x, a_x, channels, buffer_bytes, xp=NUMPY, ovh_scale=1.0):
    """(seconds, cross-building bytes per member) of NCCL's PAT all-gather / reduce-scatter
    (``patsim``: the op stream of PatAGAlgorithm, reduce-scatter its time reverse) of
    ``size_bytes`` of output (input) per member; one rank per node. ``bw_x`` is a member's
    crossing rate when every member crosses at once: PAT's high dimensions all do.

    Per channel a rank block of C = S / (n c) moves in R = ceil(C / chunk) rounds (chunk: 512 KiB,
    halved while 32 (16) chunks exceed the channel's share, to 64 KiB); blocks smaller than half a
    step are packed P to a message (``aggFactor``). On dimension d (distance 2^d) a rank sends
    n_d = floor((n - 1 - 2^d) / 2^(d+1)) + 1 blocks per round in ceil(n_d / P) messages. A rank's
    ops run in order, so rounds do not overlap:
    T = max(R (serialisation of a round + path latency), R x chain, window + chain), with the
    path crossing buildings floor(log2 n_x) + 1 times (what the simulation's op stream gives with
    latency alone, for 2-32 ranks per building and 2-5 buildings), and each dimension's
    NCCL_STEPS slots per round trip. Fitted to no
    measurement; checked against the simulation (experiments/collective_closed_form_check.py)."""
    n = n_in * n_x
    n1 = xp.maximum(n, 2.0)
    o = ovh_scale * N.NET_STEP_OVERHEAD_s[N.PROTO_SIMPLE] / N.RING_SLOTS_PER_STEP[N.PROTO_SIMPLE]
    spans = n_x > 1.0
    slot = buffer_bytes / N.NCCL_STEPS
    share = xp.maximum(size_bytes / channels, 1.0)
    mult = xp.where(kind == KIND_AG, 32.0, 16.0)
    halvings = xp.minimum(xp.ceil(xp.log2(xp.maximum(slot * mult / share, 1.0))),
                          xp.ceil(xp.log2(xp.maximum(slot / 65536.0, 1.0))))
    chunk = slot / xp.exp2(halvings)
    C = xp.maximum(xp.round(size_bytes / (n1 * channels)), 1.0)      # whole bytes, as the simulation
    R = xp.maximum(1.0, xp.ceil(C / chunk))
    piece = C / R
    # aggFactor: doubled while a step holds two more blocks, up to the first power of 2 >= n / 2
    P = xp.minimum(xp.where(slot / C >= 2.0, xp.exp2(xp.floor(xp.log2(slot / (2.0 * C))) + 1.0), 1.0),
                   xp.exp2(xp.ceil(xp.log2(xp.maximum(xp.floor(n1 / 2.0), 1.0)))))
    D = xp.ceil(xp.log2(n1))
    bw_d = xp.where(spans, bw_x, bw_in) / channels
    a_d = xp.where(spans, a_x, a_in)
    W = float(N.NCCL_STEPS)
    msgs, msgs0, x_blocks = _pat_sums(n1, P, n_in, xp)
    x_blocks = xp.where(spans, x_blocks, 0.0)
    ser = msgs * o + (n1 - 1.0) * piece / bw_d                # every rank sends n - 1 blocks
    # dimension 0 carries the most messages, and every dimension the same cycle: its window binds
    win = xp.maximum(xp.ceil(msgs0 * R / W) - 1.0, 0.0) * (2.0 * a_d + P * piece / bw_d + o)
    lx = xp.where(spans, xp.minimum(D, xp.floor(xp.log2(xp.maximum(n_x, 1.0))) + 1.0), 0.0)
    s_in, s_x = piece / (bw_in / channels), piece / (bw_x / channels)
    lat = lx * a_x + (D - lx) * a_in
    chain = lx * (a_x + s_x + o) + (D - lx) * (a_in + s_in + o)
    t = ovh_scale * N.PAT_BASE_LATENCY_s + xp.maximum(xp.maximum(ser * R + R * lat, R * chain), win + chain)
    live_all = (n > 1.0) & (size_bytes > 0)
    return xp.where(live_all, t, 0.0), xp.where(live_all, x_blocks * size_bytes / n1, 0.0)


def collective(kind, algo, proto, size_bytes, n_in, n_x, bw_in, a_in, bw_x_ring, bw_x_all, a_x,
               channels, buffer_bytes, allow_ll128=True, xp=NUMPY, ovh_scale=1.0, a_x_all=None, pat_ok=False):
    """(seconds, bytes per member that cross a building boundary) for one all-reduce (KIND_AR) or
    all-gather / reduce-scatter (KIND_AG) of ``size_bytes`` per member, by algorithm code and
    protocol code (PROTO_AUTO: what NCCL's tuner picks for the algorithm that runs). ``kind``
    may differ per row, so one call serves a batch of mixed collectives.
    bw_x_ring: a member's crossing rate when one connection per group crosses (ring, tree);
    bw_x_all: when every member crosses at once (hierarchical's middle phase, PAT); a_x, a_x_all:
    the crossing's one-way latency for each pattern (stretched by loss-recovery stalls).
    pat_ok: the group has one rank per node, so NCCL's tuner may run PAT for all-gather and
    reduce-scatter (Simple protocol; under nccl_auto with protocol auto or simple).

    Cross-building bytes: a ring's n_x crossing connections each carry k/n of S: k/n S / n_in per
    member; a tree has n_x - 1 crossing edges per tree carrying S/2 up and S/2 down, two trees:
    2 (n_x - 1) S / n; hierarchical: a ring of n_x over the S / n_in shard."""
    n = n_in * n_x
    spans = n_x > 1.0
    only_ar, only_ag = _all(kind, KIND_AR), _all(kind, KIND_AG)
    kind = kind + 0.0 * n_in                         # per-row, so every argument can be subset
    is_ar = kind == KIND_AR
    is_hier = (algo == COLL_HIER) & spans
    bw_sel = xp.where(spans, xp.minimum(bw_in, bw_x_ring), bw_in)

    # PAT: only NCCL's own choice runs it, and only with the Simple protocol
    pat_rows = False if only_ar else (xp.logical_not(is_ar) & (algo == COLL_AUTO)
                                      & ((proto == N.PROTO_AUTO) | (proto == N.PROTO_SIMPLE))
                                      & (pat_ok + 0.0 * n_in > 0.5) & (n > 1.0))

    def choose(kd, size, nn, bw, pok):
        use_t, p_t, p_r = nccl_choice(kd, size, nn, bw, allow_ll128, xp, pok)
        return xp.where(use_t, 1.0, 0.0), p_t, p_r
    choose.n_out = 3
    # NCCL's tuner runs only where something is left to it (protocol auto or collective nccl_auto)
    auto_tree, tree_p, ring_p = xp.on_rows((proto == N.PROTO_AUTO) | (algo == COLL_AUTO), choose, kind, size_bytes, n, bw_sel,
                                           xp.where(pat_rows, 1.0, 0.0) + 0.0 * n_in)
    auto_tree = auto_tree > 0.5
    not_hier = xp.logical_not(is_hier)
    use_tree = False if only_ag else (xp.where(algo == COLL_AUTO, auto_tree, algo == COLL_TREE) & not_hier & is_ar)
    use_pat = False if only_ar else (auto_tree & pat_rows & not_hier)
    # protocol: forced, else NCCL's best for the algorithm that actually runs
    p_run = xp.where(proto > 0, proto, xp.where(use_tree, tree_p, ring_p))

    def ring(kd, size, ni, nx, bwi, ai, bwx, ax, p, chn, buf):
        t = ring_time(kd, size, ni, nx, bwi, ai, bwx, ax, p, chn, buf, xp, ovh_scale)
        return t, xp.where(nx > 1.0, kd * (ni * nx - 1.0) / (ni * nx) * size / ni, 0.0)

    def tree(kd, size, ni, nx, bwi, ai, bwx, ax, p, chn, buf):
        t = tree_allreduce_time(size, ni, nx, bwi, ai, bwx, ax, p, chn, buf, xp, ovh_scale)
        return t, 2.0 * (nx - 1.0) * size / (ni * nx)

    def hier(kd, size, ni, nx, bwi, ai, bwx, ax, p, chn, buf):
        one = xp.full_like(ni, 1.0)
        inner = ring_time(KIND_AG, size, ni, one, bwi, ai, bwi, ai, p, chn, buf, xp, ovh_scale)
        across = ring_time(kd, size / ni, one, nx, bwx, ax, bwx, ax, p, chn, buf, xp, ovh_scale)
        return inner * xp.where(kd == KIND_AR, 2.0, 1.0) + across, kd * (nx - 1.0) / nx * size / ni

    def pat(kd, size, ni, nx, bwi, ai, bwx, ax, p, chn, buf):
        return pat_time(kd, size, ni, nx, bwi, ai, bwx, ax, chn, buf, xp, ovh_scale)

    a_x = a_x + 0.0 * n_in
    a_all = a_x if a_x_all is None else a_x_all + 0.0 * n_in

    def args(bwx, ax_):
        return (kind, size_bytes, n_in, n_x, bw_in, a_in, bwx, ax_, p_run, channels, buffer_bytes)

    plain = not_hier & xp.logical_not(use_tree) & xp.logical_not(use_pat)
    t, x = xp.on_rows(plain, ring, *args(bw_x_ring, a_x))
    t_h, x_h = xp.on_rows(is_hier, hier, *args(bw_x_all, a_all))
    t, x = t + t_h, x + x_h
    if not only_ar:
        t_p, x_p = xp.on_rows(use_pat, pat, *args(bw_x_all, a_all))
        t, x = t + t_p, x + x_p
    if not only_ag:
        t_t, x_t = xp.on_rows(use_tree, tree, *args(bw_x_ring, a_x))
        t, x = t + t_t, x + x_t
    return t, x


def all_to_all_time(size_bytes, n, bw, alpha, xp=NUMPY, m=None, bw_node=None, nic_share=1.0):
    """All-to-all of ``size_bytes`` per GPU among n, pairwise exchanges running concurrently,
    plus alpha (latency of the last exchange). With m members per node (``m``, ``bw_node``: the
    NVLink rate), (m-1)/n of the data stays in the node on NVLink while (n-m)/n leaves on the
    GPU's own link ``bw``, at once: max((n-m)/n S / bw, (m-1)/n S / bw_node) + alpha; a
    de-duplicating dispatcher sends only ``nic_share`` of the leaving bytes (``dedup_share``).
    Without m every destination is behind ``bw``: (n-1)/n S / bw + alpha."""
    if m is None:
        t = (n - 1.0) / n * size_bytes / bw + alpha
    else:
        t = xp.maximum(nic_share * (n - m) / n * size_bytes / bw, (m - 1.0) / n * size_bytes / bw_node) + alpha
    return xp.where(n <= 1.0, 0.0, t)


def dedup_share(n, m, top_k, xp=NUMPY):
    """Share of an MoE all-to-all's node-leaving bytes that a de-duplicating dispatcher (DeepEP,
    HybridEP) sends: a token crosses once to each remote node that holds one of its top_k experts
    and is forwarded to the experts inside that node on NVLink (DeepSeek-V3 report, sec. 3.2.2;
    DeepEP's internode kernels). With n EP members, m per node (n/m nodes) and experts drawn
    uniformly, a token reaches (n/m - 1)(1 - (1 - m/n)^top_k) remote nodes on average, against
    top_k (n-m)/n copies one per expert."""
    nodes = xp.maximum(n / m, 1.0)
    remote = (nodes - 1.0) * (1.0 - (1.0 - 1.0 / nodes) ** top_k)
    per_expert = top_k * (n - m) / xp.maximum(n, 1.0)
    return xp.where(per_expert > 0, xp.minimum(1.0, remote / xp.maximum(per_expert, 1e-30)), 1.0)


def tp_collective_time(size_bytes, n, nvlink_Bps, ovh_scale, ll128: bool, xp):
    """One sequence-parallel all-gather or reduce-scatter of ``size_bytes`` (the gathered buffer)
    over n GPUs of one NVLink domain, as NCCL's tuner estimates a ring (tuning.cc, ``nccl.py``):
    per protocol, base latency + (n - 1) NVLink step latencies + (n - 1) / n of the bytes at the
    protocol's share of the link rate, and the fastest protocol (LL128 only where the node runs
    it). The latencies, not the bytes, dominate the small messages of small models at high TP."""
    protos = (N.PROTO_SIMPLE, N.PROTO_LL128, N.PROTO_LL) if ll128 else (N.PROTO_SIMPLE, N.PROTO_LL)
    best = None
    for pr in protos:
        t = ovh_scale * (N.RING_BASE_LATENCY_s[pr] + (n - 1) * N.RING_NVLINK_STEP_LATENCY_s[pr]) \
            + (n - 1) / n * size_bytes / (nvlink_Bps * N.RING_BW_FACTOR[pr])
        best = t if best is None else xp.minimum(best, t)
    return best


def expert_tp_gather_time(a2a_bytes, et, nvlink_Bps, ovh_scale, ll128: bool, xp):
    """Experts under TP (et > 1): after the all-to-all the dispatcher all-gathers the routed tokens
    it received over the expert-TP group, and reduce-scatters them in the combine (Megatron-Core's
    all-to-all dispatcher: gather_from_sequence_parallel_region /
    reduce_scatter_to_sequence_parallel_region on the permuted tokens). The gathered buffer is
    et x ``a2a_bytes`` (tok top_k et / tp rows): top_k times a dense layer's sequence all-gather at
    et = tp. One such collective per dispatch or combine; 0 at et = 1."""
    return xp.where(et > 1, tp_collective_time(a2a_bytes * et, et, nvlink_Bps, ovh_scale, ll128, xp), 0.0)


def tp_exposed(link_s, gemm_s, floor_share, xp):
    """TP collectives' time left exposed by TransformerEngine's comm-GEMM overlap (Wang et al.,
    ASPLOS'23, "Overlap communication with dependent computation via decomposition"): each
    collective is split into pieces exchanged while the adjacent GEMM (``gemm_s`` of them in all)
    consumes or produces them, so what outlasts the GEMMs stays exposed, and never less than the
    one piece that cannot overlap (``floor_share`` of the link time, ``exchanges.tp_hidden``)."""
    return xp.maximum(link_s * floor_share, link_s - gemm_s)

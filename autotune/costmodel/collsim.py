"""Chunk-level event simulation of NCCL collectives and send/recv: the referee for the closed
forms in ``collectives.py``, as ``simulator.py`` is for the pipeline formulas.

What is simulated, per channel (channels are identical and independent: each gets 1/channels of
the data and of every connection's bandwidth, and a buffer of its own):
- every connection r -> r+1 sends slices in order; a slice occupies the wire for
  wire_bytes / bandwidth and arrives one-way latency later;
- a sender may have at most ``in_flight_slices`` slices un-freed at its receiver (NCCL_STEPS slots
  of the protocol's buffer, ``nccl.py``); the receiver frees a slot when it forwards the data
  (its own send of the next step starts) or, on the last step of a loop, when it arrives; the
  credit travels back one-way latency;
- a ring step waits for the previous step's slice from the left neighbour (data dependency);
  step 0 of every loop sends the rank's own data;
- each slice pays the protocol's per-step software overhead on network hops.

Event times follow from these precedence rules exactly: each event's time is the maximum of its
predecessors' times plus its own duration (a max-plus recurrence), computed slice by slice for
all ranks at once with numpy. This is the same event graph a priority-queue simulator would walk;
no event is approximated.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import nccl as N


@dataclass(frozen=True)
class RingHops:
    """Per-rank outgoing connection of a ring, per channel: bandwidth (B/s), one-way latency (s)
    and software overhead per slice (s). Arrays of length n."""
    bw_Bps: np.ndarray
    latency_s: np.ndarray
    overhead_s: np.ndarray

    @classmethod
    def two_tier(cls, n_in: int, n_x: int, bw_in: float, lat_in: float, bw_x: float, lat_x: float,
                 ovh_in: float, ovh_x: float) -> "RingHops":
        """n_x buildings of n_in ranks in rank order: the last rank of each building sends across."""
        n = n_in * n_x
        cross = np.zeros(n, dtype=bool)
        if n_x > 1:
            cross[n_in - 1::n_in] = True
        return cls(np.where(cross, bw_x, bw_in), np.where(cross, lat_x, lat_in), np.where(cross, ovh_x, ovh_in))


def _ring_steps(kind: str, n: int) -> int:
    return 2 * (n - 1) if kind == "allreduce" else n - 1


def simulate_ring(kind: str, size_bytes: float, hops: RingHops, proto: int, channels: int = 1,
                  simple_buffer_bytes: float = N.SIMPLE_BUFFER_BYTES_DEFAULT, base_latency_s: float = 0.0) -> float:
    """Seconds for a ring all-reduce / all-gather / reduce-scatter of ``size_bytes`` per rank
    (all-reduce: the buffer; all-gather: the output; reduce-scatter: the input)."""
    n = len(hops.bw_Bps)
    if n <= 1 or size_bytes <= 0:
        return 0.0
    k = _ring_steps(kind, n)
    nsl = N.RING_SLOTS_PER_STEP[proto] // N.RING_SLOTS_PER_SLICE[proto]
    W = N.in_flight_slices(proto)
    D = size_bytes / channels
    chunk = N.ring_chunk_data_bytes(proto, simple_buffer_bytes)
    loops = max(1, math.ceil(D / (n * chunk)))
    step_payload = D / (n * loops)
    wire = step_payload / nsl / N.PAYLOAD_FRACTION[proto]
    bw = hops.bw_Bps / channels
    ser = wire / bw
    lat, ovh = hops.latency_s, hops.overhead_s / nsl
    G = k * loops * nsl
    H = W + nsl + 2                          # history kept (ring buffers over slice index)
    start = np.zeros((H, n))
    end = np.zeros((H, n))
    arr = np.zeros((H, n))                   # arrival at rank r+1 of the slice rank r sent
    prev_end = np.zeros(n)
    for g in range(G):
        t = g // nsl
        ready = prev_end.copy()
        if t % k:                            # needs the previous step's slice from the left
            ready = np.maximum(ready, np.roll(arr[(g - nsl) % H], 1))
        if g >= W:                           # a free slot at the receiver
            x = g - W
            if (x // nsl) % k == k - 1:      # last step of its loop: freed on arrival
                freed = arr[x % H]
            else:                            # freed when the receiver forwards it
                freed = np.roll(start[(x + nsl) % H], -1)
            ready = np.maximum(ready, freed + lat)
        s = ready + ovh
        e = s + ser
        start[g % H], end[g % H], arr[g % H] = s, e, e + lat
        prev_end = e
    return base_latency_s + float(arr[(G - 1) % H].max())


def simulate_p2p(size_bytes: float, bw_Bps: float, latency_s: float, overhead_s: float = 0.0,
                 channels: int = 1, chunk_bytes: float = N.P2P_NET_CHUNK_BYTES,
                 in_flight: int = N.NCCL_STEPS) -> float:
    """Seconds for one send/recv of ``size_bytes`` over one connection: chunks of ``chunk_bytes``
    (NCCL shrinks them 4x below one step and 2x below 8 steps), ``in_flight`` un-freed at a
    time; the receiver frees a chunk on arrival."""
    if size_bytes <= 0:
        return 0.0
    D = size_bytes / channels
    c = chunk_bytes / 4 if D < chunk_bytes else (chunk_bytes / 2 if D < 8 * chunk_bytes else chunk_bytes)
    G = max(1, math.ceil(D / c))
    ser = D / G / (bw_Bps / channels)
    arr = np.zeros(G)
    prev_end = 0.0
    for g in range(G):
        ready = prev_end
        if g >= in_flight:
            ready = max(ready, arr[g - in_flight] + latency_s)
        e = ready + overhead_s + ser
        arr[g] = e + latency_s
        prev_end = e
    return float(arr[-1])


def simulate_hierarchical_allreduce(size_bytes: float, n_in: int, n_x: int, bw_in: float, lat_in: float,
                                    bw_x: float, lat_x: float, ovh_in: float, ovh_x: float, proto: int,
                                    channels: int = 1, simple_buffer_bytes: float = N.SIMPLE_BUFFER_BYTES_DEFAULT,
                                    base_latency_s: float = 0.0) -> float:
    """Hierarchical all-reduce as frameworks build it (HSDP; NCCLX-style): reduce-scatter inside
    each building, all-reduce of the 1/n_in shard across buildings (every rank at once, a ring
    of n_x), all-gather inside. Three collectives, one after the other."""
    t = 0.0
    if n_in > 1:
        inside = RingHops.two_tier(n_in, 1, bw_in, lat_in, bw_in, lat_in, ovh_in, ovh_in)
        t += 2 * simulate_ring("reducescatter", size_bytes, inside, proto, channels, simple_buffer_bytes, base_latency_s)
    if n_x > 1:
        across = RingHops.two_tier(1, n_x, bw_x, lat_x, bw_x, lat_x, ovh_x, ovh_x)
        t += simulate_ring("allreduce", size_bytes / n_in, across, proto, channels, simple_buffer_bytes, base_latency_s)
    return t


def nccl_btree(n: int) -> np.ndarray:
    """Parent of every rank in NCCL's binary tree over n ranks (-1 for the root, rank 0): with b
    the lowest set bit of r, the parent is (r ^ b) | 2b, or r ^ b where that is out of range
    (``ncclGetBtree`` in src/graph/trees.cc)."""
    r = np.arange(n, dtype=np.int64)
    bit = r & -r
    up = (r ^ bit) | (bit << 1)
    up = np.where(up >= n, r ^ bit, up)
    up[0] = -1
    return up


def nccl_dtree(n: int) -> tuple[np.ndarray, np.ndarray]:
    """NCCL's double binary tree (``ncclGetDtree``): the binary tree, and its mirror image
    (n even) or the tree shifted by one rank (n odd), so a rank that is a leaf in one is interior
    in the other. Returns the parent arrays of both."""
    t0 = nccl_btree(n)
    r = np.arange(n)
    if n % 2:
        u = t0[(r - 1 + n) % n]
        t1 = np.where(u < 0, -1, (u + 1) % n)
    else:
        u = t0[n - 1 - r]
        t1 = np.where(u < 0, -1, n - 1 - u)
    return t0, t1


@lru_cache(maxsize=None)
def tree_path(n_in: int, n_x: int) -> tuple[int, int]:
    """(in-building edges, crossing edges) on the root-to-leaf path of NCCL's double binary tree
    with the most crossings (then the most edges), over n_x buildings of n_in ranks in rank
    order. The critical path of a pipelined tree's latency: up once, down once."""
    n = n_in * n_x
    if n <= 1:
        return 0, 0
    bld = np.arange(n) // n_in
    best = (0, 0)
    for par in nccl_dtree(n):
        safe = np.maximum(par, 0)
        hop_x = (par >= 0) & (bld != bld[safe])
        x, e = hop_x.astype(np.int64), (par >= 0).astype(np.int64)
        anc = par.copy()
        while (anc >= 0).any():                      # climb one level at a time, every leaf at once
            live = anc >= 0
            a = np.maximum(anc, 0)
            x, e = x + np.where(live, hop_x[a], 0), e + np.where(live, par[a] >= 0, 0)
            anc = np.where(live, par[a], -1)
        k = np.lexsort((e, x))[-1]
        best = max(best, (int(x[k]), int(e[k])))
    return best[1] - best[0], best[0]


def tree_chunk_bytes(proto: int, bytes_per_channel: float, n_nodes: int,
                     simple_buffer_bytes: float = N.SIMPLE_BUFFER_BYTES_DEFAULT) -> float:
    """Payload of one tree chunk (``calcCollChunking`` in src/enqueue.cc, one rank per node):
    one slot; LL128 halves it while a channel's message has fewer than 64 (down to 128 KiB), then
    16 (down to 32 KiB), chunks per tree step, with 1 + log2(nodes) + 0.1 steps."""
    c = N.slot_data_bytes(proto, simple_buffer_bytes)
    if proto == N.PROTO_LL128:
        steps = 1 + int(math.log2(max(n_nodes, 1))) + 0.1
        while bytes_per_channel / c < steps * 64 and c > 131072:
            c /= 2
        while bytes_per_channel / c < steps * 16 and c > 32768:
            c /= 2
    return c


def simulate_tree_allreduce(size_bytes: float, n_in: int, n_x: int, bw_in: float, lat_in: float, bw_x: float,
                            lat_x: float, ovh_in: float, ovh_x: float, proto: int, channels: int = 2,
                            simple_buffer_bytes: float = N.SIMPLE_BUFFER_BYTES_DEFAULT,
                            base_latency_s: float = 0.0) -> float:
    """Seconds for NCCL's double-binary-tree all-reduce of ``size_bytes`` per rank over n_x
    buildings of n_in ranks (one rank per node, in rank order; an edge crosses when its ends are
    in different buildings).

    As NCCL runs it: each tree carries half the data on half the channels (``connect.cc``:
    channels [0, c) follow tree 0, [c, 2c) tree 1), in one-slot chunks (``tree_chunk_bytes``),
    NCCL_STEPS in flight per edge. ``runTreeSplit`` (``all_reduce.h``): per chunk a rank reduces
    what its children sent and sends it up on one thread group while the other forwards what
    comes down; the root reduces and sends down in one operation. A slot is freed when the
    receiver's operation that consumes it starts (a leaf's on arrival) and the credit travels
    back one one-way latency. A rank's connection rate is shared evenly by the edges it sends on
    (both trees, up and down; the static share of a processor-sharing NIC)."""
    n = n_in * n_x
    if n <= 1 or size_bytes <= 0:
        return 0.0
    channels = max(channels, 2)                                   # NCCL doubles channels for the two trees
    t0, t1 = nccl_dtree(n)
    par = np.concatenate([t0, np.where(t1 < 0, -1, t1 + n)])     # 2n virtual nodes, tree 1 at n..2n-1
    phys = np.concatenate([np.arange(n), np.arange(n)])
    depth = np.zeros(2 * n, dtype=np.int64)
    for v in range(2 * n):
        u = v
        while par[u] >= 0:
            u, depth[v] = par[u], depth[v] + 1
    D = size_bytes / channels                                     # per tree and channel: (S/2) / (c/2)
    G = max(1, math.ceil(D / tree_chunk_bytes(proto, D, n, simple_buffer_bytes)))
    wire = D / G / N.PAYLOAD_FRACTION[proto]
    W = N.NCCL_STEPS
    has_par = par >= 0
    p_of = np.maximum(par, 0)
    n_kids = np.bincount(par[has_par], minlength=2 * n)
    sends = np.bincount(phys[has_par], minlength=n) + np.bincount(phys, weights=n_kids, minlength=n)
    bld = phys // n_in
    cross = has_par & (bld != bld[p_of])
    rate = np.where(cross, bw_x, bw_in) / (channels / 2.0)     # per channel, edge v <-> parent(v)
    lat = np.where(cross, lat_x, lat_in)
    ovh = np.where(cross, ovh_x, ovh_in)
    ser_up = wire * np.maximum(sends[phys], 1) / rate
    ser_dn = wire * np.maximum(sends[phys[p_of]], 1) / rate      # parent(v) -> v
    levels = [np.flatnonzero(depth == d) for d in range(int(depth.max()) + 1)]
    root_kid = depth[p_of] == 0
    H = W + 2
    up_op, dn_op, dn_arr = (np.zeros((H, 2 * n)) for _ in range(3))
    up_end, dn_end = np.zeros(2 * n), np.zeros(2 * n)
    for g in range(G):
        h, x = g % H, (g - W) % H
        kid_max = np.zeros(2 * n)
        for lv in levels[:0:-1]:                                  # reduce: deepest level first
            op = kid_max[lv]
            if g >= W:                                            # slot freed by the parent's operation
                free = np.where(root_kid[lv], dn_op[x, p_of[lv]], up_op[x, p_of[lv]])
                op = np.maximum(op, free + lat[lv])
            up_op[h, lv] = op
            e = np.maximum(op, up_end[lv]) + ovh[lv] + ser_up[lv]
            up_end[lv] = e
            np.maximum.at(kid_max, p_of[lv], e + lat[lv])
        for d, lv in enumerate(levels):                           # broadcast: root level first
            op = kid_max[lv] if d == 0 else dn_arr[h, lv]
            kids = levels[d + 1] if d + 1 < len(levels) else None
            if kids is None:
                dn_op[h, lv] = op
                continue
            if g >= W:                                            # credits of every child edge
                need = np.zeros(2 * n)
                np.maximum.at(need, p_of[kids], dn_op[x, kids] + lat[kids])
                op = np.maximum(op, need[lv])
            dn_op[h, lv] = np.where(n_kids[lv] > 0, op, dn_arr[h, lv])
            e = np.maximum(dn_op[h, p_of[kids]], dn_end[kids]) + ovh[kids] + ser_dn[kids]
            dn_end[kids] = e
            dn_arr[h, kids] = e + lat[kids]
    return base_latency_s + float(dn_arr[(G - 1) % H].max())

"""NCCL's PAT all-gather (and reduce-scatter, its time reverse) as it runs: the op stream of
``PatAGAlgorithm::getNextOp`` (src/include/collectives.h, NCCL 2.30.7) ported line for line, and a
message-level event simulation of it: the referee for ``collectives.pat_time``.

PAT ("parallel aggregated trees") runs only with one GPU per node (``tuning.cc``
``ncclPatEnable``: nNodes == nRanks), Simple protocol, for all-gather and reduce-scatter. Rank r
sends on dimension d to r - 2^d and receives on d from r + 2^d (``prims_simple.h``); every block
travels a binomial tree, so the collective is log2(n) hops deep, but every rank crosses
buildings on its high dimensions: far more bytes cross than in a ring.

Simulation (per channel; channels are identical): one rank runs its ops strictly in order (one
thread group when blocks are larger than half a chunk; the ``parallelFactor`` workers of
aggregated steps are not modelled). An op waits for the message it reads to arrive and, if it
sends, for a free slot (NCCL_STEPS per connection; a slot is freed by the receiver's op that
posts the receive, and the credit travels back one one-way latency). A posted message leaves on
its rank's in-building or cross-building queue, each message paying the per-step overhead there. Reduce-scatter
moves the same messages between the same peers in reverse order; its time is taken as the
all-gather's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from . import nccl as N


def _log2_up(x: int) -> int:
    n = 0
    while (1 << n) < x:
        n += 1
    return n


def _first_bit(i: int, mx: int) -> int:
    return (i & -i).bit_length() - 1 if i else mx


@dataclass(frozen=True)
class PatOp:
    """One op of a rank's stream (rank-relative: blocks are offsets from the rank)."""
    send_dim: int          # -1: no send
    recv_dim: int          # -1: no receive
    block: int             # relative offset of the block sent (send) or received (phase 0)
    post_send: bool
    post_recv: bool
    nelem: int             # bytes of each block piece in this op
    rnd: int = 0           # which chunk of the blocks (the schedule repeats per chunk)


def pat_ag_ops(nranks: int, chunk_bytes: int, size_bytes: int, step_bytes: int = N.SIMPLE_BUFFER_BYTES_DEFAULT // 8,
               step_depth: int = N.NCCL_STEPS, max_parallel: int = 16) -> list[PatOp]:
    """The non-skipped ops of ``PatAGAlgorithm(stepSize, stepDepth, maxParallelFactor, 0, size,
    size, chunkCount, rank 0, nranks)`` with 1-byte elements, in order (getNextOp)."""
    st = dict(offset=0, end=size_bytes, count=size_bytes, chunk=chunk_bytes)
    nr2 = 1 << _log2_up(nranks)
    agg_delta, agg = nr2, 1
    channel_size = size_bytes
    while step_bytes // (channel_size * agg) >= 2 and agg < nranks // 2:
        agg *= 2
        agg_delta //= 2
    post_freq = agg
    parallel = min(max_parallel, post_freq)
    d = step_depth
    while d > 1 and agg < nranks // 2:
        d //= 2
        agg *= 2
        agg_delta //= 2
    as_dim = _log2_up(agg_delta)
    s = dict(v=0, bit_count=[0] * 32, bit_zero=[0] * 32, a=0, last_a=0, scale=0, phase=0, as_=0, nelem=0)

    def next_as():
        for dd in range(as_dim):
            p = 1 << dd
            s["bit_count"][dd] -= 1
            if s["bit_count"][dd] == 0:
                s["v"] ^= p
                s["bit_count"][dd] = p
                if (s["v"] & p) == 0:
                    s["bit_count"][dd] += _first_bit(s["bit_zero"][dd], as_dim) - 1
                    if s["bit_count"][dd] == 0:
                        s["v"] ^= p
                        s["bit_count"][dd] = p
                    s["bit_zero"][dd] += 1
        return s["v"]

    def reset_a():
        s["a"] = 0
        s["last_a"] = agg
        if s["phase"] >= 2:
            s["last_a"] //= 2 * s["scale"]

    def reset():
        s["nelem"] = min(st["chunk"], st["end"] - st["offset"])
        s["scale"] = agg // 2
        s["phase"] = 2 if s["scale"] else 1
        s["v"] = 0
        for i in range(as_dim):
            s["bit_count"][i] = as_dim - i
            s["bit_zero"][i] = 1
        s["as_"] = next_as()
        reset_a()

    reset()
    ops: list[PatOp] = []
    while True:
        a, as_, phase, nelem = s["a"], s["as_"], s["phase"], s["nelem"]
        rnd = st["offset"] // st["chunk"]
        skip = a >= s["last_a"]
        op = None
        if not skip and phase == 0:
            x = a * agg_delta + as_
            skip = x >= nranks
            post_recv = (a % post_freq == post_freq - 1) or ((a + 1) * agg_delta + as_ >= nranks)
            op = PatOp(-1, 0, x, False, post_recv, nelem, rnd)
        elif not skip and phase == 1:
            x = a * agg_delta + as_
            skip = x >= nranks
            send_dim = _first_bit(x, nr2)
            x -= 1 << send_dim
            recv_dim = _first_bit(x, nr2) if x else -1
            post_send = (a % post_freq == post_freq - 1) or ((a + 1) * agg_delta + as_ >= nranks)
            post_recv = send_dim == 0 and ((a % post_freq == post_freq - 1) or ((a + 1) * agg_delta + as_ - 1 >= nranks))
            if recv_dim == -1:
                post_recv = False
            elif as_ - (1 << send_dim) == 0:
                foff = (a * agg_delta) >> (recv_dim + 1)
                post_recv = send_dim == 0 and ((foff % post_freq == post_freq - 1)
                                               or ((((foff + 1) * 2) + 1) << recv_dim) >= nranks)
            if x < nranks and send_dim == 0 and skip:
                op = PatOp(-1, recv_dim, x, False, post_recv, nelem, rnd)    # receive at least once
                skip = False
            else:
                op = PatOp(send_dim, recv_dim, x, post_send, post_recv, nelem, rnd)
        elif not skip and phase == 2:
            x = (2 * a + 1) * s["scale"] * agg_delta
            post_send = (a % post_freq == post_freq - 1) or ((2 * (a + 1) + 1) * s["scale"] * agg_delta >= nranks)
            skip = x >= nranks
            send_dim = _first_bit(x, nr2)
            x -= 1 << send_dim
            recv_dim = _first_bit(x, nr2) if x else -1
            op = PatOp(send_dim, recv_dim, x, post_send, False, nelem, rnd)
        if not skip and op is not None:
            ops.append(op)
        s["a"] += 1
        if s["a"] >= s["last_a"] and s["a"] >= parallel:
            p = phase
            if p == 2:
                s["scale"] //= 2
            s["phase"] = (2 if s["scale"] else 1) if p == 2 else ((0 if as_ % 2 == 1 else 1) if p == 1 else 1)
            if p == 0 or (p == 1 and as_ % 2 == 0):
                s["as_"] = next_as()
            if p == 0 and s["as_"] == agg_delta // 2:
                st["offset"] += st["chunk"]
                if st["offset"] >= st["end"]:
                    return ops
                reset()
            else:
                reset_a()


def pat_chunk_bytes(kind_ag: bool, bytes_per_channel_output: float, buffer_bytes: float = N.SIMPLE_BUFFER_BYTES_DEFAULT) -> int:
    """PAT's chunk (``calcCollChunking``): one Simple slot, halved while chunk x 32 (all-gather; 16
    for reduce-scatter) exceeds the channel's share of the output and the chunk is above 64 KiB,
    then aligned down to 512 B."""
    c = int(buffer_bytes // N.NCCL_STEPS)
    mult = 32 if kind_ag else 16
    while c * mult > bytes_per_channel_output and c > 65536:
        c //= 2
    return max(512, c // 512 * 512)


@lru_cache(maxsize=256)
def _messages(nranks: int, chunk: int, size: int):
    """Rank-relative message plan: per op (send dim, message index on it, bytes, post) and the
    message each read waits for."""
    ops = pat_ag_ops(nranks, chunk, size)
    sent: dict[int, int] = {}               # messages posted so far per send dim
    pending: dict[int, int] = {}            # bytes in the message being filled per dim
    where: dict[tuple, int] = {}            # (dim, relative block, round) -> message index
    out = []
    for op in ops:
        send = None
        if op.send_dim >= 0:
            k = sent.get(op.send_dim, 0)
            where[(op.send_dim, op.block, op.rnd)] = k
            pending[op.send_dim] = pending.get(op.send_dim, 0) + op.nelem
            if op.post_send:
                send = (op.send_dim, k, pending.pop(op.send_dim))
                sent[op.send_dim] = k + 1
        wait = None
        if op.recv_dim >= 0:                # the block read came from r + 2^e, where it sat 2^e lower
            e = op.recv_dim
            wait = (e, where[(e, op.block - (1 << e), op.rnd)])
        out.append((send, wait, op.recv_dim if op.post_recv else -1))
    return out


def simulate_pat_allgather(size_bytes: float, n_in: int, n_x: int, bw_in: float, lat_in: float, bw_x: float,
                           lat_x: float, ovh_s: float, channels: int = 1,
                           buffer_bytes: float = N.SIMPLE_BUFFER_BYTES_DEFAULT, base_latency_s: float = 0.0) -> float:
    """Seconds for a PAT all-gather of ``size_bytes`` of output per rank over n_x buildings of
    n_in ranks (one per node, rank order). bw_x is a rank's crossing rate when every rank crosses
    at once (PAT's high dimensions do)."""
    n = n_in * n_x
    if n <= 1 or size_bytes <= 0:
        return 0.0
    per_rank = size_bytes / n / channels                            # one block of one channel
    chunk = pat_chunk_bytes(True, size_bytes / channels)
    size = max(1, int(round(per_rank)))
    plan = _messages(n, min(chunk, size), size)
    W = N.NCCL_STEPS
    ranks = np.arange(n)
    bld = ranks // n_in
    dims = _log2_up(n)
    cross = [bld != bld[(ranks - (1 << d)) % n] for d in range(dims)]      # send r -> r - 2^d
    lat = [np.where(c, lat_x, lat_in) for c in cross]
    rate = [np.where(c, bw_x, bw_in) / channels for c in cross]
    t = np.zeros(n)
    q_in, q_x = np.zeros(n), np.zeros(n)
    arrive: dict[tuple, np.ndarray] = {}           # (dim, k) -> arrival time at each receiver
    freed: dict[tuple, np.ndarray] = {}            # (dim, k) -> credit time back at each sender
    n_freed: dict[int, int] = {}
    for send, wait, free_dim in plan:
        if wait is not None:
            t = np.maximum(t, arrive[wait])
        if send is not None and send[1] >= W:
            t = np.maximum(t, freed[(send[0], send[1] - W)])
        if send is not None:
            d, k, nbytes = send
            c = cross[d]
            ser = nbytes / rate[d]
            dep = np.where(c, np.maximum(q_x, t), np.maximum(q_in, t)) + ovh_s + ser
            q_x, q_in = np.where(c, dep, q_x), np.where(c, q_in, dep)
            arrive[(d, k)] = np.roll(dep + lat[d], -(1 << d))          # receiver r gets it from r + 2^d
        if free_dim >= 0:
            k = n_freed.get(free_dim, 0)
            n_freed[free_dim] = k + 1
            freed[(free_dim, k)] = np.roll(t, 1 << free_dim) + lat[free_dim]   # sender r + 2^d hears
    return base_latency_s + float(t.max())

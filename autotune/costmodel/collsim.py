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

"""What NCCL does on a connection, as numbers: slots, buffers, chunks, protocols, per-step
latencies, and its own (distance-blind) tuner.

Every value is read from NCCL 2.30.7 (github.com/NVIDIA/nccl, commit 5067397c26):
- ``src/include/device.h``: NCCL_STEPS = 8 slots per connection and channel; MAXCHANNELS = 64;
  LL lines carry 8 data bytes in 16 (50%), LL128 lines 120 in 128.
- ``src/init.cc``: buffers per connection and channel: Simple 4 MiB (NCCL_BUFFSIZE), LL
  512 KiB, LL128 4,915,200 B; P2P_NET_CHUNKSIZE = 128 KiB.
- ``src/include/collectives.h``: ring all-reduce / all-gather / reduce-scatter use
  CHUNKSTEPS = NCCL_STEPS/2 = 4 slots per ring step and SLICESTEPS = NCCL_STEPS/4 = 2 slots per
  slice; ``src/enqueue.cc`` (calcCollChunking): LL and LL128 and every tree use one slot per
  chunk.
- ``src/transport/net.cc``: at most NCCL_STEPS slots posted per connection
  (``posted < done + maxDepth``): the in-flight window is the whole buffer.
- ``src/graph/tuning.cc``: baseLat and hwLat tables (us), the bandwidth factors per protocol,
  ``time = lat * latCount + bytes / bw``; the network plugin reports latency 0, so the tuner
  never sees distance.
- ``src/graph/paths.cc``: P2P channels per network peer = max(NICs, bw / 14 GB/s), a power of 2.

Protocol codes are ``specs.codes.Protocol``: auto, simple, ll128, ll.
"""
from __future__ import annotations

from ..specs.codes import Protocol

PROTO_AUTO, PROTO_SIMPLE, PROTO_LL128, PROTO_LL = Protocol.codes()   # codes: specs/codes.py

NCCL_STEPS = 8
"""Slots per connection and channel (device.h)."""
MAX_CHANNELS = 64
"""MAXCHANNELS (device.h): the most channels a communicator can open."""

SIMPLE_BUFFER_BYTES_DEFAULT = 4 * 2**20
"""NCCL_BUFFSIZE default (init.cc DEFAULT_BUFFSIZE)."""
LL_BUFFER_BYTES = 8 * 512 * NCCL_STEPS * 16
"""DEFAULT_LL_BUFFSIZE = LINES_PER_THREAD x LL_MAX_NTHREADS x NCCL_STEPS x 16 B = 512 KiB."""
LL128_BUFFER_BYTES = 120 * 640 * NCCL_STEPS * 8
"""DEFAULT_LL128_BUFFSIZE = 120 x 640 x NCCL_STEPS x 8 B = 4,915,200 B."""

PAYLOAD_FRACTION = {PROTO_SIMPLE: 1.0, PROTO_LL128: 120.0 / 128.0, PROTO_LL: 0.5}
"""Data bytes per wire byte: LL sends 8 data bytes with 8 flag bytes, LL128 120 of 128."""

RING_SLOTS_PER_STEP = {PROTO_SIMPLE: 4, PROTO_LL128: 1, PROTO_LL: 1}
"""Slots one ring step (chunk) occupies: CHUNKSTEPS for Simple, 1 for LL / LL128."""
RING_SLOTS_PER_SLICE = {PROTO_SIMPLE: 2, PROTO_LL128: 1, PROTO_LL: 1}
"""Slots per slice, the unit a receiver forwards before the rest of the chunk arrives."""

P2P_NET_CHUNK_BYTES = 128 * 2**10
"""Send/recv chunk over the network (init.cc P2P_NET_CHUNKSIZE); NCCL_STEPS of them in flight."""
P2P_PER_CHANNEL_NET_Bps = 14e9
"""NCCL_P2P_PER_CHANNEL_NET_BW (paths.cc): one P2P channel per 14 GB/s of NIC bandwidth."""

# tuning.cc, ring rows (us): baseLat per collective call, hwLat per step on NVLink and on the network
RING_BASE_LATENCY_s = {PROTO_LL: 6.6e-6, PROTO_LL128: 14.0e-6, PROTO_SIMPLE: 8.4e-6}
RING_NET_STEP_LATENCY_s = {PROTO_LL: 2.7e-6, PROTO_LL128: 4.0e-6, PROTO_SIMPLE: 14.0e-6}
RING_NVLINK_STEP_LATENCY_s = {PROTO_LL: 0.6e-6, PROTO_LL128: 1.9e-6, PROTO_SIMPLE: 3.4e-6}
TREE_BASE_LATENCY_s = {PROTO_LL: 6.8e-6, PROTO_LL128: 14.0e-6, PROTO_SIMPLE: 8.4e-6}
TREE_NET_STEP_LATENCY_s = {PROTO_LL: 5.0e-6, PROTO_LL128: 8.5e-6, PROTO_SIMPLE: 14.0e-6}

# tuning.cc, PAT (all-gather / reduce-scatter, Simple only, one GPU per node): baseLat 8.0 us,
# latency log2i(nNodes) x interLat / 3.5 + nRanks x 2.8 us with interLat = hwLat[NET][TREE][SIMPLE],
# bandwidth 0.75 x the bus bandwidth and no (n-1)/n factor
PAT_BASE_LATENCY_s = 8.0e-6
PAT_PER_LOG2_RANK_LATENCY_s = 14.0e-6 / 3.5
PAT_PER_RANK_LATENCY_s = 2.8e-6
PAT_BW_FACTOR = 0.75

# tuning.cc bandwidth factors: the share of the per-channel bus bandwidth a protocol realises
RING_BW_FACTOR = {PROTO_SIMPLE: 1.0, PROTO_LL128: 0.92, PROTO_LL: 0.5}
TREE_BW_FACTOR = {PROTO_SIMPLE: 0.92, PROTO_LL128: 0.92 * 120.0 / 128.0, PROTO_LL: 0.92 / 3.8}

NET_STEP_OVERHEAD_s = {PROTO_SIMPLE: 14.0e-6 - 5.0e-6, PROTO_LL128: 4.0e-6 - 2.0e-6, PROTO_LL: 2.7e-6 - 2.0e-6}
"""Per-step software cost on a network hop beyond the wire: NCCL's ring hwLat NET (tuning.cc:
14 / 4.0 / 2.7 us) less the ~5 us (Simple: proxy, flush and RDMA write completion) or ~2 us
(LL, LL128: the NIC and one switch) that a tier's own ``latency_s`` already charges (derived)."""

DEFAULT_CHANNELS = 4
"""Channels of a data-parallel communicator with one rank per node and one NIC per GPU: the ring
search finds one or two rings per NIC and NCCL doubles them (connect.cc); 4 is the usual count
on H100 nodes with 8 x 400G NICs (assumed; NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS set it)."""


def in_flight_slices(proto: int) -> int:
    """Slices a sender may have un-acknowledged on one ring connection: the window of NCCL_STEPS
    slots in slices (Simple 8 / 2 = 4, i.e. 2 ring steps; LL and LL128 8)."""
    return NCCL_STEPS // RING_SLOTS_PER_SLICE[proto]


def slot_data_bytes(proto: int, simple_buffer_bytes: float = SIMPLE_BUFFER_BYTES_DEFAULT) -> float:
    """Payload bytes one slot carries."""
    if proto == PROTO_SIMPLE:
        return simple_buffer_bytes / NCCL_STEPS
    if proto == PROTO_LL128:
        return LL128_BUFFER_BYTES / NCCL_STEPS * PAYLOAD_FRACTION[PROTO_LL128]
    return LL_BUFFER_BYTES / NCCL_STEPS * PAYLOAD_FRACTION[PROTO_LL]


def ring_chunk_data_bytes(proto: int, simple_buffer_bytes: float = SIMPLE_BUFFER_BYTES_DEFAULT) -> float:
    """Payload of one ring step per channel: 2 MiB (Simple, default buffer), 576,000 B (LL128),
    32 KiB (LL) (enqueue.cc calcCollChunking)."""
    return slot_data_bytes(proto, simple_buffer_bytes) * RING_SLOTS_PER_STEP[proto]


def p2p_channels(nic_Bps: float) -> int:
    """Channels NCCL opens per network peer for send/recv: a power of two >= nic / 14 GB/s."""
    need = max(1, -(-int(nic_Bps) // int(P2P_PER_CHANNEL_NET_Bps)))
    c = 1
    while c < need:
        c *= 2
    return c

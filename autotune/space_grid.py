"""The search space's knob grids and sizes: which knobs form the transport grid, the named grids
(``--space``), and the memory limits the legal core is built within."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .specs import Scenario

TRANSPORT = ("xb_load_balancing", "xb_queue_pairs", "xb_loss_recovery", "collective", "nccl_protocol",
             "nccl_channels", "nccl_buffer_mib", "dp_bucket_mib")
"""Knobs of the transport grid: crossed with every legal core row (they never make a row illegal
except through the per-knob rules below)."""
CHUNK_ROWS = 1 << 22
"""Candidate rows (degrees x core knobs) masked at a time while the legal core is built."""
BYTES_PER_CORE_ROW = 104
"""Bytes one legal core row takes: 20 fields, int64 numbers and int8 codes (measured)."""
MAX_LEGAL_CORE_BYTES = 6 * 2**30
"""Most memory the legal core rows may take (6 GiB: a quarter of a 24 GiB machine); the
exhaustive search adds evaluation chunks of a fixed size on top."""

SPACE_PRESETS = {
    "default": {},
    "full": {"protocols": ("auto", "simple", "ll128", "ll"), "channels": (2, 4, 8, 16, 32),
             "buffers_mib": (1, 4, 16), "buckets_mib": (0, 25, 100)},
}
"""Named knob grids for ``SearchSpace(scenario, **SPACE_PRESETS[name])``. ``full`` opens every
transport knob the search tunes: all four NCCL protocols, 2-32 channels, 1-16 MiB buffers and
three DP bucket sizes (the framework default, 25 MiB as PyTorch DDP, 100 MiB), 45x the default
grid (Maverick x metro-2bldg: 8.05 billion legal configurations)."""


def mixed_speeds(scenario: Scenario) -> bool:
    """Do the cluster's buildings differ in GPU compute or memory speed (``hetero_split`` applies)?"""
    return len({(b.gpu.peak_flops_bf16, b.gpu.peak_flops(scenario.precision), b.gpu.hbm_bandwidth_Bps)
                for b in scenario.cluster.buildings}) > 1


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]

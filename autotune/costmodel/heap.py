"""Heap settings for the array hot path (a speed matter only; results are bit-identical).

``evaluate_batch`` makes a few hundred temporary arrays of ``CHUNK_ROWS`` rows (128-256 KiB each)
per chunk. Under glibc's defaults those sizes sit at the mmap threshold and, once freed, above
the trim threshold (twice the mmap threshold after glibc raises it dynamically): freed memory at
the heap's top goes back to the kernel and every new temporary page-faults it in again. Measured
on the bench space (llama3-405b x campus-5bldg, 262,144 rows, best of 5, one 2-core VM, same
minute): 16,384-row chunks 890-920k configurations/s with glibc's defaults, 1.05-1.10M with
these settings; 32,768-row chunks 810-820k against 1.10-1.16M. Peak resident memory unchanged
(238 MiB either way), because the freed temporaries are reused instead of returned.

``tune_heap`` raises both thresholds once per process with glibc's ``mallopt`` (the settings
``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` give from the environment). It is
process-wide and keeps freed memory: after one 262,144-row batch is freed, the process stays at
about 180 MiB resident against 110 MiB with glibc's defaults, and up to the trim threshold
(256 MiB) can stay so in each process that evaluates batches (exact-search workers, a study).
A program that embeds autotune and wants glibc's defaults sets ``AUTOTUNE_HEAP=default``;
``evaluate_batch`` then uses the smaller chunks that suit them. Elsewhere than glibc (musl,
macOS, Windows) it does nothing and says so in its return value (``autotune bench`` reports
it); under a preloaded allocator (jemalloc, tcmalloc) glibc's ``mallopt`` is called but has
nothing to tune.
"""
from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD = -1
"""glibc's ``mallopt`` parameter number for the trim threshold (malloc.h)."""
M_MMAP_THRESHOLD = -3
"""glibc's ``mallopt`` parameter number for the mmap threshold (malloc.h)."""
MMAP_THRESHOLD_BYTES = 32 << 20
"""Allocations below this come from the heap, not a fresh mmap: glibc's own ceiling for its
dynamic threshold on 64-bit hosts (DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB)."""
TRIM_THRESHOLD_BYTES = 256 << 20
"""Free memory at the heap's top kept for reuse before it goes back to the kernel."""
ENV_SWITCH = "AUTOTUNE_HEAP"
"""Environment variable: ``default`` leaves glibc's settings alone; ``tuned`` or unset applies them."""
ENV_VALUES = ("tuned", "default")

_state: str | None = None


def tune_heap() -> str:
    """Apply the settings once per process; returns ``tuned``, ``default`` (switched off by
    ``AUTOTUNE_HEAP=default``), ``unsupported`` (no glibc ``mallopt``) or ``partial`` (the mmap
    threshold took, the trim threshold did not). Any other ``AUTOTUNE_HEAP`` value is a one-line
    UserInputError."""
    global _state
    if _state is None:
        _state = _apply()
    return _state


def _apply() -> str:
    value = os.environ.get(ENV_SWITCH, "").strip().lower()
    if value not in ("",) + ENV_VALUES:
        from ..errors import UserInputError
        raise UserInputError(ENV_SWITCH, value, " or ".join(ENV_VALUES) + " (or unset)")
    if value == "default":
        return "default"
    try:
        libc = ctypes.CDLL(None)             # TypeError on Windows, OSError where no C library loads
        libc.gnu_get_libc_version            # glibc only: musl and macOS have no such mallopt
        mallopt = libc.mallopt
    except Exception:  # noqa: BLE001 - a speed setting: any failure leaves the defaults, and says so
        return "unsupported"
    if mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) != 1:
        return "unsupported"
    return "tuned" if mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1 else "partial"

"""The row order ``evaluate_batch`` evaluates a batch in: grouped by the categorical knobs the
formulas branch on (a speed matter only; results are returned in the caller's order)."""
from __future__ import annotations

import numpy as np

SORT_KEYS = ("dp_flavour", "collective", "nccl_protocol", "placement", "pp_schedule", "recompute")
"""Categorical knobs most of the model's branches test, most significant first."""
SORT_MIN_ROWS = 2048
"""Smallest batch worth sorting (``_branch_order``)."""
CHUNK_ROWS_DEFAULT_HEAP = 16384
"""Rows per internal chunk under glibc's own heap settings (``AUTOTUNE_HEAP=default``, other C
libraries): the best there (0.89-0.92M/s against 0.81-0.82M/s at 32,768 rows)."""
CHUNK_ROWS = 32768
"""Rows per internal chunk with ``heap.py``'s settings: each temporary array (256 KiB) stays near the cache, and with the
heap settings of ``heap.py`` freed temporaries are reused instead of page-faulted in again.
Measured on the bench space (llama3-405b x campus-5bldg, 262,144 rows, best of 5, 2026-11-30,
interleaved): with ``heap.py``'s settings 16,384 rows 1.07-1.10M/s, 24,576 1.13-1.21M/s,
32,768 1.17-1.26M/s, 49,152 1.18-1.22M/s; with glibc's defaults 16,384 rows 0.89-0.92M/s and
32,768 0.81-0.82M/s (the earlier choice, 16,384, was tuned under glibc's defaults: 4,096 rows
526k/s, 65,536 668k/s then)."""


def _branch_order(rows: dict):
    """A row order that groups rows by the categorical knobs the formulas branch on. Every
    ``where`` then meets long runs of one outcome instead of a random mask, which numpy runs
    several times faster (branch prediction); the rows are put back in their order afterwards.
    None where a column is not a small whole-number code."""
    key = np.zeros(len(rows["tp"]), dtype=np.int64)
    span = 1
    for name in SORT_KEYS:
        col = rows.get(name)
        if col is None or np.asarray(col).dtype.kind not in "iu":
            return None
        width = int(col.max()) + 1 if len(col) else 1
        span *= width
        if span >= 1 << 15 or col.min() < 0:
            return None
        key = key * width + col
    return np.argsort(key.astype(np.int16), kind="stable")    # radix sort: linear in the rows


def chunk_rows() -> int:
    """Rows per chunk under this process's heap settings (applied here once, ``heap.py``)."""
    from .heap import tune_heap
    return CHUNK_ROWS if tune_heap() == "tuned" else CHUNK_ROWS_DEFAULT_HEAP


def put_back(out: dict, outputs: dict, sl: slice, order, n: int) -> None:
    """Write one chunk's ``outputs``, computed in ``order`` (None: the caller's order), into slice
    ``sl`` of ``out``'s ``n``-row arrays (made on first use), in the caller's order."""
    back = None
    if order is not None:
        back = np.empty_like(order)
        back[order] = np.arange(len(order))
    for k, v in outputs.items():
        if k not in out:
            out[k] = np.empty(n, dtype=v.dtype)
        if back is None or v.dtype != out[k].dtype:
            out[k][sl] = v if back is None else v[back]
        else:
            np.take(v, back, out=out[k][sl], mode="clip")      # "clip": no buffer (back is a permutation)

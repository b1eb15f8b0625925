"""NCCL's own tuner, as the model reads it (tuning.cc): its time estimates per algorithm and
protocol, and the choice it makes by the smallest of them. ``collectives`` prices what NCCL then
runs; this module only says what it picks."""
from __future__ import annotations

import numpy as np

from . import nccl as N
from .xp import NUMPY

KIND_AR, KIND_AG = 2, 1          # steps per member: all-reduce 2(n-1), all-gather / reduce-scatter n-1


_TABLES: dict[int, "np.ndarray"] = {}


def _by_proto(proto, table: dict, xp):
    """Per-row protocol constant from a {code: value} table (Simple, LL128, LL): one gather."""
    arr = _TABLES.get(id(table))
    if arr is None:
        arr = np.array([float(table[N.PROTO_SIMPLE])] + [float(table[c]) for c in (1, 2, 3)])
        _TABLES[id(table)] = arr
    return xp.take_table(arr, proto)


def nccl_estimate(kind, algo_tree: bool, size_bytes, n, bw, proto, xp=NUMPY):
    """NCCL's own time estimate (tuning.cc): base + steps x hwLat(NET) + S / (bw x factor), with
    no propagation delay (the network plugin reports latency 0)."""
    if algo_tree:
        lat = _by_proto(proto, N.TREE_BASE_LATENCY_s, xp) + 2.0 * xp.ceil(xp.log2(xp.maximum(n, 2.0))) \
            * _by_proto(proto, N.TREE_NET_STEP_LATENCY_s, xp)
        return lat + 2.0 * size_bytes / (bw * _by_proto(proto, N.TREE_BW_FACTOR, xp))
    steps = kind * (n - 1.0)
    lat = _by_proto(proto, N.RING_BASE_LATENCY_s, xp) + steps * _by_proto(proto, N.RING_NET_STEP_LATENCY_s, xp)
    return lat + steps / n * size_bytes / (bw * _by_proto(proto, N.RING_BW_FACTOR, xp))


def pat_estimate(size_bytes, n, bw, xp=NUMPY):
    """NCCL's own estimate for PAT (tuning.cc): base + log2i(n) x interLat / 3.5 + n x 2.8 us,
    plus S / (0.75 bw); distance-blind like the others."""
    lat = N.PAT_BASE_LATENCY_s + xp.floor(xp.log2(xp.maximum(n, 1.0))) * N.PAT_PER_LOG2_RANK_LATENCY_s \
        + n * N.PAT_PER_RANK_LATENCY_s
    return lat + size_bytes / (bw * N.PAT_BW_FACTOR)


def nccl_choice(kind, size_bytes, n, bw, allow_ll128=True, xp=NUMPY, pat_ok=False):
    """What NCCL's tuner picks, by the smallest of its own estimates: (tree or PAT preferred,
    best protocol for the tree, best protocol for the ring). Tree is a candidate for all-reduce
    only; PAT (Simple) for all-gather / reduce-scatter where the communicator has one rank per
    node (``pat_ok``); LL128 only where the hardware runs it. ``kind`` may differ per row."""
    protos = (N.PROTO_SIMPLE, N.PROTO_LL128, N.PROTO_LL) if allow_ll128 else (N.PROTO_SIMPLE, N.PROTO_LL)

    def best(tree):
        bt = bp = None
        for p in protos:
            t = nccl_estimate(kind, tree, size_bytes, n, bw, p, xp)
            if bt is None:
                bt, bp = t, xp.full_like(t, float(p))
            else:
                better = t < bt
                bt, bp = xp.where(better, t, bt), xp.where(better, float(p), bp)
        return bt, bp
    ring_t, ring_p = best(False)
    simple = xp.full_like(ring_t, float(N.PROTO_SIMPLE))
    if _all(kind, KIND_AG):
        return (pat_ok > 0.5) & (pat_estimate(size_bytes, n, bw, xp) < ring_t), simple, ring_p
    tree_t, tree_p = best(True)
    if _all(kind, KIND_AR):
        return tree_t < ring_t, tree_p, ring_p
    use_pat = (pat_ok > 0.5) & (pat_estimate(size_bytes, n, bw, xp) < ring_t)
    is_ar = kind == KIND_AR
    return xp.where(is_ar, tree_t < ring_t, use_pat), xp.where(is_ar, tree_p, simple), ring_p


def _all(kind, value) -> bool:
    """Every row's kind is ``value`` (a number, or an array of one value)."""
    if isinstance(kind, np.ndarray):
        return bool((kind == value).all())
    return kind == value

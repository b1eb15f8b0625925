"""Alpha-beta costs of collectives over a group of n_in members inside a building times n_x
buildings. Pure vectorised functions.

``f`` is the volume factor: 2 for all-reduce (reduce-scatter + all-gather), 1 for all-gather or
reduce-scatter. Ring all-reduce over n: 2 (n-1)/n S / beta + 2 (n-1) alpha (Thakur et al. 2005).
"""
from __future__ import annotations

import numpy as np

COLL_RING, COLL_TREE, COLL_HIER, COLL_HD = 0, 1, 2, 3


def _log2ceil(n):
    return np.ceil(np.log2(np.maximum(n, 1.0)))


def _not_pow2(n):
    n = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    return (np.exp2(np.round(np.log2(n))) != n).astype(np.float64)


def collective_time(algo, f, size_bytes, n_in, n_x, bw_in, alpha_in, bw_x_ring, bw_x_all, alpha_x):
    """Time of one collective and the bytes each GPU sends across buildings.

    - ring: one ring through all n members; every step waits for its slowest hop, so a ring
      spanning buildings pays alpha_x per step and runs at min(bw_in, bw_x_ring) where
      bw_x_ring is the share of one crossing flow per group.
    - tree (all-reduce only; NCCL double binary tree): ~2 S / beta, 2 log2(n) alpha.
      For all-gather / reduce-scatter (f=1) NCCL has no tree: falls back to ring.
    - hierarchical: reduce-scatter inside (n_in), all-reduce across buildings on S/n_in with every
      GPU crossing at once (bw_x_all), all-gather inside: only a shard crosses.
    - halving-doubling (Rabenseifner; nearest partners first): hierarchical bytes,
      log2(n) alpha steps; a non-power-of-two group pays one extra full exchange.
    Returns (time_s, xb_bytes_per_gpu).
    """
    algo = np.asarray(algo)
    n_in = np.asarray(n_in, dtype=np.float64)
    n_x = np.asarray(n_x, dtype=np.float64)
    n = n_in * n_x
    S = np.asarray(size_bytes, dtype=np.float64)
    spans = n_x > 1
    bw_min = np.where(spans, np.minimum(bw_in, bw_x_ring), bw_in)
    a_max = np.where(spans, alpha_x, alpha_in)
    frac_n = (n - 1.0) / n
    t_ring = f * frac_n * S / bw_min + f * (n - 1.0) * a_max
    xb_ring = np.where(spans, f * frac_n * S / n_in, 0.0)

    is_tree = (algo == COLL_TREE) & (f == 2)
    t_tree = 2.0 * S / bw_min + 2.0 * _log2ceil(n) * a_max

    frac_in = (n_in - 1.0) / n_in
    frac_x = (n_x - 1.0) / n_x
    shard = S / n_in
    t_hier = (f * frac_in * S / bw_in + f * (n_in - 1.0) * alpha_in
              + np.where(spans, f * frac_x * shard / bw_x_all + f * (n_x - 1.0) * alpha_x, 0.0))
    xb_hier = np.where(spans, f * frac_x * shard, 0.0)
    t_hd = (f * frac_in * S / bw_in + f * _log2ceil(n_in) * alpha_in
            + np.where(spans, f * frac_x * shard / bw_x_all + f * _log2ceil(n_x) * alpha_x, 0.0)
            + _not_pow2(n_in) * S / bw_in
            + np.where(spans, _not_pow2(n_x) * shard / bw_x_all, 0.0))

    t = np.where(algo == COLL_HIER, t_hier,
                 np.where(algo == COLL_HD, t_hd, np.where(is_tree, t_tree, t_ring)))
    xb = np.where((algo == COLL_HIER) | (algo == COLL_HD), xb_hier,
                  np.where(is_tree, np.where(spans, f * S / n_in, 0.0), xb_ring))
    single = n <= 1.0
    return np.where(single, 0.0, t), np.where(single, 0.0, xb)


def all_to_all_time(size_bytes, n, bw, alpha):
    """All-to-all of ``size_bytes`` per GPU among n: (n-1)/n of it leaves the GPU, pairwise
    exchanges run concurrently: (n-1)/n S / beta + alpha (latency of the last exchange)."""
    n = np.asarray(n, dtype=np.float64)
    t = (n - 1.0) / n * size_bytes / bw + alpha
    return np.where(n <= 1.0, 0.0, t)

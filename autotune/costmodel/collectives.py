"""Alpha-beta costs of collectives over a group of n_in members inside a building times n_x
buildings. Pure vectorised functions.

Every algorithm's time is linear in the message size S: t = S * A + Lat, and so are the bytes it
sends across buildings: xb = S * X. ``group_coefficients`` computes (A, Lat, X) once per group
for all-reduce (f=2) and for all-gather / reduce-scatter (f=1); a collective is then two
multiply-adds per configuration.

Per algorithm (f = 2 all-reduce, 1 all-gather / reduce-scatter):
- ring (Thakur et al. 2005): f (n-1)/n S / beta + f (n-1) alpha. Spanning buildings, every step
  waits for its slowest hop: beta = min(bw_in, bw_x_ring) (one crossing flow per group) and
  alpha = alpha_x.
- tree (all-reduce only; NCCL double binary tree): 2 S / beta + 2 log2(n) alpha. NCCL has no
  tree all-gather / reduce-scatter: those fall back to ring.
- hierarchical: reduce-scatter inside (n_in), all-reduce across buildings on S / n_in with every
  GPU crossing at once (bw_x_all), all-gather inside: only a shard crosses.
- halving-doubling (Rabenseifner; nearest partners first): hierarchical bytes with log2(n)
  alpha steps; a non-power-of-two group pays one extra full exchange per level.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .xp import NUMPY

COLL_RING, COLL_TREE, COLL_HIER, COLL_HD = 0, 1, 2, 3


def _log2ceil(n, xp):
    return xp.ceil(xp.log2(xp.maximum(n, 1.0)))


def _not_pow2(n, xp):
    n = xp.maximum(n, 1.0)
    return xp.where(xp.exp2(xp.round(xp.log2(n))) != n, 1.0, 0.0)


@dataclass
class GroupCoefficients:
    """t = S * a + lat and xb_bytes_per_gpu = S * x, for f=1 and f=2 (arrays)."""
    a1: np.ndarray
    lat1: np.ndarray
    x1: np.ndarray
    a2: np.ndarray
    lat2: np.ndarray
    x2: np.ndarray

    def time(self, f: int, size_bytes):
        return size_bytes * self.a1 + self.lat1 if f == 1 else size_bytes * self.a2 + self.lat2

    def xb_bytes(self, f: int, size_bytes):
        return size_bytes * (self.x1 if f == 1 else self.x2)


def group_coefficients(algo, n_in, n_x, bw_in, alpha_in, bw_x_ring, bw_x_all, alpha_x, xp=NUMPY) -> GroupCoefficients:
    n = n_in * n_x
    live = n > 1.0
    spans = xp.where(n_x > 1.0, 1.0, 0.0)
    bw_min = xp.where(spans > 0, xp.minimum(bw_in, bw_x_ring), bw_in)
    a_max = xp.where(spans > 0, alpha_x, alpha_in)
    frac_n = (n - 1.0) / n
    frac_in = (n_in - 1.0) / n_in
    frac_x = (n_x - 1.0) / n_x
    shard_x = spans * frac_x / (n_in * bw_x_all)          # seconds per byte of S, cross part
    is_ring, is_tree = algo == COLL_RING, algo == COLL_TREE
    is_hier = algo == COLL_HIER
    ring_a, ring_lat = frac_n / bw_min, (n - 1.0) * a_max
    hier_a = frac_in / bw_in + shard_x
    hier_lat = (n_in - 1.0) * alpha_in + spans * (n_x - 1.0) * alpha_x
    hd_lat = _log2ceil(n_in, xp) * alpha_in + spans * _log2ceil(n_x, xp) * alpha_x
    hd_extra = _not_pow2(n_in, xp) / bw_in + spans * _not_pow2(n_x, xp) / (n_in * bw_x_all)
    ring_x = spans * frac_n / n_in
    hier_x = spans * frac_x / n_in
    flat = (algo == COLL_RING) | (algo == COLL_TREE)                              # f=1 tree falls back to ring
    a1 = xp.where(flat, ring_a, xp.where(is_hier, hier_a, hier_a + hd_extra))
    lat1 = xp.where(flat, ring_lat, xp.where(is_hier, hier_lat, hd_lat))
    x1 = xp.where(flat, ring_x, hier_x)
    a2 = xp.where(is_ring, 2 * ring_a, xp.where(is_tree, 2.0 / bw_min, xp.where(is_hier, 2 * hier_a, 2 * hier_a + hd_extra)))
    lat2 = xp.where(is_ring, 2 * ring_lat, xp.where(is_tree, 2.0 * _log2ceil(n, xp) * a_max, 2 * xp.where(is_hier, hier_lat, hd_lat)))
    x2 = xp.where(is_ring, 2 * ring_x, xp.where(is_tree, spans / n_in, 2 * hier_x))
    # a group of one does nothing; every term above is already 0 at n = 1 except the tree's S/beta
    a2 = xp.where(live, a2, 0.0)
    return GroupCoefficients(a1, lat1, x1, a2, lat2, x2)


def all_to_all_time(size_bytes, n, bw, alpha, xp=NUMPY):
    """All-to-all of ``size_bytes`` per GPU among n: (n-1)/n of it leaves the GPU, pairwise
    exchanges run concurrently: (n-1)/n S / beta + alpha (latency of the last exchange)."""
    t = (n - 1.0) / n * size_bytes / bw + alpha
    return xp.where(n <= 1.0, 0.0, t)

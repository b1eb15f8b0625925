"""Network-layer physics of one tier: load balancing over equal paths and loss recovery.

Pure functions over numpy arrays (or scalars); no I/O, no validation.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.stats import poisson

from .constants import (PACKET_SPRAY_EFFICIENCY, PACKET_SPRAY_REORDER_PROB, RTO_MIN_s,
                        SR_TAIL_TIMEOUT_FRACTION)

LB_ECMP, LB_QP_SPRAY, LB_PACKET_SPRAY = 0, 1, 2
LR_GBN, LR_SR = 0, 1

_EMAX_CACHE: dict[tuple[int, int], float] = {}


def _expected_max_occupancy_scalar(balls: int, bins: int) -> float:
    """E[max bin load] of ``balls`` flows hashed uniformly onto ``bins`` paths.

    Poissonisation (Mitzenmacher & Upfal, Probability and Computing, sec. 5.4): bin loads are
    ~ iid Poisson(lambda = balls/bins), so P(max < k) = F(k-1)^bins and
    E[max] = sum_{k>=1} 1 - F(k-1)^bins. Exact enough at these sizes; floored at ceil(lambda).
    """
    if balls <= 0:
        return 0.0
    if bins <= 1:
        return float(balls)
    lam = balls / bins
    if lam > 2000:  # Gaussian tail: lambda + sqrt(2 lambda ln bins)
        return lam + math.sqrt(2 * lam * math.log(bins))
    kmax = int(lam + 12 * math.sqrt(lam) + 30)
    k = np.arange(1, kmax + 1)
    cdf = poisson.cdf(k - 1, lam)
    e = float(np.sum(1.0 - cdf ** bins))
    return max(e, math.ceil(lam), 1.0)


def expected_max_occupancy(balls, bins: int) -> np.ndarray:
    """Vectorised over ``balls`` (few distinct values in practice; memoised per value)."""
    balls = np.asarray(balls, dtype=np.int64)
    uniq, inv = np.unique(balls, return_inverse=True)
    vals = np.empty(len(uniq))
    for i, b in enumerate(uniq.tolist()):
        key = (b, bins)
        v = _EMAX_CACHE.get(key)
        if v is None:
            v = _EMAX_CACHE[key] = _expected_max_occupancy_scalar(b, bins)
        vals[i] = v
    return vals[inv].reshape(balls.shape)


def per_flow_rate_Bps(lb, queue_pairs, flows, uplink_Bps, nic_Bps, n_paths: int):
    """Rate of the slowest of ``flows`` concurrent connections through a tier of ``n_paths``
    equal paths sharing ``uplink_Bps``.

    - ECMP: each connection is split over ``q`` queue pairs, each hashed to a path; a path of
      capacity uplink/P is shared by its k flows, so the connection finishes at the pace of its
      most loaded sub-flow: rate = min(nic, q * uplink / (P * E[max k])), E[max k] for F*q balls
      in P bins. Few elephant flows -> poor (COST_MODEL.md: eff = F / (P E[max])).
    - QP spraying (NCCLX dqplb): the host moves bytes to its least-loaded QP: power-of-q-choices
      balancing, E[max] ~ F q / P + ln ln P / ln q (Azar et al. 1999).
    - Packet spraying / adaptive routing: near-perfect balance at PACKET_SPRAY_EFFICIENCY.
    """
    lb = np.asarray(lb)
    q = np.asarray(queue_pairs, dtype=np.float64)
    flows = np.asarray(flows, dtype=np.float64)
    balls = np.maximum(flows * q, 1.0)
    fair = uplink_Bps / np.maximum(flows, 1.0)
    emax_ecmp = expected_max_occupancy(np.rint(balls).astype(np.int64), n_paths)
    lam = balls / n_paths
    lnln = math.log(max(math.log(max(n_paths, 2)), 1e-9)) if n_paths > 2 else 0.0
    emax_spray = np.maximum(np.ceil(lam), lam + np.maximum(lnln, 0.0) / np.log(np.maximum(q, 2.0)))
    emax_spray = np.minimum(emax_spray, emax_ecmp)
    emax = np.where(lb == LB_QP_SPRAY, np.where(q >= 2, emax_spray, emax_ecmp), emax_ecmp)
    hashed = q * uplink_Bps / (n_paths * emax)
    rate = np.where(lb == LB_PACKET_SPRAY, fair * PACKET_SPRAY_EFFICIENCY, np.minimum(hashed, fair))
    return np.minimum(rate, nic_Bps)


def loss_efficiency(loss_recovery, lb, rate_Bps, rtt_s: float, loss_rate: float, mtu_bytes: int):
    """Goodput fraction under packet loss (and reordering from packet spraying).

    Go-back-N resends the window in flight per loss: W = rate * RTT / MTU packets, so
    eff = 1 / (1 + p W) (COST_MODEL.md). Packet spraying reorders packets; go-back-N treats a
    reordered packet like a loss (PACKET_SPRAY_REORDER_PROB). Selective repeat resends only the
    lost packet, plus a timeout for the tail-loss fraction: eff = 1 / (1 + p (1 + f_to * W_rto)).
    """
    rate = np.asarray(rate_Bps, dtype=np.float64)
    window_pkts = np.maximum(rate * rtt_s / mtu_bytes, 1.0)
    p_gbn = loss_rate + np.where(np.asarray(lb) == LB_PACKET_SPRAY, PACKET_SPRAY_REORDER_PROB, 0.0)
    eff_gbn = 1.0 / (1.0 + p_gbn * window_pkts)
    rto_s = 4.0 * rtt_s + RTO_MIN_s
    eff_sr = 1.0 / (1.0 + loss_rate * (1.0 + SR_TAIL_TIMEOUT_FRACTION * rate * rto_s / mtu_bytes))
    return np.where(np.asarray(loss_recovery) == LR_SR, eff_sr, eff_gbn)


def effective_bandwidth_Bps(lb, queue_pairs, loss_recovery, flows, uplink_Bps, nic_Bps,
                            n_paths: int, rtt_s: float, loss_rate: float, mtu_bytes: int,
                            network_efficiency: float):
    """Goodput per connection across a tier: load balancing x loss recovery x NCCL efficiency."""
    rate = per_flow_rate_Bps(lb, queue_pairs, flows, uplink_Bps, nic_Bps, n_paths)
    return rate * loss_efficiency(loss_recovery, lb, rate, rtt_s, loss_rate, mtu_bytes) * network_efficiency

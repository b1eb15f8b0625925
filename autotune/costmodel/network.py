"""Network-layer physics of one tier: load balancing over equal paths and loss recovery.

Pure functions over numpy arrays (or scalars); no I/O, no validation.
"""
from __future__ import annotations

from ..specs.codes import LoadBalancing, LossRecovery
import math

import numpy as np

from .xp import NUMPY

from .constants import (PACKET_SPRAY_EFFICIENCY, PACKET_SPRAY_REORDER_PROB, RTO_MIN_s,
                        SR_TAIL_TIMEOUT_FRACTION)

LB_ECMP, LB_QP_SPRAY, LB_PACKET_SPRAY = LoadBalancing.codes()   # codes: specs/codes.py
LR_GBN, LR_SR = LossRecovery.codes()   # codes: specs/codes.py

def poisson_cdf(kmax: int, lam: float) -> np.ndarray:
    """P(X <= k) for k = 0..kmax, X ~ Poisson(lam): the cumulative sum of the pmf
    exp(-lam + k ln lam - ln k!) (log space, so no term under- or overflows before it is summed).
    Written out to keep scipy out of the start-up path; matches scipy.special.pdtr to ~1e-13
    (tests/test_costmodel.py)."""
    k = np.arange(kmax + 1, dtype=np.float64)
    log_fact = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, kmax + 1, dtype=np.float64)))))
    return np.minimum(np.cumsum(np.exp(-lam + k * math.log(lam) - log_fact)), 1.0)


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
    cdf = poisson_cdf(kmax - 1, lam)
    e = float(np.sum(1.0 - cdf ** bins))
    return max(e, math.ceil(lam), 1.0)


EXACT_TABLE_BALLS = 1024
_EMAX_TABLES: dict[int, np.ndarray] = {}


def _emax_table(bins: int) -> np.ndarray:
    table = _EMAX_TABLES.get(bins)
    if table is None:
        table = np.array([_expected_max_occupancy_scalar(b, bins) for b in range(EXACT_TABLE_BALLS + 1)])
        _EMAX_TABLES[bins] = table
    return table


def expected_max_occupancy(balls, bins: int, xp=NUMPY):
    """Vectorised E[max]: exact (Poissonised) table up to 1,024 flows, Gaussian tail beyond,
    where lambda = balls/bins is large enough for the normal approximation."""
    table = _emax_table(bins)
    small = xp.minimum(xp.round(balls), float(EXACT_TABLE_BALLS))
    lam = balls / bins
    gauss = lam + xp.sqrt(2.0 * lam * math.log(max(bins, 2)))
    return xp.where(balls <= EXACT_TABLE_BALLS, xp.take_table(table, small), gauss)


def per_flow_rate_Bps(lb, queue_pairs, flows, uplink_Bps, nic_Bps, n_paths: int, xp=NUMPY):
    """Rate of the slowest of ``flows`` concurrent connections through a tier of ``n_paths``
    equal paths sharing ``uplink_Bps``.

    - ECMP: each connection is split over ``q`` queue pairs, each hashed to a path; a path of
      capacity uplink/P is shared by its k flows, so the connection finishes at the pace of its
      most loaded sub-flow: rate = min(nic, q * uplink / (P * E[max k])), E[max k] for F*q balls
      in P bins. Few elephant flows -> poor (docs/cost_model.md: eff = F / (P E[max])).
    - QP spraying (NCCLX dqplb): the host moves bytes to its least-loaded QP: power-of-q-choices
      balancing, E[max] ~ F q / P + ln ln P / ln q (Azar et al. 1999), never worse than ECMP.
    - Packet spraying / adaptive routing: near-perfect balance at PACKET_SPRAY_EFFICIENCY.
    """
    q = queue_pairs
    balls = xp.maximum(flows * q, 1.0)
    fair = uplink_Bps / xp.maximum(flows, 1.0)
    emax_ecmp = expected_max_occupancy(balls, n_paths, xp)
    lam = balls / n_paths
    lnln = max(math.log(math.log(n_paths)), 0.0) if n_paths > 2 else 0.0
    emax_spray = xp.minimum(xp.maximum(xp.ceil(lam), lam + lnln / math.log(2.0) / xp.log2(xp.maximum(q, 2.0))), emax_ecmp)
    emax = xp.where((lb == LB_QP_SPRAY) & (q >= 2), emax_spray, emax_ecmp)
    hashed = q * uplink_Bps / (n_paths * emax)
    rate = xp.where(lb == LB_PACKET_SPRAY, fair * PACKET_SPRAY_EFFICIENCY, xp.minimum(hashed, fair))
    return xp.minimum(rate, nic_Bps)


def loss_efficiency(loss_recovery, lb, rate_Bps, rtt_s: float, loss_rate: float, mtu_bytes: int,
                    queue_pairs=1.0, in_flight_cap_bytes=None, rto_s: float | None = None, xp=NUMPY):
    """Goodput fraction under packet loss (and reordering from packet spraying).

    Go-back-N resends what one queue pair has in flight per loss: a connection of q QPs keeps
    W = min(rate x RTT, the library's in-flight cap) / (q MTU) packets on each, so more QPs help it
    (eff = 1 / (1 + p W), docs/cost_model.md, per QP). Packet spraying reorders packets; go-back-N
    treats a reordered packet like a loss (PACKET_SPRAY_REORDER_PROB). Selective repeat resends
    only the lost packet. Both recover a tail loss (no later packet to reveal the gap) only by the
    retransmission timeout ``rto_s`` (the transport's: 4.096 us x 2^NCCL_IB_TIMEOUT, or adaptive
    retransmission's few round trips): eff = 1 / (1 + p (resent + f_to rate_q RTO / MTU)).
    """
    in_flight = rate_Bps * rtt_s
    if in_flight_cap_bytes is not None:
        in_flight = xp.minimum(in_flight, in_flight_cap_bytes)
    window_pkts = xp.maximum(in_flight / (mtu_bytes * queue_pairs), 1.0)
    rto = (4.0 * rtt_s + RTO_MIN_s) if rto_s is None else rto_s
    tail = SR_TAIL_TIMEOUT_FRACTION * rate_Bps / queue_pairs * rto / mtu_bytes
    p_gbn = loss_rate + xp.where(lb == LB_PACKET_SPRAY, PACKET_SPRAY_REORDER_PROB, 0.0)
    eff_gbn = 1.0 / (1.0 + p_gbn * window_pkts + loss_rate * tail)
    eff_sr = 1.0 / (1.0 + loss_rate * (1.0 + tail))
    return xp.where(loss_recovery == LR_SR, eff_sr, eff_gbn)


def recovery_stall(lb, queue_pairs, loss_recovery, rtt_s: float, loss_rate: float, mtu_bytes: int,
                   channels, in_flight_bytes, rto_s: float | None = None, xp=NUMPY):
    """How much longer a window-bound connection's round trip gets under loss: 1 / loss efficiency
    at the window-bound rate (in_flight_bytes per RTT). A go-back-N loss stalls the queue pair's
    window while it is resent, so a flow that the NCCL window (not the link) limits pays the same
    factor on its credit cycle; selective repeat stalls only for tail losses. Independent of the
    link's rate (so a faster link is never slower)."""
    q = queue_pairs * channels
    rate = in_flight_bytes / max(rtt_s, 1e-12)
    return 1.0 / loss_efficiency(loss_recovery, lb, rate, rtt_s, loss_rate, mtu_bytes, q, in_flight_bytes, rto_s, xp)


def effective_bandwidth_Bps(lb, queue_pairs, loss_recovery, flows, uplink_Bps, nic_Bps,
                            n_paths: int, rtt_s: float, loss_rate: float, mtu_bytes: int,
                            network_efficiency: float, channels=1.0, in_flight_cap_bytes=None,
                            rto_s: float | None = None, xp=NUMPY):
    """Goodput per connection across a tier: load balancing x loss recovery x NCCL efficiency.
    A connection of ``channels`` NCCL channels opens ``queue_pairs`` QPs on each: channels x QPs
    sub-flows for ECMP to hash (more entropy) and for go-back-N to share the window."""
    q = queue_pairs * channels
    rate = per_flow_rate_Bps(lb, q, flows, uplink_Bps, nic_Bps, n_paths, xp)
    return rate * loss_efficiency(loss_recovery, lb, rate, rtt_s, loss_rate, mtu_bytes, q,
                                  in_flight_cap_bytes, rto_s, xp) * network_efficiency

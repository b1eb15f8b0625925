"""Which in-building tier a group of GPUs crosses, and at what rate per member: the span of a
group (consecutive GPUs, or members a stride apart) read against a scenario's NVLink node, zone
and tier tables (``ScenarioConsts``)."""
from __future__ import annotations

from .scenario_consts import ScenarioConsts
from .xp import NUMPY, SCALAR


def tier_of_span(k: ScenarioConsts, span, xp=NUMPY):
    """(bandwidth, alpha) of the smallest in-building tier holding a group spanning ``span``
    consecutive GPUs: NVLink within a node, scale-out within a zone, else cross-zone."""
    if xp is SCALAR:
        if span <= k.node:
            return k.nvlink_Bps, k.nvlink_alpha_s
        return (k.so_Bps, k.so_alpha_s) if span <= k.zone else (k.cz_Bps, k.cz_alpha_s)
    # 0 NVLink, 1 scale-out, 2 cross-zone (one gather instead of two selects over random masks);
    # a zone smaller than a node has no scale-out tier
    level = xp.asfloat(span > k.node) + xp.asfloat(span > max(k.node, k.zone))
    return xp.take_table(k.tier_bw_table, level), xp.take_table(k.tier_alpha_table, level)


def members_per_node(k: ScenarioConsts, stride, n, xp=NUMPY):
    """Members of a group of ``n`` ranks ``stride`` GPUs apart that share one node: node / stride,
    at least 1, at most n (rank order: consecutive members ``stride`` apart)."""
    return xp.minimum(xp.maximum(k.node / stride, 1.0), n)


def ring_tier_of_span(k: ScenarioConsts, stride, n_in, xp=NUMPY):
    """(bandwidth, alpha) per member of a ring or tree collective over ``n_in`` members
    ``stride`` GPUs apart inside a building. Above a node, with m = node / stride members per
    node, NCCL's ring leaves each node once per channel and spreads its channels over the node's
    NICs (tuning.cc: busBw = nChannels x bwInter), so the group's crossing runs on m NICs: a
    member's rate is m times one NIC's share, up to NVLink's (nccl-tests' multi-node bus
    bandwidth is about a node's NIC total, not one NIC's). Only one hop in m leaves the node:
    the hop latency is their average. A group with one member per node (stride >= node) keeps
    the tier's per-GPU rate and latency. Assumes at least one channel per NIC (NCCL's default on
    8-NIC nodes); ``nccl_channels`` sets the crossing tier's connections only."""
    bw, a = tier_of_span(k, stride * n_in, xp)
    m = members_per_node(k, stride, n_in, xp)
    up = stride * n_in > k.node
    return (xp.where(up, xp.minimum(bw * m, k.nvlink_Bps), bw),
            xp.where(up, (a + (m - 1.0) * k.nvlink_alpha_s) / m, a))


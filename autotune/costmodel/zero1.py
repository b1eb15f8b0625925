"""InternEvo's hybrid ZeRO-1 (WorkloadSpec.zero1_param_sync = broadcast, zero1_shard_ranks): the
optimizer shard groups and the parameter broadcasts after the step; ``terms.dp_comm_groups`` and
``iteration_formulas`` use them."""
from __future__ import annotations

from .collectives import KIND_AG, collective
from .params import CostParams
from .scenario_consts import ScenarioConsts
from .spans import ring_tier_of_span


def zero1_group_size(k: ScenarioConsts, n, xp):
    """Data-parallel ranks of one optimizer shard group of a group of n (WorkloadSpec.zero1_shard_ranks,
    0 = all n): the zero1 flavour's shard count."""
    if not k.zero1_bcast or k.zero1_group <= 0:      # one scenario-wide setting: decided here, not per row
        return n
    return xp.minimum(k.zero1_group, n)


def zero1_broadcasts(k: ScenarioConsts, p: CostParams, t, P, n_in, n_x, stride, coll, proto,
                     bw_x_all, ax_all, rows, xp):
    """(seconds, cross-building bytes per GPU, broadcasts) of InternEvo's parameter sync
    (zero1_param_sync broadcast; HybridZeroOptimizer.broadcast_params): each of the g ranks of a
    shard group (``zero1_group_size``: g consecutive data-parallel ranks, inside the building where
    g fits there) broadcasts its P / g updated parameters to the group, one NCCL broadcast each, in
    turn on one stream. A ring broadcast of M bytes carries M over every link of the ring in g - 1
    pipelined steps: priced as the ring all-gather whose links carry the same bytes (M g / (g - 1)
    gathered) with the same g - 1 steps, without PAT (NCCL runs broadcasts on rings only). None
    for a group of one."""
    g = zero1_group_size(k, n_in * n_x, xp)
    g_in = xp.minimum(g, n_in)
    g_x = g / g_in
    bw_g, a_g = ring_tier_of_span(k, stride, g_in, xp)
    bw_ring = t.goodput_where(g_x > 1.0, k.G_b / g_in, t.ch, t.ch * t.buf)     # every row: t's arrays are

    def bcast(g_, g_in_, g_x_, bw_g_, a_g_, bw_ring_, coll_, proto_, bwxa, axa, ch_, buf_, P_):   # full-length
        size = P_ * k.weight_bytes / xp.maximum(g_ - 1.0, 1.0)       # M g / (g - 1) with M = P wb / g
        one, x1 = collective(KIND_AG, coll_, proto_, size, g_in_, g_x_, bw_g_, a_g_, bw_ring_, bwxa, axa, ch_, buf_,
                             k.ll128, xp, p.nccl_overhead_scale, axa, 0.0)
        many = xp.where(g_ > 1.0, g_, 0.0)
        return many * one, many * x1
    full = 0.0 * n_in
    t_bc, x_bc = xp.on_rows(rows, bcast, g + full, g_in + full, g_x + full, bw_g + full, a_g + full, bw_ring + full,
                            coll, proto, bw_x_all, ax_all, t.ch + full, t.buf + full, P + full)
    return t_bc, x_bc, g

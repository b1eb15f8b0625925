"""Buildings of different GPU speeds: each GPU type's kernel times and links (``speed_types``), its
speed on each configuration (``row_speeds``), the work shares between them under ``hetero_split``
(``hetero_shares``, ``min_makespan``) and each type's memory against its own HBM (``typed_memory``)."""
from __future__ import annotations

from functools import reduce
from typing import NamedTuple

import numpy as np

from ..specs.codes import HeteroSplit
from .params import CostParams
from .terms import P_DP_OUT, P_PP_OUT, compute_terms
from .xp import SCALAR

_SPEEDS: dict = {}


class SpeedType(NamedTuple):
    """One GPU type of a mixed cluster (``speed_types``)."""
    speed: float    # one reference layer's speed over the slowest GPU's (>= 1; launch notes, tests)
    share: float    # share of the cluster's GPUs
    link: float     # its exchanges inside a building over the cluster's slowest NVLink / NIC (>= 1)
    nic: float      # its NIC over the slowest NIC (>= 1)
    consts: object  # ScenarioConsts of a cluster of this GPU alone (its kernel times)


def speed_types(scenario, p: CostParams) -> tuple:
    """(SpeedType, ...) for each distinct GPU of a mixed cluster, in the order the buildings name
    them; () on one GPU type. ``speed``: the model's own forward time of one reference layer
    (one sequence, no TP/CP/EP: every GEMM, the attention core and the element-wise passes at
    their shapes, ``compute_terms``) at the slowest pace the scenario's constants charge, over
    the same layer on a cluster of that GPU alone (>= 1); the cost model itself takes each
    configuration's own ratio from ``consts`` (``row_speeds``). ``link``: how much faster the
    exchanges inside one of its buildings run than on the links the scenario's constants charge
    (the slowest NVLink and NIC of the cluster): the smaller of its NVLink and its NIC bandwidth
    over those (a building's TP, CP and EP traffic stays on its own NVLink and NICs); ``nic``:
    its NIC over the slowest (under pp_out a stage's DP group stays in its building). Cached per
    scenario object and parameters."""
    from .scenario_consts import _compute_consts, scenario_consts
    key = (id(scenario), p)
    hit = _SPEEDS.get(key)                 # first: iteration_formulas asks once per chunk
    if hit is not None and hit[0] is scenario:
        return hit[1]
    c = scenario.cluster
    if len({b.gpu for b in c.buildings}) < 2:
        if len(_SPEEDS) > 32:
            _SPEEDS.clear()
        _SPEEDS[key] = (scenario, ())
        return ()

    def layer_s(kk) -> float:
        t = compute_terms(kk, p, 1.0, 1.0, 1.0, 1.0, 1.0, SCALAR)
        return float(t.attn_lin + t.core + t.elem + (1 - kk.moe_frac) * t.mlp_dense
                     + kk.moe_frac * (t.moe_lin + t.moe_permute))
    slow_s = layer_s(scenario_consts(scenario, p))
    nvl_min = min(x.gpu.nvlink_bandwidth_Bps for x in c.buildings)
    nic_min = min(x.gpu.nic_bandwidth_Bps for x in c.buildings)
    out: dict = {}
    for b in c.buildings:
        g = b.gpu
        if g not in out:
            alone = scenario.model_copy(update={"cluster": c.model_copy(update={
                "buildings": tuple(x.model_copy(update={"gpu": g}) for x in c.buildings)})})
            kk = _compute_consts(alone, p)
            nic = g.nic_bandwidth_Bps / nic_min
            out[g] = [max(1.0, slow_s / layer_s(kk)), 0.0, min(g.nvlink_bandwidth_Bps / nvl_min, nic), nic, kk]
        out[g][1] += b.gpus / c.n_gpus
    types = tuple(SpeedType(*v) for v in out.values())
    if len(_SPEEDS) > 32:
        _SPEEDS.clear()
    _SPEEDS[key] = (scenario, types)
    return types


def row_speeds(types: tuple, slow_compute, compute_of, xp) -> list:
    """Each GPU type's speed on each configuration: the rank's compute per micro-batch at the
    slowest pace the scenario's constants charge (``slow_compute``) over the same compute with
    that type's kernel times (``compute_of(consts)``), >= 1. The ratio depends on the shapes: an
    H100 is further ahead of an A100 on large GEMMs than on memory-bound passes."""
    return [xp.maximum(1.0, slow_compute / compute_of(ty.consts)) for ty in types]


class HeteroShares(NamedTuple):
    """Factors on the bottleneck rank's per-micro-batch times and each GPU type's layer-held
    memory under ``hetero_split`` (1 where the split is even)."""
    compute: object   # compute per micro-batch
    comm: object      # TP / CP / EP exchanges per micro-batch (they run per layer)
    plan: tuple = ()  # per GPU type (speed_types order): micro-batches per replica (dp_out) or
                      # layers per stage (pp_out) under by_speed; () where even
    microbatches: object = None   # micro-batches of the busiest replica (its in-flight activations)
    dp_step: object = 1.0   # the step's DP collectives (pp_out: each building's stages on its own NICs)
    memory_types: tuple = ()   # per GPU type: its ranks' layer-held memory factor (pp_out: L_j / Ls)


def hetero_shares(types: tuple, speeds: list, L, p: CostParams, batch, m, pp, Ls, pace_at, fill,
                  xp) -> HeteroShares:
    """Work shares between buildings of different speeds (``types``, from ``speed_types``: share
    w_j of the GPUs, exchanges r_j >= 1 times faster on its own links, NIC n_j >= 1 times; per
    configuration ``speeds`` s_j >= 1 over the slowest GPU, ``row_speeds``; L layers; Ls the
    even split's layers a stage, rounded up to whole model chunks). ``pace_at(s, x=1, xg=x)``:
    the bottleneck rank's time per micro-batch when its compute runs s times faster than the
    slowest GPU's, its exchanges take x times as long and its FSDP gathers xg times (pipeline
    sends unchanged; ``pace_at(1)``: the even split's).
    A rank of type j takes T_j = pace_at(s_j, 1 / r_j) per micro-batch with an even share (its
    FSDP gathers at the slowest links: under dp_out they may cross buildings).

    - dp_out (whole replicas per building): a replica on type j takes T_j per micro-batch, and
      its pipeline's fill and drain take B0 of its own micro-batch times (B0 = ``fill`` / T_1,
      the even split's bubble). The M = m dp micro-batches are shared so that every replica
      finishes together: continuous t = (m + B0) / sum_j(w_j / T_j). In whole micro-batches the
      counts m_j >= 1 are the ones whose last replica finishes first (``min_makespan``: the
      smallest pace P with sum_j w_j floor(P / T_j - B0) >= m, P one of the finishing times
      (k + B0) T_j); the even split ((m + B0) T_1) is kept where it is faster. Every
      per-micro-batch time is scaled by P / ((m + B0) T_1), the fill included; the busiest
      replica's m_j sets the in-flight activations (``microbatches``). The counts are per
      replica, so they may add up to a little more than M. The step's DP collectives cross
      buildings at the slowest links (factor 1).
    - pp_out (pp / B stages per building, equal buildings): a stage on type j holds L_j >= 1
      layers (any count: Megatron-Core's pipeline layout sets each virtual stage's layers), the
      counts whose slowest stage is fastest with sum_j pp w_j L_j >= L
      (``min_makespan`` on compute, L_j / s_j, so that the split, and with it the memory, does
      not depend on the transport; continuous: L s_j / S, S = pp sum_j(w_j s_j)): compute
      factor max_j(L_j / s_j) / Ls; per-layer exchanges and FSDP gathers max_j(L_j / r_j) / Ls;
      the step's DP collectives (each building's stage reduces inside its building, on its own
      NICs) max_j(L_j / n_j) / Ls; each type's layer-held memory L_j / Ls (``memory_types``)
      against its own HBM. Taken wherever it cuts the stage's compute: where the fastest
      stages' exchanges outgrow that, the even split (the other value of the knob) is faster.
      (Megatron-Core takes an uneven split as a pipeline layout; torchtitan as manual split
      points.)
    With ``p.integer_shares`` = 0 (the search's lower bound) shares are continuous, pp_out's
    exchanges take L / (pp Ls sum_j(w_j r_j)) (as max_j(L_j / r_j) >= sum_j w_j L_j / sum_j
    w_j r_j >= L / pp / sum_j w_j r_j; DP the same with n_j) and memory keeps factor 1: never
    above the whole-share time, and monotone in every time."""
    by = batch.get("hetero_split", HeteroSplit.EVEN) == HeteroSplit.BY_SPEED
    pl = batch["placement"]
    integer = p.integer_shares > 0
    T_1 = pace_at(1.0)
    r_j = [ty.link for ty in types]
    T_j = [pace_at(s, 1.0 / r, 1.0) for s, r in zip(speeds, r_j)]   # FSDP gathers may cross buildings
    w = [ty.share for ty in types]
    rate = sum(wj / t for t, wj in zip(T_j, w))     # per replica: dp cancels
    B0 = fill / T_1
    # T_1 / T_j <= max(s_j, r_j): candidates per type that cover one slowest unit
    span = int(np.ceil(max(max(float(np.max(s)), r) for s, r in zip(speeds, r_j)))) + 1
    if integer:
        t_up, mb_j = min_makespan(T_j, w, m, B0, span, xp)
        g_dp = xp.minimum(t_up, (m + B0) * T_1) / ((m + B0) * T_1)
        _, L_j = min_makespan([1.0 / s for s in speeds], w, L / pp, 0.0, span, xp)   # compute: no transport
        g_c = _max_of([lj / s for lj, s in zip(L_j, speeds)], xp) / Ls
        g_x = _max_of([lj / ty.link for lj, ty in zip(L_j, types)], xp) / Ls
        g_n = _max_of([lj / ty.nic for lj, ty in zip(L_j, types)], xp) / Ls
        use_pp = by & (pl == P_PP_OUT) & (g_c < 1.0)
    else:
        g_dp = 1.0 / (T_1 * rate)     # <= the whole-share factor, and monotone in every time
        mb_j = [xp.maximum(xp.ceil((m + B0) / rate / tj - B0 - 1e-9), 1.0) for tj in T_j]
        S = pp * sum(s * wj for s, wj in zip(speeds, w))
        L_j = [xp.ceil(L * s / S - 1e-9) for s in speeds]
        g_c = L / (S * Ls)
        g_x = L / (pp * Ls * sum(wj * r for wj, r in zip(w, r_j)))
        g_n = L / (pp * Ls * sum(wj * ty.nic for wj, ty in zip(w, types)))
        use_pp = by & (pl == P_PP_OUT)
    use_dp = by & (pl == P_DP_OUT) & (g_dp < 1.0)
    plan = tuple(xp.where(use_dp, n, xp.where(use_pp, lj, 0.0)) for n, lj in zip(mb_j, L_j))
    busiest = _max_of(mb_j, xp)
    mem_j = tuple(xp.where(use_pp, lj / Ls, 1.0) for lj in L_j) if integer else (1.0,) * len(types)
    return HeteroShares(xp.where(use_dp, g_dp, xp.where(use_pp, g_c, 1.0)),
                        xp.where(use_dp, g_dp, xp.where(use_pp, g_x, 1.0)),
                        plan, xp.where(use_dp, busiest, m),
                        xp.where(use_pp, g_n, 1.0), mem_j)


def typed_memory(types: tuple, factors: tuple, held, fixed, xp):
    """(memory, deficit) of a mixed cluster: each GPU type's ranks hold f held + fixed bytes
    (``memory.memory_per_gpu``'s parts: states and activations scale with the layers, the buffers
    and reserve do not; f from ``HeteroShares.memory_types``) against their own HBM; the largest
    holding and the largest shortfall over the types. Under dp_out every type is charged the
    busiest replica's in-flight micro-batches (conservative for the slow types)."""
    mem_j = [f * held + fixed for f in factors]
    return (_max_of(mem_j, xp),
            _max_of([xp.maximum(0.0, m - ty.consts.hbm_bytes) for m, ty in zip(mem_j, types)], xp))


def _max_of(xs: list, xp):
    """Element-wise maximum of a non-empty list of arrays (or scalars)."""
    return reduce(xp.maximum, xs)


def min_makespan(unit_s: list, w: list, demand, offset, span: int, xp):
    """Whole work units between types so that the last to finish finishes first: n_j >= 1 units
    of unit time u_j (``unit_s``) per worker of type j, a share w_j of the workers, with
    sum_j w_j n_j >= ``demand``; a worker finishes at (n_j + ``offset``) u_j. Returns (pace,
    [n_j]). The optimum pace is one of the finishing times (k + offset) u_j at or above the
    continuous t = (demand + offset) / sum_j(w_j / u_j) (with sum_j w_j = 1) and at or below
    the pace of every n_j rounded up from t, which is less than t + max_j u_j: ``span`` >=
    max_j u_j / min_j u_j + 1 candidates per type cover that range. At each candidate P the
    counts are n_j = max(floor(P / u_j - offset), 1) (the most that finish by P); the fastest
    candidate whose counts meet the demand wins (the rounded-up counts always do)."""
    t = (demand + offset) / sum(wj / u for u, wj in zip(unit_s, w))
    best = best_n = None
    for u0 in unit_s:
        k0 = xp.ceil(t / u0 - offset - 1e-9)
        for d in range(span):
            P = (k0 + d + offset) * u0
            n = [xp.maximum(xp.floor(P / u - offset + 1e-9), 1.0) for u in unit_s]
            got = sum(wj * nj for wj, nj in zip(w, n))
            last = _max_of([(nj + offset) * u for u, nj in zip(unit_s, n)], xp)
            pace = xp.where(got >= demand - 1e-9, last, np.inf)
            if best is None:
                best, best_n = pace, n
            else:
                take = pace < best
                best = xp.where(take, pace, best)
                best_n = [xp.where(take, a, b) for a, b in zip(n, best_n)]
    return best, best_n

"""Buildings of different GPU speeds: each GPU type's speed from the model's own reference layer
(``speed_types``) and the work shares between them under ``hetero_split`` (``hetero_shares``)."""
from __future__ import annotations

from typing import NamedTuple

from ..specs.codes import HeteroSplit
from .params import CostParams
from .terms import P_DP_OUT, P_PP_OUT, compute_terms
from .xp import SCALAR

_SPEEDS: dict = {}


def speed_types(scenario, p: CostParams) -> tuple:
    """((speed, GPU share), ...) for each distinct GPU of a mixed cluster, in the order the
    buildings name them; () on one GPU type. A GPU's speed is the model's own forward time of one
    reference layer (one sequence, no TP/CP/EP: every GEMM, the attention core and the
    element-wise passes at their shapes, ``compute_terms``) at the slowest pace the scenario's
    constants charge, over the same layer on a cluster of that GPU alone (>= 1). Cached per
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
    out: dict = {}
    for b in c.buildings:
        if b.gpu not in out:
            alone = scenario.model_copy(update={"cluster": c.model_copy(update={
                "buildings": tuple(x.model_copy(update={"gpu": b.gpu}) for x in c.buildings)})})
            out[b.gpu] = [max(1.0, slow_s / layer_s(_compute_consts(alone, p))), 0.0]
        out[b.gpu][1] += b.gpus / c.n_gpus
    types = tuple((sp, share) for sp, share in out.values())
    if len(_SPEEDS) > 32:
        _SPEEDS.clear()
    _SPEEDS[key] = (scenario, types)
    return types


class HeteroShares(NamedTuple):
    """Factors on the bottleneck rank's per-micro-batch times and layer-held memory under
    ``hetero_split`` (1 where the split is even or the cluster has one GPU type)."""
    compute: object   # compute per micro-batch
    comm: object      # TP / CP / EP exchanges per micro-batch (they run per layer)
    memory: object    # parameters, gradients, optimizer state and activations (they scale with layers)
    plan: tuple = ()  # per GPU type (speed_types order): micro-batches per replica (dp_out) or
                      # layers per stage (pp_out) under by_speed; () where even
    microbatches: object = None   # micro-batches of the busiest replica (its in-flight activations)


def hetero_shares(types: tuple, L, p: CostParams, batch, m, pp, Ls, pace_at, fill, xp) -> HeteroShares:
    """Work shares between buildings of different speeds (``types``, from ``speed_types``: speed
    s_j >= 1 over the slowest GPU, share w_j of the GPUs; L layers). ``pace_at(s, x=1)``: the bottleneck rank's time per
    micro-batch when its compute runs s times faster than the slowest GPU's and its exchanges and
    FSDP gathers take x times as long (pipeline sends unchanged; ``pace_at(1)`` is the even
    split's pace).

    - dp_out (whole replicas per building): a replica on type j takes T_j = pace_at(s_j) per
      micro-batch, and its pipeline's fill and drain take B0 of its own micro-batch times
      (B0 = ``fill`` / T_1, the even split's bubble). The M = m dp micro-batches are shared so
      that every replica finishes together: continuous t = (m + B0) / sum_j(w_j / T_j). In whole
      micro-batches a replica of type j takes m_j = ceil(t / T_j - B0) and finishes at
      (m_j + B0) T_j; the last one sets the step, and the even split ((m + B0) T_1) is kept
      where it is faster. Every per-micro-batch time is scaled by t / ((m + B0) T_1), the fill
      included; the busiest replica's m_j sets the in-flight activations (``microbatches``).
      The counts are per replica and round up, so they may add up to a little more than M.
    - pp_out (pp / B stages per building, equal buildings): a stage on type j holds
      L_j = ceil(L s_j / S) layers, S = pp sum_j(w_j s_j), so compute per stage is balanced:
      compute factor max_j(L_j / s_j) / Ls; the fastest stages hold the most layers, so the
      per-layer exchanges, FSDP gathers and layer-held memory scale by max_j(L_j) / Ls. Kept only
      where the stage's pace beats the even split's. (Megatron-Core takes an uneven split as a
      pipeline layout; torchtitan as manual split points.)
    With ``p.integer_shares`` = 0 (the search's lower bound) shares are continuous and the
    exchanges keep factor 1: never above the whole-share time, and monotone in every time."""
    if not types:
        return HeteroShares(1.0, 1.0, 1.0)
    by = batch.get("hetero_split", HeteroSplit.EVEN) == HeteroSplit.BY_SPEED
    pl = batch["placement"]
    integer = p.integer_shares > 0
    T_1 = pace_at(1.0)
    T_j = [pace_at(s) for s, _ in types]
    rate = sum(w / t for t, (_, w) in zip(T_j, types))     # per replica: dp cancels
    B0 = fill / T_1
    t = (m + B0) / rate
    mb_j = [xp.maximum(xp.ceil(t / tj - B0 - 1e-9), 1.0) for tj in T_j]
    if integer:
        t_up = None
        for n, tj in zip(mb_j, T_j):
            t_up = (n + B0) * tj if t_up is None else xp.maximum(t_up, (n + B0) * tj)
        g_dp = xp.minimum(t_up, (m + B0) * T_1) / ((m + B0) * T_1)
    else:
        g_dp = 1.0 / (T_1 * rate)     # <= the whole-share factor, and monotone in every time
    S = pp * sum(s * w for s, w in types)
    L_j = [xp.ceil(L * s / S - 1e-9) for s, _ in types]
    if integer:
        g_c = g_x = None
        for lj, (s, _) in zip(L_j, types):
            g_c = lj / s if g_c is None else xp.maximum(g_c, lj / s)
            g_x = lj if g_x is None else xp.maximum(g_x, lj)
        g_c, g_x = g_c / Ls, g_x / Ls
        use_pp = by & (pl == P_PP_OUT) & (pace_at(1.0 / g_c, g_x) < T_1)
    else:
        g_c, g_x = L / (S * Ls), 1.0
        use_pp = by & (pl == P_PP_OUT)
    use_dp = by & (pl == P_DP_OUT) & (g_dp < 1.0)
    plan = tuple(xp.where(use_dp, n, xp.where(use_pp, lj, 0.0)) for n, lj in zip(mb_j, L_j))
    busiest = None
    for n in mb_j:
        busiest = n if busiest is None else xp.maximum(busiest, n)
    return HeteroShares(xp.where(use_dp, g_dp, xp.where(use_pp, g_c, 1.0)),
                        xp.where(use_dp, g_dp, xp.where(use_pp, g_x, 1.0)),
                        xp.where(use_pp, g_x, 1.0), plan, xp.where(use_dp, busiest, m))

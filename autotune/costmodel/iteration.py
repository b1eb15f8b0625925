"""Iteration time of many configurations at once: the cost model's hot path.

``evaluate_batch(scenario, batch)`` takes a ConfigBatch (dict of equal-length arrays, categorical
knobs as codes, see ``autotune.space``) and returns a dict of arrays. Everything is array
arithmetic; no Python loop runs per configuration. ``evaluate`` is this path with one row.
"""
from __future__ import annotations

from ..configbatch import scalar_row as _scalar_row
from ..specs.scenario import Scenario
from .batch_order import CHUNK_ROWS, SORT_KEYS, SORT_MIN_ROWS, _branch_order, chunk_rows, put_back  # noqa: F401
from .compute_pass import pass_compute
from .dp_step import dp_exposure, dp_schedule, optimizer_step
from .ep_dispatch import ep_terms
from .exchanges import cp_terms, p2p_link, tp_hidden, tp_terms
from .hetero import hetero_shares, row_speeds, speed_types, typed_memory
from .host_floor import dp_windows, host_gaps, host_launch_time, offload_floors
from .memory import memory_per_gpu, offload_bytes
from .params import CostParams, default_params
from .pipe_time import pace, pipeline_time, pp_links
from .pipeline import bubble_time, in_flight_microbatches, pipe_memory
from .recompute import step_flops
from .result import BREAKDOWN_KEYS, Evaluation, infeasible_reason, public_outputs  # noqa: F401 - public here too
from .scenario_consts import FSDP_GATHER_PARAMETER, scenario_consts
from .stragglers import straggler_scale
from .terms import F_FSDP, Transport, dp_comm_groups, expert_tp, layout, sum_groups
from .tiers import accounting
from .traffic import step_bytes
from .xp import NUMPY, SCALAR


def evaluate_batch(scenario: Scenario, batch: dict, params: CostParams | None = None, *, check: bool = True,
                   tiers: bool = False) -> dict:
    """Iteration time, breakdown, memory and feasibility of every configuration in ``batch``.
    ``check``: first raise a one-line UserInputError naming the first rule a row breaks
    (``SearchSpace.violations``); callers whose rows come from a SearchSpace pass False.
    ``tiers``: add the per-tier, per-dimension accounting (``tiers.TIER_KEYS``; off on the hot path).
    The first call raises glibc's heap thresholds for the process (``heap.py``: freed temporaries
    are kept for reuse; ``AUTOTUNE_HEAP=default`` opts out)."""
    p = params or default_params()
    n = len(batch["tp"])
    chunk = chunk_rows()                  # applies heap.py's settings once per process (speed only)
    if check:
        from ..space import rules_for
        rules_for(scenario).check_batch(batch)
    out: dict = {}

    def run(rows: dict, sl: slice, size: int):
        """Evaluate rows ``sl`` of the batch into ``out``: in the branch order, each output
        gathered back to the caller's order straight into its slice of ``out``."""
        order = _branch_order(rows) if size >= SORT_MIN_ROWS else None
        if order is not None:
            rows = {k: v[order] for k, v in rows.items()}
        part = iteration_formulas(scenario, rows, p, NUMPY)
        if tiers:
            part.update(accounting(scenario_consts(scenario, p), part["_acct"], NUMPY))
        put_back(out, public_outputs(part, size), sl, order, n)
    for i in range(0, max(n, 1), chunk):
        sl = slice(i, min(i + chunk, n))
        run(batch if n <= chunk else {k: v[sl] for k, v in batch.items()}, sl, sl.stop - sl.start)
    return out


def iteration_formulas(scenario: Scenario, batch: dict, p: CostParams, xp) -> dict:
    """The cost model, written once for any array backend ``xp`` (see ``xp.py``). The bottleneck
    rank's named terms per micro-batch (compute: ``compute_pass``; TP, CP: ``exchanges``; EP:
    ``ep_dispatch.ep_terms``; the host floor: ``host_floor``), paced with the FSDP gathers and the
    pipeline sends into the pipeline's time (``pipe_time``); then the step's DP collectives and
    optimizer (``dp_step``), stragglers, memory (``memory``), FLOPs and the breakdown, which sums
    to the iteration time."""
    k = scenario_consts(scenario, p)
    f = xp.asfloat
    tp, cp, ep, pp, dp = (f(batch[x]) for x in ("tp", "cp", "ep", "pp", "dp"))
    v, mb = f(batch["pp_chunks"]), f(batch["micro_batch"])
    fl, sc, rc = (batch[x] for x in ("dp_flavour", "pp_schedule", "recompute"))
    overlap = f(batch["overlap_dp"]) > 0
    if k.fsdp_gather == FSDP_GATHER_PARAMETER:   # DeepSpeed <= v0.5 synchronized before each gather
        overlap = overlap & (fl != F_FSDP)
    m = k.global_batch / (dp * mb)                   # micro-batches per step
    tok = mb * k.seq / cp                            # tokens per micro-batch on one GPU
    lay = layout(k, batch, xp)                       # layers, parameters, which groups span buildings
    t = Transport(k, batch, xp)
    link = p2p_link(k, t, xp)

    # ---- one micro-batch on the bottleneck rank: compute, then each exchange ----
    Ls, Ls_dense, Ls_moe = lay.Ls, lay.Ls_dense, lay.Ls_moe
    et = expert_tp(batch, xp)
    pc = pass_compute(k, p, batch, lay, xp, mb, cp, tp, ep, et, rc)
    tpt = tp_terms(k, p, rc, tok, tp, lay, pc.lin_f, pc.lin_x, pc.lin_xb, xp)
    cpt = cp_terms(k, p, tok, tp, cp, lay.x_cp, Ls, pc.ct.core, link, xp)
    ept = ep_terms(k, p, sc, pp, v, m, rc, tok, tp, ep, et, lay, pc.ct, link.goodput, xp)
    t_f_comp, t_b_comp, t_w_comp = pc.t_f, pc.t_b, pc.t_w
    tp_f, tp_b, cp_f, cp_b, ep_f, ep_b = tpt.f, tpt.b, cpt.f, cpt.b, ept.f, ept.b

    # ---- host floor: the GPU runs a pass no faster than the host launches its kernels ----
    host_f, host_b, host_w = host_launch_time(k, Ls, Ls_dense, Ls_moe, tp, cp, rc, xp)
    # ... nor faster than its offloaded activations cross the host link (WorkloadSpec.offload_modules)
    offload = offload_bytes(k, rc, tok, tp, ep, Ls, Ls_moe, xp)     # (per micro-batch, one layer's); memory too
    host_f, host_b, host_w = offload_floors(k, host_f, host_b, host_w, offload[0], xp)

    def per_microbatch(with_host=True):
        """(t_f, t_b, t_w, T_comp, T_mb, gap): forward, backward and weight-gradient time of one
        micro-batch with their exchanges and the host gap, their compute alone, their sum, and
        the host gap alone (``host_launch_time``; left out with ``with_host`` False)."""
        f_, b_ = t_f_comp + tp_f + cp_f + ep_f, t_b_comp + tp_b + cp_b + ep_b
        f_, b_, w_, gap = host_gaps(f_, b_, t_w_comp, host_f if with_host else None, host_b, host_w, sc, xp)
        return f_, b_, w_, t_f_comp + t_b_comp + t_w_comp, f_ + b_ + w_, gap
    # buildings of different speeds share the work by GPU work alone; the host floor applies to the
    # shares' result at the even split's launches per micro-batch: never below the even split's
    # floor, so by_speed never loses to even; an underestimate where a fast replica runs more
    # micro-batches (or a fast stage more layers), each launched at the same host cost, which the
    # share decision does not see
    types = speed_types(scenario, p)
    t_f, t_b, t_w, T_comp, T_mb, host_gap = per_microbatch(with_host=not types)

    # ---- data parallel: the groups' collectives (terms.dp_comm_groups), by when they run ----
    n_d = dp * cp
    n_e = xp.maximum(dp * cp * tp / (et * ep), 1.0)   # expert data parallel (folding: tp*cp*dp / (etp*ep))
    n_in_d, n_in_e = n_d / lay.b_dp, n_e / lay.x_exp
    dp_groups = dp_comm_groups(k, p, batch, xp, t, lay)
    dps = sum_groups(dp_groups)
    sched = dp_schedule(k, fl, rc, tp, m, lay, dps, xp)
    gather_f_mb, gather_b_mb = sched.gather_f_mb, sched.gather_b_mb
    per_step_grad, per_step_param = sched.grad, sched.param

    # ---- pipeline sends, then the pace of a micro-batch and the whole pipeline ----
    pl = pp_links(k, p, t, link, tok, tp, pp, v, sc, lay.b_pp, xp)
    # floors on the pace: the activations' link, and the loss's own rank where nanotron's split opens one
    pace_floor = xp.maximum(pl.bw_bound, pc.loss_floor)
    tp_f_link, tp_b_link = tpt.f_link, tpt.b_link
    if types:
        # buildings of different speeds share the work by speed (hetero.hetero_shares): the pace
        # of a rank whose compute is sp times faster and whose exchanges (gathers) scale by x (xg)
        def pace_at(sp, x=1.0, xg=None):
            xg = x if xg is None else xg
            return xp.maximum(pace(t_f_comp / sp + x * (t_f - t_f_comp), t_b_comp / sp + x * (t_b - t_b_comp),
                                   t_w_comp / sp, xg * gather_f_mb, xg * gather_b_mb, overlap, xp)[2], pace_floor)
        f1, b1, _ = pace(t_f, t_b, t_w, gather_f_mb, gather_b_mb, overlap, xp)
        fill = xp.where(pp > 1, bubble_time(sc, pp, v, f1, b1, t_w, xp, k.post_validation, m,
                                            xp.maximum(t_w, pace_floor - f1 - b1)), 0.0)   # fill and drain at the even pace
        speeds = row_speeds(types, pc.total, lambda kj: pass_compute(kj, p, batch, lay, xp, mb, cp, tp, ep, et, rc).total, xp)
        hs = hetero_shares(types, speeds, k.L, p, batch, m, pp, Ls, pace_at, fill, xp)
        t_f_comp, t_b_comp, t_w_comp = hs.compute * t_f_comp, hs.compute * t_b_comp, hs.compute * t_w_comp
        cp_f, cp_b, ep_f, ep_b, tp_f_link, tp_b_link = (hs.comm * x for x in (cp_f, cp_b, ep_f, ep_b, tp_f_link, tp_b_link))
        # the overlap budget is the bottleneck rank's own GEMMs under the shares
        tp_f, tp_b = tp_hidden(k, tp_f_link, tp_b_link, hs.compute * pc.lin_f, hs.compute * pc.lin_x,
                               hs.compute * pc.lin_xb, tp, xp)
        gather_f_mb, gather_b_mb = hs.comm * gather_f_mb, hs.comm * gather_b_mb
        t_f, t_b, t_w, T_comp, T_mb, host_gap = per_microbatch()
        hetero_plan, m_busiest = hs.plan, hs.microbatches
        per_step_grad, per_step_param = hs.dp_step * per_step_grad, hs.dp_step * per_step_param
    else:
        hetero_plan, m_busiest = (), m
    t_f_p, t_b_p, T_fsdp = pace(t_f, t_b, t_w, gather_f_mb, gather_b_mb, overlap, xp)
    T_pace = xp.maximum(T_fsdp, pace_floor)
    pt = pipeline_time(k, sc, pp, v, m, T_pace, t_f_p, t_b_p, t_w, pl, lay.b_pp, xp)

    # ---- the step's DP collectives exposed, the optimizer, stragglers (stragglers.py) ----
    pass_f, pass_b = dp_windows(t_f_comp, t_b_comp + t_w_comp, t_f - tp_f - cp_f - ep_f, t_b + t_w_comp - tp_b - cp_b - ep_b,
                                t_f_p - gather_f_mb, t_b_p - gather_b_mb + t_w, xp)
    dp_exposed = dp_exposure(k, fl, sc, pp, v, m, overlap, per_step_grad, per_step_param, dps, pass_f, pass_b, xp)
    owned, t_opt = optimizer_step(k, fl, lay, n_d, n_e, n_in_d, n_in_e, xp)
    base = pt.total + dp_exposed + t_opt
    straggler = base * (straggler_scale(k.n_gpus, p.straggler_jitter) - 1.0)
    iteration = base + straggler

    # ---- memory per GPU (bottleneck rank; memory.memory_per_gpu) ----
    infl_mem = in_flight_microbatches(sc, pp, v, m_busiest, xp) if types else pt.infl   # the busiest replica's
    held, fixed = memory_per_gpu(k, fl, rc, k.fsdp_regather, owned, lay.P_dense, lay.P_exp, tp, ep, et, tok, Ls,
                                 Ls_dense, Ls_moe, pipe_memory(sc, pp, v, m_busiest, infl_mem, lay.head_on_first, xp),
                                 xp, offload)
    if types:          # each GPU type's ranks against their own HBM (hetero.typed_memory)
        memory, deficit = typed_memory(types, hs.memory_types, held, fixed, xp)
    else:
        memory = held + fixed
        deficit = xp.maximum(0.0, memory - k.hbm_bytes)

    # ---- FLOPs, MFU (model FLOPs, non-causal attention: PaLM / Megatron convention) ----
    tokens_step = k.global_batch * k.seq
    model_flops, recompute_flops = step_flops(k, rc, tokens_step, xp)
    denom = iteration * k.n_gpus * k.peak_precision

    # ---- breakdown (sums to the iteration time) and bytes per GPU per step on each tier ----
    fsdp_part = m * (T_fsdp - T_mb)
    p2p_part = m * (T_pace - T_fsdp)
    pp_latency = pt.waiting * (pt.cycle - T_pace) + 2 * pl.chain
    by = step_bytes(k, fl, m, tp, cp, pp, lay, sched, dps, pl, tpt, cpt, ept, et, xp)
    xb_per_gpu = by.xb
    d = ept.d
    acct = {"m": m, "Ls": Ls, "Ls_moe": Ls_moe, "tp": tp, "cp": cp, "ep": ep, "et": et, "pp": pp, "cp_in": cpt.cp_in,
            "x_cp": lay.x_cp, "ep_in": d.ep_in, "x_ep": lay.x_ep, "nvlink_bytes": by.nvlink_tp, "kv_bytes": cpt.kv_bytes,
            "bw_cp": cpt.bw, "a_cp": cpt.alpha, "a2a_bytes": d.a2a_bytes, "t_a2a": d.t_a2a, "t_etp": d.t_etp,
            "etp_bytes": by.nvlink_etp, "ep_passes": ept.passes, "m_ep": d.m_ep, "ep_nic": d.ep_nic, "xb_cp": by.xb_cp,
            "xb_ep": by.xb_ep, "xb_pp": by.xb_pp, "stage_gpus": pl.stage_gpus, "b_pp": lay.b_pp, "hops": pl.hops,
            "xhops": pl.xhops, "s_pp": pl.s_bytes, "msgs": pl.msgs, "t_p2p_x": pl.t_x, "t_p2p_in": pl.t_in,
            "dp_groups": dp_groups, "fl": fl, "fsdp_gathers": sched.gathers, "fsdp_reduces": sched.reduces,
            "P_dense": lay.P_dense, "P_exp": lay.P_exp, "n_in_d": n_in_d, "n_in_e": n_in_e, "b_dp": lay.b_dp,
            "x_exp": lay.x_exp, "tp_s": m * (tp_f + tp_b), "tp_link_s": m * (tp_f_link + tp_b_link),
            "cp_s": m * (cp_f + cp_b), "ep_s": m * (ep_f + ep_b), "pp_s": p2p_part + pp_latency, "dp_step_s": dp_exposed,
            "dp_pass_s": fsdp_part, "pass_gathers": sched.pass_gathers, "pass_reduces": sched.pass_reduces}
    return {
        "iteration_time_s": iteration,
        "tokens_per_s": tokens_step / iteration,
        "mfu": model_flops / denom,
        "hfu": (model_flops + recompute_flops) / denom,
        "memory_per_gpu_bytes": memory,
        "memory_deficit_bytes": deficit,
        "feasible": deficit <= 0.0,
        "compute_s": m * T_comp,
        "host_s": m * host_gap,
        "tp_comm_s": m * (tp_f + tp_b),
        "cp_comm_s": m * (cp_f + cp_b),
        "ep_comm_s": m * (ep_f + ep_b),
        "pp_bubble_s": pt.bubble,
        "pp_comm_s": p2p_part + pp_latency,
        "dp_comm_s": dp_exposed + fsdp_part,
        "optimizer_s": t_opt,
        "straggler_s": straggler,
        "xb_bytes_per_gpu": xb_per_gpu,
        "xb_bytes_per_step": xb_per_gpu * k.n_gpus,
        "nvlink_bytes_per_gpu": by.nvlink_tp + by.nvlink_etp,
        # the cross-building bytes by parallel dimension, and the step-end DP collectives' link
        # time against what of it is exposed (Calculon's link vs exposed split)
        "xb_dp_bytes_per_gpu": by.xb_dp, "xb_pp_bytes_per_gpu": by.xb_pp, "xb_ep_bytes_per_gpu": by.xb_ep,
        "xb_cp_bytes_per_gpu": by.xb_cp,
        "dp_link_s": per_step_grad + per_step_param, "dp_exposed_s": dp_exposed,
        "micro_batches": m,
        # internals for the event-level simulator (scalar path)
        "_pipe_t_f": t_f_p, "_pipe_t_b": t_b_p, "_pipe_t_w": t_w,
        "_t_p2p_in": pl.t_in, "_t_p2p_x": pl.t_x, "_b_pp": lay.b_pp, "_T_pipe": pt.total,
        "_dp_exposed": dp_exposed, "_t_opt": t_opt, "_hbm_bytes": k.hbm_bytes,
        "_hetero_plan": hetero_plan,
        "_acct": acct,   # for the per-tier accounting (tiers.accounting), computed only on request
    }


def evaluate(scenario: Scenario, config, params: CostParams | None = None, *, check: bool = True) -> "Evaluation":
    """One configuration with its full breakdown: the batch formulas on one row (Python floats).
    ``check``: first raise a one-line UserInputError naming the rule the configuration breaks
    (tp beyond the NVLink domain, degrees that do not multiply to the GPU count...); False for
    a caller that took it from a SearchSpace or wants the model's number for it regardless."""
    if check:
        from ..space import rules_for
        rules_for(scenario).check(config)
    p = params or default_params()
    out = iteration_formulas(scenario, _scalar_row(config), p, SCALAR)
    out.update(accounting(scenario_consts(scenario, p), out["_acct"], SCALAR))
    return Evaluation.from_outputs(config, out, out["_hbm_bytes"])

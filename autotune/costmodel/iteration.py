"""Iteration time of many configurations at once: the cost model's hot path.

``evaluate_batch(scenario, batch)`` takes a ConfigBatch (dict of equal-length arrays, categorical
knobs as codes, see ``autotune.space``) and returns a dict of arrays. Everything is array
arithmetic; no Python loop runs per configuration. ``evaluate`` is this path with one row.
"""
from __future__ import annotations

from ..specs.codes import Recompute
from ..configbatch import scalar_row as _scalar_row
from ..specs.scenario import Scenario
from . import nccl as N
from .collectives import p2p_time, tp_collective_time, tp_exposed
from .ep_dispatch import ep_dispatch
from .params import CostParams, default_params
from .stragglers import straggler_scale
from .pipeline import (S_1F1B, S_DUALPIPEV, S_GPIPE, S_INTERLEAVED, S_ZBV, bubble_time, chain_hops,
                       in_flight_microbatches, pipe_memory, paired_share, step_end_exposed, sync_windows)
from .terms import (F_DDP, F_FSDP, F_HSDP, F_ZERO1, P_CP_OUT, P_DP_OUT, P_EP_OUT, P_HYBRID,  # noqa: F401
                    P_PP_OUT, Transport, dp_comm_groups, expert_tp, layout, sum_groups)
from .zero1 import zero1_group_size
from .kernels import memory_bound_time_s
from .zero3 import zero3_refetch_share
from .memory import memory_per_gpu, offload_bytes
from .recompute import moe_block_rerun, step_flops, tp_collectives_rerun
from .compute_pass import pass_compute
from .host_floor import dp_windows, host_gaps, host_launch_time, offload_floors
from .hetero import hetero_shares, row_speeds, speed_types, typed_memory
from .scenario_consts import (FSDP_EVERY_PASS, FSDP_FORWARD, FSDP_GATHER_PARAMETER,
                              scenario_consts, tier_of_span)
from .tiers import accounting
from .batch_order import CHUNK_ROWS, SORT_KEYS, SORT_MIN_ROWS, _branch_order, chunk_rows, put_back  # noqa: F401
from .result import BREAKDOWN_KEYS, Evaluation, infeasible_reason, public_outputs  # noqa: F401 - public here too
from .xp import NUMPY, SCALAR

R_NONE, R_SELECTIVE, R_FULL = Recompute.codes()   # codes: specs/codes.py


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
    """The cost model, written once for any array backend ``xp`` (see ``xp.py``)."""
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
    B = k.B

    # ---- which groups span buildings (placement) ----
    lay = layout(k, batch, xp)
    b_pp, b_dp, x_exp, x_ep, x_cp = lay.b_pp, lay.b_dp, lay.x_exp, lay.x_ep, lay.x_cp

    # ---- cross-building goodput per connection of send/recv (PP, CP, EP): NCCL's P2P channel
    # count per peer, NCCL_STEPS chunks per round trip, each round trip stretched by loss recovery
    t = Transport(k, batch, xp)
    ch_p2p = float(N.p2p_channels(k.nic_Bps))
    p2p_window = ch_p2p * N.NCCL_STEPS * N.P2P_NET_CHUNK_BYTES
    bw_x_p2p = t.goodput(float(k.G_b), ch_p2p, p2p_window)
    stall_x_p2p = t.stall(ch_p2p, p2p_window)
    bw_x_p2p = xp.minimum(bw_x_p2p, p2p_window / (k.x_rtt_s * stall_x_p2p)) if k.x_rtt_s > 0 else bw_x_p2p

    # ---- compute per micro-batch on the bottleneck rank (compute_pass.pass_compute) ----
    Ls, Ls_dense, Ls_moe = lay.Ls, lay.Ls_dense, lay.Ls_moe
    et = expert_tp(batch, xp)
    pc = pass_compute(k, p, batch, lay, xp, mb, cp, tp, ep, et, rc)
    ct, lin_f, lin_x = pc.ct, pc.lin_f, pc.lin_x
    t_attn_lin, t_moe_lin, t_core = ct.attn_lin, ct.moe_lin, ct.core
    t_f_comp, t_b_comp, t_w_comp = pc.t_f, pc.t_b, pc.t_w

    # ---- tensor parallel (sequence parallel): 2 all-gathers + 2 reduce-scatters per layer pass ----
    s_tp = tok * k.h * k.wire_bytes
    t_tp_coll = xp.where(tp > 1, tp_collective_time(s_tp, tp, k.nvlink_Bps, p.nccl_overhead_scale, k.ll128, xp), 0.0)
    # an MoE layer's sequence-sized TP collectives are its shared experts' (they run at tp); its
    # routed experts' TP gather is the dispatcher's (t_etp below)
    moe_tp = 1.0 if k.shared > 0 else 0.0
    tp_colls = 2 * Ls + 2 * (Ls_dense + Ls_moe * moe_tp)
    tp_rerun = tp_collectives_rerun(k, rc, tp_colls, Ls_dense, Ls_moe, moe_tp, xp)   # what the backward recomputes
    tp_f_link = tp_colls * t_tp_coll
    tp_b_link = (tp_colls + tp_rerun) * t_tp_coll
    tp_f, tp_b = tp_f_link, tp_b_link
    if k.tp_overlap:    # hidden behind the layer's GEMMs: forward, backward data + weight gradients
        tp_f, tp_b = tp_exposed(tp_f_link, lin_x, tp, xp), tp_exposed(tp_b_link, lin_x + lin_f, tp, xp)

    # ---- context parallel: ring of K/V blocks (TransformerEngine's P2P ring attention) ----
    # cp steps per layer pass; each of the cp - 1 transfers (the next K/V block; in backward
    # also the dK/dV block, 2x the bytes) overlaps only its own step's attention, t_core / cp:
    # a step whose transfer outlasts its compute exposes the difference, every step pays the
    # link's latency (docs/cost_model.md)
    cp_in = cp / x_cp
    bw_cp_in, a_cp_in = tier_of_span(k, tp * cp_in, xp)
    bw_cp = xp.where(x_cp > 1, xp.minimum(bw_cp_in, bw_x_p2p), bw_cp_in)
    a_cp = xp.where(x_cp > 1, k.x_alpha_s, a_cp_in)
    kv_bytes = tok * k.kv_width * k.wire_bytes / tp
    step_core = t_core / cp
    cp_f = Ls * (cp - 1) * xp.maximum(0.0, kv_bytes / bw_cp + a_cp - step_core)
    cp_b = Ls * (cp - 1) * xp.maximum(0.0, 2 * kv_bytes / bw_cp + a_cp - p.attention_backward_time_ratio * step_core)

    # ---- expert parallel: all-to-all dispatch + combine per MoE layer (fwd 2, bwd 2) ----
    ep_in, a2a_bytes, m_ep, ep_nic, t_a2a, t_etp = ep_dispatch(k, p, tok, tp, ep, et, x_ep, bw_x_p2p, xp)
    t_disp = t_a2a + t_etp                  # one dispatch (or combine): the all-to-all, then the gather
    # DualPipeV pairs one micro-batch's forward with another's backward, each hiding the other's
    # a2a; so does Megatron-Core's EP overlap (ep_comm_overlap) in its paired passes, where it runs
    # at all (pp 1 or interleaved, no full recomputation: pipeline.paired_share)
    moe_rerun = moe_block_rerun(k, rc)      # Megatron-Core refuses EP overlap there
    paired = xp.where(~moe_rerun & (ep > 1), paired_share(sc, pp, v, m, xp), 0.0) if k.ep_overlap else 0.0
    hide = xp.where(sc == S_DUALPIPEV, 1.0, paired)
    layer_f = t_attn_lin + t_moe_lin + t_core
    ep_f = Ls_moe * ((1.0 - hide) * 2 * t_disp + hide * xp.maximum(0.0, 2 * t_disp - layer_f))
    ep_b = Ls_moe * ((1.0 - hide) * 2 * t_disp + hide * xp.maximum(0.0, 2 * t_disp - 2 * layer_f))
    # recomputing the MoE block (full recomputation, or the moe module) dispatches and combines again
    ep_b = ep_b + xp.where(moe_rerun, Ls_moe * 2 * t_disp, 0.0)
    ep_passes = 4.0 + xp.where(moe_rerun, 2.0, 0.0)   # all-to-alls per MoE layer and micro-batch

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
    # ---- data parallel groups (terms.dp_comm_groups) ----
    P_dense, P_exp = lay.P_dense, lay.P_exp
    n_d = dp * cp
    n_e = xp.maximum(dp * cp * tp / (et * ep), 1.0)   # expert data parallel (folding: tp*cp*dp / (etp*ep))
    n_in_d, n_in_e = n_d / b_dp, n_e / x_exp
    is_fsdp, is_hsdp = fl == F_FSDP, fl == F_HSDP
    dp_groups = dp_comm_groups(k, p, batch, xp, t, lay)
    ar, xar, rs, xrs, ag, xag, rs_in, ag_in, hs_x, hxs, calls_d, gcalls_d = sum_groups(dp_groups)

    # FSDP/HSDP shard-group collectives (parameter all-gathers at the weights' bytes, gradient
    # reduce-scatters at the reduction's: terms.dp_comm_groups), by the workload's regather policy
    # (WorkloadSpec.fsdp_regather):
    #   every_pass (ZeRO-3): per micro-batch, all-gather before forward, all-gather before
    #     backward, reduce-scatter after it;
    #   forward (FSDP2 under torch pipelining): per micro-batch an all-gather of the layers before
    #     forward (the root module, embedding and head, is not resharded after forward: FSDP2's
    #     fully_shard); once per step the backward all-gather and the reduce-scatter;
    #   never (torchtitan under PP): once per step, one all-gather and one reduce-scatter.
    # The policy is one per scenario, so it is decided once here (no per-row select); pass_gathers
    # and pass_reduces count the shard-group collectives per step that run with the micro-batches,
    # fsdp_gathers and fsdp_reduces all of them (the cross-building bytes below).
    shard_rs = xp.where(is_fsdp, rs, xp.where(is_hsdp, rs_in, 0.0))
    shard_ag = xp.where(is_fsdp, ag, xp.where(is_hsdp, ag_in, 0.0))
    rg = k.fsdp_regather
    if rg == FSDP_EVERY_PASS:   # ZeRO-3 re-gathers under full recomputation what it released
        again = xp.where(rc == R_FULL, zero3_refetch_share(k, tp, xp), 0.0) if k.fsdp_gather else 0.0
        gather_f_mb, gather_b_mb, step_rs, step_ag = shard_ag, (1.0 + again) * shard_ag + shard_rs, 0.0, 0.0
        pass_gathers, pass_reduces = (2.0 + again) * m, m
    elif rg == FSDP_FORWARD:
        P_root = k.vocab * k.h / tp * xp.where(lay.head_on_first, 2.0, 1.0)
        layer_share = (P_dense + P_exp - P_root) / (P_dense + P_exp)   # bytes share; latency terms approximated
        gather_f_mb, gather_b_mb = layer_share * shard_ag, 0.0
        step_rs, step_ag = shard_rs, shard_ag
        pass_gathers, pass_reduces = m * layer_share, 0.0
    else:
        gather_f_mb, gather_b_mb, step_rs, step_ag = 0.0, 0.0, shard_rs, shard_ag
        pass_gathers, pass_reduces = 0.0, 0.0
    step_colls = 0.0 if rg == FSDP_EVERY_PASS else 1.0     # the per-step all-gather and reduce-scatter each
    fsdp_gathers, fsdp_reduces = pass_gathers + step_colls, pass_reduces + step_colls
    per_step_grad = xp.select([fl == F_DDP, fl == F_ZERO1, is_hsdp], [ar, rs, hs_x], 0.0) + step_rs
    per_step_param = xp.where(fl == F_ZERO1, ag, 0.0) + step_ag

    # ---- pipeline point-to-point ----
    s_pp = tok * k.h * k.wire_bytes / tp
    stage_gpus = k.G_b * b_pp / pp                   # GPUs of one stage inside one building
    bw_pp_in, a_pp_in = tier_of_span(k, 2 * stage_gpus, xp)
    bw_pp_x = t.goodput_where(b_pp > 1, xp.maximum(stage_gpus, 1.0), ch_p2p, p2p_window)
    t_p2p_in = s_pp / bw_pp_in + a_pp_in
    # across buildings: NCCL send/recv, 128 KiB chunks, NCCL_STEPS in flight per channel
    ax_pp = k.x_alpha_s * stall_x_p2p
    t_p2p_x = xp.where(b_pp > 1, p2p_time(s_pp, bw_pp_x, ax_pp, ch_p2p, xp, p.nccl_overhead_scale), 0.0)
    bw_pp_x_eff = xp.minimum(bw_pp_x, p2p_window / (2.0 * ax_pp)) if k.x_rtt_s > 0 else bw_pp_x
    hops, xhops = chain_hops(sc, pp, v, b_pp, xp)
    has_pp = pp > 1
    D_chain = xp.where(has_pp, (hops - xhops) * t_p2p_in + xhops * t_p2p_x, 0.0)
    msgs = xp.where((sc == S_ZBV) | (sc == S_DUALPIPEV), 2.0, v)
    # every schedule, DualPipeV included, moves its messages through the link: the window-bound
    # rate caps the pace even where the transfer overlaps compute
    p2p_bw_bound = xp.where(has_pp, msgs * xp.maximum(s_pp / bw_pp_in, xp.where(b_pp > 1, s_pp / bw_pp_x_eff, 0.0)), 0.0)

    # ---- per-micro-batch pace of the bottleneck rank, then the whole pipeline ----
    # FSDP gathers overlap the forward and backward they feed (prefetch), or add to them; W is
    # compute only. Every stretched time is monotone in bandwidth and latency.
    def pace(tf, tb, tw, gf, gb):
        tf_p = xp.where(overlap, xp.maximum(tf, gf), tf + gf)
        tb_p = xp.where(overlap, xp.maximum(tb, gb), tb + gb)
        return tf_p, tb_p, tf_p + tb_p + tw

    if types:
        # buildings of different speeds share the work by speed (hetero.hetero_shares): the pace
        # of a rank whose compute is sp times faster and whose exchanges (gathers) scale by x (xg)
        def pace_at(sp, x=1.0, xg=None):
            xg = x if xg is None else xg
            return xp.maximum(pace(t_f_comp / sp + x * (t_f - t_f_comp), t_b_comp / sp + x * (t_b - t_b_comp),
                                   t_w_comp / sp, xg * gather_f_mb, xg * gather_b_mb)[2], p2p_bw_bound)
        f1, b1, _ = pace(t_f, t_b, t_w, gather_f_mb, gather_b_mb)
        fill = xp.where(pp > 1, bubble_time(sc, pp, v, f1, b1, t_w, xp, k.post_validation, m, xp.maximum(t_w, p2p_bw_bound - f1 - b1)), 0.0)   # fill and drain at the even pace
        speeds = row_speeds(types, pc.total, lambda kj: pass_compute(kj, p, batch, lay, xp, mb, cp, tp, ep, et, rc).total, xp)
        hs = hetero_shares(types, speeds, k.L, p, batch, m, pp, Ls, pace_at, fill, xp)
        t_f_comp, t_b_comp, t_w_comp = hs.compute * t_f_comp, hs.compute * t_b_comp, hs.compute * t_w_comp
        tp_f, tp_b, cp_f, cp_b, ep_f, ep_b, tp_f_link, tp_b_link = (hs.comm * x for x in (tp_f, tp_b, cp_f, cp_b, ep_f, ep_b,
                                                                                tp_f_link, tp_b_link))
        if k.tp_overlap:     # the overlap budget is the bottleneck rank's own GEMMs under the shares
            g, gx = hs.compute * lin_f, hs.compute * lin_x
            tp_f, tp_b = tp_exposed(tp_f_link, gx, tp, xp), tp_exposed(tp_b_link, gx + g, tp, xp)
        gather_f_mb, gather_b_mb = hs.comm * gather_f_mb, hs.comm * gather_b_mb
        t_f, t_b, t_w, T_comp, T_mb, host_gap = per_microbatch()
        hetero_plan, m_busiest = hs.plan, hs.microbatches
        per_step_grad, per_step_param = hs.dp_step * per_step_grad, hs.dp_step * per_step_param
    else:
        hetero_plan, m_busiest = (), m
    t_f_p, t_b_p, T_fsdp = pace(t_f, t_b, t_w, gather_f_mb, gather_b_mb)
    T_pace = xp.maximum(T_fsdp, p2p_bw_bound)
    # The first rank admits ``infl`` micro-batches without waiting; each later one waits for the
    # backward of the one ``infl`` before it to come back, so it starts at most one round trip
    # (every rank's work plus the chain both ways) per ``infl`` micro-batches: the steady cycle.
    # The admitted ones' latency is the fill and drain (2 D_chain). Matches the event simulator
    # exactly for 1F1B and interleaved 1F1B with cross-building delays (tests/test_simulator.py).
    infl = in_flight_microbatches(sc, pp, v, m, xp)
    round_trip = pp * T_pace + 2 * D_chain
    # 1F1B-style alternation waits at least the slowest hop per micro-batch (send_forward_recv_backward)
    hop = xp.where((sc == S_1F1B) | (sc == S_INTERLEAVED), xp.where(b_pp > 1, t_p2p_x, t_p2p_in), 0.0)
    cycle = xp.where(has_pp & (sc != S_GPIPE),
                     xp.maximum(T_pace + hop, round_trip / xp.maximum(infl, 1.0)), T_pace)
    waiting = m - infl                                # GPipe admits all m
    bubble = xp.where(has_pp, bubble_time(sc, pp, v, t_f_p, t_b_p, t_w, xp, k.post_validation, m, T_pace - t_f_p - t_b_p), 0.0)
    T_pipe = infl * T_pace + waiting * cycle + bubble + 2 * D_chain

    # ---- DP exposure once per step ----
    # hidden behind the last (first) micro-batch's backward (forward), or per model chunk under the
    # interleaved schedule behind the last (first) round (sync_windows); a host gap is window too
    win, last = sync_windows(sc, pp, v, m, xp)
    pass_f, pass_b = dp_windows(t_f_comp, t_b_comp + t_w_comp, t_f - tp_f - cp_f - ep_f, t_b + t_w_comp - tp_b - cp_b - ep_b,
                                t_f_p - gather_f_mb, t_b_p - gather_b_mb + t_w, xp)
    dp_grad_exposed = step_end_exposed(per_step_grad, pass_b, calls_d, win, last, overlap, xp)
    dp_param_exposed = step_end_exposed(per_step_param, pass_f, gcalls_d, win, last, overlap, xp)
    if k.zero1_bcast:   # InternEvo broadcasts after the step, before the next forward (overlap_sync_param off)
        dp_param_exposed = xp.where(fl == F_ZERO1, per_step_param, dp_param_exposed)
    dp_exposed = dp_grad_exposed + dp_param_exposed

    # ---- optimizer step (HBM bound) ----
    shard_d = xp.select([fl == F_ZERO1, is_fsdp, is_hsdp], [zero1_group_size(k, n_d, xp), n_d, n_in_d], 1.0)
    shard_e = xp.select([fl == F_ZERO1, is_fsdp, is_hsdp], [zero1_group_size(k, n_e, xp), n_e, n_in_e], 1.0)
    owned = P_dense / shard_d + P_exp / shard_e
    t_opt = memory_bound_time_s(owned * k.adam_traffic_bytes, k.hbm_Bps)

    # the step waits for its slowest rank (stragglers.py)
    base = T_pipe + dp_exposed + t_opt
    straggler = base * (straggler_scale(k.n_gpus, p.straggler_jitter) - 1.0)
    iteration = base + straggler

    # ---- memory per GPU (bottleneck rank; memory.memory_per_gpu) ----
    infl_mem = in_flight_microbatches(sc, pp, v, m_busiest, xp) if types else infl   # the busiest replica's
    held, fixed = memory_per_gpu(k, fl, rc, rg, owned, P_dense, P_exp, tp, ep, et, tok, Ls, Ls_dense, Ls_moe,
                                 pipe_memory(sc, pp, v, m_busiest, infl_mem, lay.head_on_first, xp), xp, offload)
    if types:          # each GPU type's ranks against their own HBM (hetero.typed_memory)
        memory, deficit = typed_memory(types, hs.memory_types, held, fixed, xp)
    else:
        memory = held + fixed
        deficit = xp.maximum(0.0, memory - k.hbm_bytes)

    # ---- FLOPs, MFU (model FLOPs, non-causal attention: PaLM / Megatron convention) ----
    tokens_step = k.global_batch * k.seq
    model_flops, recompute_flops = step_flops(k, rc, tokens_step, xp)
    denom = iteration * k.n_gpus * k.peak_precision

    # ---- breakdown (sums to the iteration time) ----
    fsdp_part = m * (T_fsdp - T_mb)
    p2p_part = m * (T_pace - T_fsdp)
    pp_latency = waiting * (cycle - T_pace) + 2 * D_chain

    # ---- bytes per GPU per step on each tier ----
    xb_dp = xp.select([fl == F_DDP, fl == F_ZERO1, is_fsdp, is_hsdp],
                      [xar, xrs + xag, fsdp_gathers * xag + fsdp_reduces * xrs, hxs], 0.0)
    # each crossing hop carries s_pp from every GPU of the sending stage (N/pp GPUs), both ways
    xb_pp = xp.where(has_pp, 2 * m * xhops * s_pp / pp, 0.0)
    xb_ep = xp.where(x_ep > 1, m * Ls_moe * ep_passes * (B - 1) / B * a2a_bytes, 0.0)
    xb_cp = xp.where(x_cp > 1, m * Ls * 3 * (cp - 1) * kv_bytes * B / cp, 0.0)
    xb_per_gpu = xb_dp + xb_pp + xb_ep + xb_cp
    nvlink_bytes = m * (2 * tp_colls + tp_rerun) * (tp - 1) / tp * s_tp   # fwd, bwd (+ recompute)
    # the experts' TP gathers and reduce-scatters: (et - 1) / et of a buffer of et a2a_bytes each
    etp_bytes = xp.where(et > 1, m * Ls_moe * ep_passes * (et - 1.0) * a2a_bytes, 0.0) if k.experts else 0.0

    acct = {"m": m, "Ls": Ls, "Ls_moe": Ls_moe, "tp": tp, "cp": cp, "ep": ep, "et": et, "pp": pp, "cp_in": cp_in, "x_cp": x_cp,
            "ep_in": ep_in, "x_ep": x_ep, "nvlink_bytes": nvlink_bytes, "kv_bytes": kv_bytes, "bw_cp": bw_cp,
            "a_cp": a_cp, "a2a_bytes": a2a_bytes, "t_a2a": t_a2a, "t_etp": t_etp, "etp_bytes": etp_bytes, "ep_passes": ep_passes, "m_ep": m_ep, "ep_nic": ep_nic, "xb_cp": xb_cp, "xb_ep": xb_ep, "xb_pp": xb_pp,
            "stage_gpus": stage_gpus, "b_pp": b_pp, "hops": hops, "xhops": xhops, "s_pp": s_pp, "msgs": msgs,
            "t_p2p_x": t_p2p_x, "t_p2p_in": t_p2p_in, "dp_groups": dp_groups, "fl": fl,
            "fsdp_gathers": fsdp_gathers, "fsdp_reduces": fsdp_reduces,
            "P_dense": P_dense, "P_exp": P_exp, "n_in_d": n_in_d, "n_in_e": n_in_e, "b_dp": b_dp, "x_exp": x_exp,
            "tp_s": m * (tp_f + tp_b), "tp_link_s": m * (tp_f_link + tp_b_link), "cp_s": m * (cp_f + cp_b), "ep_s": m * (ep_f + ep_b),
            "pp_s": p2p_part + pp_latency, "dp_step_s": dp_exposed, "dp_pass_s": fsdp_part,
            "pass_gathers": pass_gathers, "pass_reduces": pass_reduces}
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
        "pp_bubble_s": bubble,
        "pp_comm_s": p2p_part + pp_latency,
        "dp_comm_s": dp_exposed + fsdp_part,
        "optimizer_s": t_opt,
        "straggler_s": straggler,
        "xb_bytes_per_gpu": xb_per_gpu,
        "xb_bytes_per_step": xb_per_gpu * k.n_gpus,
        "nvlink_bytes_per_gpu": nvlink_bytes + etp_bytes,
        # the cross-building bytes by parallel dimension, and the step-end DP collectives' link
        # time against what of it is exposed (Calculon's link vs exposed split)
        "xb_dp_bytes_per_gpu": xb_dp, "xb_pp_bytes_per_gpu": xb_pp, "xb_ep_bytes_per_gpu": xb_ep,
        "xb_cp_bytes_per_gpu": xb_cp,
        "dp_link_s": per_step_grad + per_step_param, "dp_exposed_s": dp_exposed,
        "micro_batches": m,
        # internals for the event-level simulator (scalar path)
        "_pipe_t_f": t_f_p, "_pipe_t_b": t_b_p, "_pipe_t_w": t_w,
        "_t_p2p_in": t_p2p_in, "_t_p2p_x": t_p2p_x, "_b_pp": b_pp, "_T_pipe": T_pipe,
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

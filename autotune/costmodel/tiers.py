"""Time and bytes per network tier and parallel dimension: where a configuration's communication
runs, and how much of it the step waits for.

For every parallel dimension (TP, CP, EP, PP, DP) and network tier (NVLink; scale-out inside a
building, its pods' cross-zone tier included; the crossing tier: cross-building, or cross-region
where the buildings span regions):
- ``bytes_per_gpu``: bytes one GPU sends on that tier per step (bus bytes, NCCL's busBw
  convention: a ring all-reduce moves 2 (n-1)/n of the buffer; PP: the pipeline's hop bytes per
  GPU, as the cross-building total counts them);
- ``link_s``: seconds the dimension's transfers occupy the bottleneck GPU's links in one step,
  start-up latency included. A group's time goes to the slowest tier it spans (the tier that
  bounds its collective), except HSDP, whose inner and crossing phases are charged apart;
- ``exposed_s``: seconds the dimension adds to the step (its term of the breakdown, so the
  dimensions add up to the breakdown's communication terms); DP's exposed time is split over its
  tiers in proportion to their link time.
EP's bytes are the mean rank's (the step's totals); its link and exposed times are the busiest
rank's, which carries ``expert_load`` times the mean routed tokens (WorkloadSpec.moe_routing).
``hidden = link - exposed`` where positive: the share that overlaps compute. This is Calculon's
split of link time from exposed time (Isaev et al., SC'23), per tier. A pipeline may expose more
than its own link time: the fill and drain wait for every hop of the chain, not only the
bottleneck rank's.
"""
from __future__ import annotations

import numpy as np

from .spans import members_per_node

TIERS = ("nvlink", "scale_out", "cross_building", "cross_region")
DIMS = ("tp", "cp", "ep", "pp", "dp")
MEASURES = ("bytes_per_gpu", "link_s", "exposed_s")
T_NVLINK, T_SCALE_OUT = 0.0, 1.0


def key(dim: str, tier: str, measure: str) -> str:
    return f"tier_{dim}_{tier}_{measure}"


TIER_KEYS = tuple(key(d, t, m) for d in DIMS for t in TIERS for m in MEASURES)
_KEYS = {d: tuple(tuple(key(d, t, m) for m in MEASURES) for t in TIERS) for d in DIMS}


def in_building_tier(k, span, xp):
    """Tier code of a group spanning ``span`` consecutive GPUs inside one building: NVLink within
    a node, else scale-out, which here covers the building's cross-zone tier too."""
    return xp.where(span <= k.node, T_NVLINK, T_SCALE_OUT)


def accounting(k, a: dict, xp) -> dict:
    """The per-tier, per-dimension table of one batch (or row): ``TIER_KEYS`` -> arrays.
    ``a``: the cost model's internals for it (``iteration_formulas``' ``_acct``)."""
    x_code = float(TIERS.index(k.x_tier_name))
    acc: dict = dict.fromkeys(TIER_KEYS, 0.0)
    rows = isinstance(a["m"], np.ndarray)

    def add(dim, code, bytes_=0.0, link=0.0, exposed=0.0):
        names = _KEYS[dim]
        if not rows:                                  # one row: its one tier
            b_, l_, e_ = names[int(code)]
            acc[b_] += bytes_
            acc[l_] += link
            acc[e_] += exposed
            return
        for ti, trio in enumerate(names):
            on = code == float(ti)
            for kk, val in zip(trio, (bytes_, link, exposed)):
                if np.ndim(val) or val != 0.0:
                    acc[kk] = acc[kk] + xp.where(on, val, 0.0)

    m, Ls, Ls_moe = a["m"], a["Ls"], a["Ls_moe"]
    # TP: inside the NVLink domain, not overlapped unless the workload says tp_comm_overlap
    add("tp", T_NVLINK, a["nvlink_bytes"], a["tp_link_s"], a["tp_s"])   # exposed < link under tp_comm_overlap
    # CP: the K/V ring, 1 block per step forward and 2 backward; crossing only where cp_out
    cp = a["cp"]
    cp_total = m * Ls * 3.0 * (cp - 1.0) * a["kv_bytes"]
    cp_in_code = in_building_tier(k, a["tp"] * a["cp_in"], xp)
    add("cp", cp_in_code, bytes_=xp.maximum(cp_total - a["xb_cp"], 0.0))
    add("cp", x_code, bytes_=a["xb_cp"])
    cp_link = m * Ls * (cp - 1.0) * (3.0 * a["kv_bytes"] / a["bw_cp"] + 2.0 * a["a_cp"])
    add("cp", xp.where(a["x_cp"] > 1, x_code, cp_in_code), link=cp_link, exposed=a["cp_s"])
    # EP: dispatch and combine, forward and backward (and again where the backward recomputes them)
    ep = a["ep"]
    ep_total = m * Ls_moe * a["ep_passes"] * (ep - 1.0) / ep * a["a2a_bytes"]
    ep_in_code = in_building_tier(k, a["et"] * a["ep_in"], xp)   # EP members etp apart (iteration.py)
    # inside the building, the m_ep - 1 destinations on the GPU's own node are reached on NVLink
    ep_inside = xp.maximum(ep_total - a["xb_ep"], 0.0)
    nvl_share = xp.where(ep_in_code == T_SCALE_OUT,
                         (a["m_ep"] - 1.0) / xp.maximum(a["ep_in"] - 1.0, 1.0), 0.0)
    add("ep", T_NVLINK, bytes_=nvl_share * ep_inside)
    add("ep", ep_in_code, bytes_=(1.0 - nvl_share) * ep_inside * a["ep_nic"])   # de-duplicated: fewer
    add("ep", x_code, bytes_=a["xb_ep"])
    # the experts' TP gathers of the routed tokens (etp > 1) ride NVLink after each all-to-all; the
    # exposed EP time splits between the two tiers as their link times do
    etp_share = 0.0
    if k.experts:
        t_disp = a["t_a2a"] + a["t_etp"]
        etp_share = xp.where(t_disp > 0, a["t_etp"] / xp.maximum(t_disp, 1e-30), 0.0)
        add("ep", T_NVLINK, bytes_=a["etp_bytes"], link=m * Ls_moe * a["ep_passes"] * a["t_etp"],
            exposed=etp_share * a["ep_s"])
    add("ep", xp.where(a["x_ep"] > 1, x_code, ep_in_code), link=m * Ls_moe * a["ep_passes"] * a["t_a2a"],
        exposed=(1.0 - etp_share) * a["ep_s"])
    # PP: hop bytes of the chain; the bottleneck rank's sends, forward and backward
    has_pp = a["pp"] > 1
    pp_in_code = in_building_tier(k, 2.0 * a["stage_gpus"], xp)
    crosses = a["b_pp"] > 1
    add("pp", pp_in_code, bytes_=xp.where(has_pp, 2.0 * m * (a["hops"] - a["xhops"]) * a["s_pp"] / a["pp"], 0.0))
    add("pp", x_code, bytes_=a["xb_pp"])
    pp_link = xp.where(has_pp, 2.0 * m * a["msgs"] * xp.where(crosses, a["t_p2p_x"], a["t_p2p_in"]), 0.0)
    add("pp", xp.where(crosses, x_code, pp_in_code), link=pp_link, exposed=a["pp_s"])
    # DP: per group (dense, expert), by flavour (_dp_group). The step-end collectives' exposed
    # time and the per-micro-batch FSDP gathers' each split over their tiers by link time
    parts = [_dp_group(k, a, g, xp) for g in range(len(a["dp_groups"]))]
    for phase, exposed in (("step", a["dp_step_s"]), ("pass", a["dp_pass_s"])):
        items = [it for part in parts for it in part["time"] if it[1] == phase]
        total = 0.0
        for _, _, lk in items:
            total = total + lk
        share = xp.where(total > 0, exposed / xp.maximum(total, 1e-300), 0.0)
        for code, _, lk in items:
            add("dp", code, link=lk, exposed=lk * share)
    for part in parts:
        for code, b in part["bytes"]:
            add("dp", code, bytes_=b)
    return acc


def _dp_group(k, a, g: int, xp) -> dict:
    """One DP group's bytes and link time per tier. Per step a DDP all-reduce; ZeRO-1 a
    reduce-scatter and an all-gather; FSDP ``fsdp_gathers`` all-gathers and ``fsdp_reduces``
    reduce-scatters over the whole group (``pass_*`` of them with the micro-batches); HSDP those
    inside the replica plus an all-reduce of the shard across it. Gradients move at
    ``k.reduce_bytes`` an element (``k.fsdp_reduce_bytes`` under FSDP and HSDP), parameters at
    ``k.weight_bytes``. Bus bytes of a ring over n
    members: (n - 1) / n of the buffer per gather or reduce-scatter, twice per all-reduce; the
    cross-building share is the model's own (``xb_dp``), the rest stays inside."""
    from .terms import F_DDP, F_FSDP, F_HSDP, F_ZERO1
    d = a["dp_groups"][g]
    fl, gathers, reduces = a["fl"], a["fsdp_gathers"], a["fsdp_reduces"]
    P = a["P_dense"] if g == 0 else a["P_exp"]
    S_r = P * xp.where((fl == F_FSDP) | (fl == F_HSDP), k.fsdp_reduce_bytes, k.reduce_bytes)
    S_w = P * k.weight_bytes
    n_in, n_x = (a["n_in_d"], a["b_dp"]) if g == 0 else (a["n_in_e"], a["x_exp"])
    stride = a["tp"] if g == 0 else a["et"] * a["ep"]
    n = n_in * n_x
    frac, frac_in = (n - 1.0) / xp.maximum(n, 1.0), (n_in - 1.0) / xp.maximum(n_in, 1.0)
    is_hsdp, is_fsdp = fl == F_HSDP, fl == F_FSDP
    vol = xp.select([fl == F_DDP, fl == F_ZERO1, is_fsdp, is_hsdp],
                    [2.0 * frac * S_r, frac * (S_r + S_w), frac * (gathers * S_w + reduces * S_r),
                     frac_in * (gathers * S_w + reduces * S_r) + 2.0 * (n_x - 1.0) / n_x * S_r / xp.maximum(n_in, 1.0)],
                    0.0)
    xb = xp.select([fl == F_DDP, fl == F_ZERO1, is_fsdp, is_hsdp],
                   [d.xar, d.xrs + d.xag, gathers * d.xag + reduces * d.xrs, d.hxs], 0.0)
    pg, pr = a["pass_gathers"], a["pass_reduces"]     # FSDP / HSDP shard-group collectives with the micro-batches
    sg, sr = gathers - pg, reduces - pr
    step = xp.select([fl == F_DDP, fl == F_ZERO1, is_fsdp], [d.ar, d.rs + d.ag, sg * d.ag + sr * d.rs], 0.0)
    in_code = in_building_tier(k, stride * n_in, xp)
    x_code = float(TIERS.index(k.x_tier_name))
    whole = xp.where(n_x > 1, x_code, in_code)    # one collective over the whole group: its slowest tier
    # a ring over nodes leaves each node once per m = node / stride members (ring_tier_of_span):
    # 1/m of a member's in-building bytes go out on a NIC, the rest on NVLink
    inside = xp.maximum(vol - xb, 0.0)
    nic = xp.where(in_code == T_SCALE_OUT, 1.0 / members_per_node(k, stride, n_in, xp), 1.0)
    return {"bytes": [(in_code, nic * inside), (T_NVLINK, (1.0 - nic) * inside), (x_code, xb)],
            "time": [(whole, "step", step), (whole, "pass", xp.where(is_fsdp, pg * d.ag + pr * d.rs, 0.0)),
                     (in_code, "step", xp.where(is_hsdp, sg * d.ag_in + sr * d.rs_in, 0.0)),
                     (x_code, "step", xp.where(is_hsdp, d.hs_x, 0.0)),
                     (in_code, "pass", xp.where(is_hsdp, pg * d.ag_in + pr * d.rs_in, 0.0))]}


def nested(out: dict) -> dict:
    """{dim: {tier: {bytes_per_gpu, link_s, exposed_s, hidden_s}}} of one row's ``accounting``
    (floats), plus per-tier totals under "total"."""
    table: dict = {}
    totals = {t: [0.0, 0.0, 0.0] for t in TIERS}
    for d in DIMS:
        row_d = table[d] = {}
        for t, trio in zip(TIERS, _KEYS[d]):
            b, lk, e = (float(out[kk]) for kk in trio)
            row_d[t] = {"bytes_per_gpu": b, "link_s": lk, "exposed_s": e, "hidden_s": max(lk - e, 0.0)}
            tot = totals[t]
            tot[0] += b
            tot[1] += lk
            tot[2] += e
    table["total"] = {t: {"bytes_per_gpu": b, "link_s": lk, "exposed_s": e, "hidden_s": max(lk - e, 0.0)}
                      for t, (b, lk, e) in totals.items()}
    return table


def flat_figures(table: dict) -> dict:
    """A ``nested`` table as flat metrics for a trial and its MLflow child run: per tier the
    totals (``tier.<tier>.<measure>``) and every non-zero cell (``tier.<tier>.<dim>.<measure>``);
    tiers a configuration does not use are left out."""
    out = {}
    for t in TIERS:
        tot = table["total"][t]
        if not any(tot.values()):
            continue
        out.update({f"tier.{t}.{m}": v for m, v in tot.items()})
        for d in DIMS:
            cell = table[d][t]
            if any(cell.values()):
                out.update({f"tier.{t}.{d}.{m}": v for m, v in cell.items()})
    return out

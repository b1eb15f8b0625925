"""Data parallelism over the step: which shard-group collectives run with the micro-batches and
which once per step (``dp_schedule``), what of the step's collectives the passes beside them
leave exposed (``dp_exposure``), and the optimizer step over the shard a rank owns
(``optimizer_step``). The collectives' link times are ``terms.dp_comm_groups``'."""
from __future__ import annotations

from typing import NamedTuple

from ..specs.codes import Recompute
from .kernels import memory_bound_time_s
from .pipeline import step_end_exposed, sync_windows
from .scenario_consts import FSDP_EVERY_PASS, FSDP_FORWARD
from .terms import F_DDP, F_FSDP, F_HSDP, F_ZERO1, DPComm
from .zero1 import zero1_group_size
from .zero3 import zero3_refetch_share

R_FULL = Recompute.codes()[2]


class DPSchedule(NamedTuple):
    """The DP collectives of a step, by when they run (seconds on the link, per GPU)."""
    gather_f_mb: object    # shard-group all-gathers before one micro-batch's forward
    gather_b_mb: object    # before its backward, with its reduce-scatter (ZeRO-3)
    grad: object           # the step's gradient reduction (all-reduce, reduce-scatter, HSDP's)
    param: object          # the step's parameter all-gather (ZeRO-1, FSDP's once-per-step)
    pass_gathers: object   # shard-group all-gathers per step that run with the micro-batches
    pass_reduces: object   # shard-group reduce-scatters per step that run with the micro-batches
    gathers: object        # all shard-group all-gathers per step (the cross-building bytes)
    reduces: object        # all shard-group reduce-scatters per step


def dp_schedule(k, fl, rc, tp, m, lay, s: DPComm, xp) -> DPSchedule:
    """FSDP/HSDP shard-group collectives (parameter all-gathers at the weights' bytes, gradient
    reduce-scatters at the reduction's: ``terms.dp_comm_groups``, summed in ``s``), by the
    workload's regather policy (WorkloadSpec.fsdp_regather):

    - every_pass (ZeRO-3): per micro-batch, all-gather before forward, all-gather before
      backward, reduce-scatter after it; under full recomputation ZeRO-3 re-gathers what it
      released (``zero3.zero3_refetch_share``);
    - forward (FSDP2 under torch pipelining): per micro-batch an all-gather of the layers before
      forward (the root module, embedding and head, is not resharded after forward: FSDP2's
      fully_shard); once per step the backward all-gather and the reduce-scatter;
    - never (torchtitan under PP): once per step, one all-gather and one reduce-scatter.

    The policy is one per scenario, so it is decided once here (no per-row select). DDP
    all-reduces, ZeRO-1 reduce-scatters and all-gathers, HSDP all-reduces its shard across
    replicas, each once per step."""
    is_fsdp, is_hsdp = fl == F_FSDP, fl == F_HSDP
    shard_rs = xp.where(is_fsdp, s.rs, xp.where(is_hsdp, s.rs_in, 0.0))
    shard_ag = xp.where(is_fsdp, s.ag, xp.where(is_hsdp, s.ag_in, 0.0))
    rg = k.fsdp_regather
    if rg == FSDP_EVERY_PASS:
        again = xp.where(rc == R_FULL, zero3_refetch_share(k, tp, xp), 0.0) if k.fsdp_gather else 0.0
        gather_f_mb, gather_b_mb, step_rs, step_ag = shard_ag, (1.0 + again) * shard_ag + shard_rs, 0.0, 0.0
        pass_gathers, pass_reduces = (2.0 + again) * m, m
    elif rg == FSDP_FORWARD:
        P_root = k.vocab * k.h / tp * xp.where(lay.head_on_first, 2.0, 1.0)
        layer_share = (lay.P_dense + lay.P_exp - P_root) / (lay.P_dense + lay.P_exp)   # bytes share; latency approximated
        gather_f_mb, gather_b_mb = layer_share * shard_ag, 0.0
        step_rs, step_ag = shard_rs, shard_ag
        pass_gathers, pass_reduces = m * layer_share, 0.0
    else:
        gather_f_mb, gather_b_mb, step_rs, step_ag = 0.0, 0.0, shard_rs, shard_ag
        pass_gathers, pass_reduces = 0.0, 0.0
    step_colls = 0.0 if rg == FSDP_EVERY_PASS else 1.0     # the per-step all-gather and reduce-scatter each
    grad = xp.select([fl == F_DDP, fl == F_ZERO1, is_hsdp], [s.ar, s.rs, s.hs_x], 0.0) + step_rs
    param = xp.where(fl == F_ZERO1, s.ag, 0.0) + step_ag
    return DPSchedule(gather_f_mb, gather_b_mb, grad, param, pass_gathers, pass_reduces,
                      pass_gathers + step_colls, pass_reduces + step_colls)


def dp_exposure(k, fl, sc, pp, v, m, overlap, grad, param, s: DPComm, pass_f, pass_b, xp):
    """(gradient, parameter) seconds of the step's DP collectives left exposed: hidden behind the
    last (first) micro-batch's backward (forward), or per model chunk under the interleaved
    schedule behind the last (first) round (``pipeline.sync_windows``); ``pass_f``, ``pass_b``:
    the passes' windows (``host_floor.dp_windows``, a host gap is window too). InternEvo's
    broadcasts run after the step, before the next forward (overlap_sync_param off: ``zero1``)."""
    win, last = sync_windows(sc, pp, v, m, xp)
    grad_exposed = step_end_exposed(grad, pass_b, s.calls, win, last, overlap, xp)
    param_exposed = step_end_exposed(param, pass_f, s.gcalls, win, last, overlap, xp)
    if k.zero1_bcast:
        param_exposed = xp.where(fl == F_ZERO1, param, param_exposed)
    return grad_exposed + param_exposed


def optimizer_step(k, fl, lay, n_d, n_e, n_in_d, n_in_e, xp):
    """(parameters a rank owns, seconds of its optimizer step): Adam's HBM traffic over the shard
    it owns (``k.adam_traffic_bytes`` a parameter), the dense parameters sharded over the dense DP
    group (``n_d``; HSDP: inside the replica, ``n_in_d``; ZeRO-1: its shard group, ``zero1``) and
    the experts' over the expert DP group (``n_e``, ``n_in_e``)."""
    is_fsdp, is_hsdp = fl == F_FSDP, fl == F_HSDP
    shard_d = xp.select([fl == F_ZERO1, is_fsdp, is_hsdp], [zero1_group_size(k, n_d, xp), n_d, n_in_d], 1.0)
    shard_e = xp.select([fl == F_ZERO1, is_fsdp, is_hsdp], [zero1_group_size(k, n_e, xp), n_e, n_in_e], 1.0)
    owned = lay.P_dense / shard_d + lay.P_exp / shard_e
    return owned, memory_bound_time_s(owned * k.adam_traffic_bytes, k.hbm_Bps)

"""Bytes per GPU per step on each tier: across buildings by parallel dimension, and on NVLink."""
from __future__ import annotations

from typing import NamedTuple

from .terms import F_DDP, F_FSDP, F_HSDP, F_ZERO1


class StepBytes(NamedTuple):
    """Bytes one GPU moves in a step."""
    xb_dp: object     # across buildings: data-parallel collectives
    xb_pp: object     # across buildings: pipeline sends
    xb_ep: object     # across buildings: EP all-to-alls
    xb_cp: object     # across buildings: CP ring steps
    nvlink_tp: object   # on NVLink: the TP collectives
    nvlink_etp: object  # on NVLink: the experts' TP gathers and reduce-scatters

    @property
    def xb(self):
        return self.xb_dp + self.xb_pp + self.xb_ep + self.xb_cp


def step_bytes(k, fl, m, tp, cp, pp, lay, dps, s, pl, tpt, cpt, ept, et, xp) -> StepBytes:
    """Each collective's crossing bytes (``terms.dp_comm_groups``, ``s`` summed) times how often it
    runs (``dps``: ``dp_step.DPSchedule``). Each crossing pipeline hop carries s_pp from every GPU
    of the sending stage (N / pp GPUs), both ways; an EP all-to-all across B buildings sends
    (B - 1) / B of its bytes out; a CP ring across buildings moves the K/V blocks (forward 1,
    backward 2) of the cp - 1 steps, B / cp of them crossing. On NVLink: the TP collectives of the
    forward, the backward and its recomputation, (tp - 1) / tp of the buffer each; and the experts'
    TP gathers and reduce-scatters, (et - 1) / et of a buffer of et all-to-all buffers each."""
    B = k.B
    xb_dp = xp.select([fl == F_DDP, fl == F_ZERO1, fl == F_FSDP, fl == F_HSDP],
                      [s.xar, s.xrs + s.xag, dps.gathers * s.xag + dps.reduces * s.xrs, s.hxs], 0.0)
    xb_pp = xp.where(pp > 1, 2 * m * pl.xhops * pl.s_bytes / pp, 0.0)
    a2a_bytes = ept.d.a2a_bytes
    xb_ep = xp.where(lay.x_ep > 1, m * lay.Ls_moe * ept.passes * (B - 1) / B * a2a_bytes, 0.0)
    xb_cp = xp.where(lay.x_cp > 1, m * lay.Ls * 3 * (cp - 1) * cpt.kv_bytes * B / cp, 0.0)
    nvlink = m * (2 * tpt.colls + tpt.rerun) * (tp - 1) / tp * tpt.s_bytes
    etp = xp.where(et > 1, m * lay.Ls_moe * ept.passes * (et - 1.0) * a2a_bytes, 0.0) if k.experts else 0.0
    return StepBytes(xb_dp, xb_pp, xb_ep, xb_cp, nvlink, etp)

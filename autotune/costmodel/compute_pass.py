"""Compute of one micro-batch's forward, backward and weight-gradient passes on the bottleneck
rank (no exchanges), from the per-layer kernel times of ``terms.compute_terms``."""
from __future__ import annotations

from typing import NamedTuple

from ..specs.codes import Recompute
from . import constants as C
from .pipe_time import stage_tier
from .scenario_consts import LAYOUT_EVEN
from .terms import ComputeTerms, compute_terms

R_NONE, R_SELECTIVE, R_FULL = Recompute.codes()


class PassCompute(NamedTuple):
    """Seconds per micro-batch on the bottleneck rank; ``ct`` holds the per-layer kernel times."""
    ct: ComputeTerms
    lin_f: object    # forward GEMMs, whole
    lin_x: object    # forward GEMMs as TP comm overlap splits them (lin_f without it)
    lin_xb: object   # input-gradient GEMMs as TP comm overlap splits them (lin_f without it)
    core_f: object   # attention core, forward
    t_f: object      # forward compute
    t_b: object      # backward compute (input gradients, recomputation)
    t_w: object      # weight-gradient GEMMs
    loss_floor: object = 0.0   # seconds a micro-batch takes on the loss's own rank (nanotron's split), else 0

    @property
    def total(self):
        return self.t_f + self.t_b + self.t_w


def pass_compute(k, p, batch, lay, xp, mb, cp, tp, ep, et, rc) -> PassCompute:
    """Layer kernel times (``compute_terms``, once per distinct micro-batch, cp, tp, ep and etp)
    times the rank's layers (``lay``: dense and MoE layers). Forward: GEMMs + attention core +
    element-wise passes (MoE permutation on MoE layers) + the head and its loss; weight gradients: one GEMM
    per forward GEMM; backward: the input-gradient GEMMs, the attention core's backward
    (``attention_backward_time_ratio`` x forward), the element-wise passes again and the
    recomputed forward (full: all of it; selective: the modules of WorkloadSpec.recompute_modules,
    by default the attention core). All scaled by the
    framework class (``k.compute_scale``, WorkloadSpec.framework). The bottleneck rank is the
    heavier of the head's rank (``lay.Ls_last`` layers and the head) and the rank with the most
    layers (``lay.Ls``; the same rank in the even layout, see ``terms.layers_on_rank``)."""
    ct = ComputeTerms(*xp.by_key((batch["micro_batch"], batch["cp"], batch["tp"], batch["ep"], batch.get("etp", 0)),
                                 lambda mb_, cp_, tp_, ep_, et_: tuple(compute_terms(k, p, mb_, cp_, tp_, ep_, et_, xp)),
                                 mb, cp, tp, ep, et))
    Ls, Ls_dense, Ls_moe = lay.Ls, lay.Ls_dense, lay.Ls_moe
    lin_f = Ls_dense * (ct.attn_lin + ct.mlp_dense) + Ls_moe * (ct.attn_lin + ct.moe_lin)
    # forward and input-gradient GEMMs run in pieces under TP comm overlap (kernels.te_pieces),
    # weight gradients whole
    if k.tp_overlap:
        lin_x = Ls_dense * (ct.attn_lin_split + ct.mlp_dense_split) + Ls_moe * (ct.attn_lin_split + ct.moe_lin)
        lin_xb = Ls_dense * (ct.attn_lin_split_b + ct.mlp_dense_split_b) + Ls_moe * (ct.attn_lin_split_b + ct.moe_lin)
    else:
        lin_x = lin_xb = lin_f
    core_f = Ls * ct.core
    elem_f = Ls * ct.elem + Ls_moe * ct.moe_permute
    t_head, loss_f, loss_b = ct.head, ct.loss_f, ct.loss_b
    # selective recomputation: the attention core where core_attn is among the modules, plus the
    # other modules' forward again (terms.compute_terms' rc_dense, rc_moe)
    sel_core = 1.0 if "core_attn" in k.rc_modules else 0.0
    sel_rest = Ls_dense * ct.rc_dense + Ls_moe * ct.rc_moe
    fw = k.compute_scale
    split = k.tp_overlap            # without TP overlap lin_x and lin_xb are lin_f: computed once
    if fw != 1.0:
        lin_f, core_f, elem_f, t_head = fw * lin_f, fw * core_f, fw * elem_f, fw * t_head
        lin_x, lin_xb = (fw * lin_x, fw * lin_xb) if split else (lin_f, lin_f)
        loss_f, loss_b, sel_rest = fw * loss_f, fw * loss_b, fw * sel_rest
    # the rank beside the head runs Ls_last layers and the head; the rank with the most layers,
    # Ls and no head (the same rank where the layout gives the head's stage a full share)
    if k.pp_layout == LAYOUT_EVEN:      # the head's rank is the rank with the most layers
        lin_f_h, lin_x_h, lin_xb_h, core_f_h, elem_f_h, sel_rest_h = lin_f, lin_x, lin_xb, core_f, elem_f, sel_rest
    else:
        r = lay.Ls_last / Ls
        lin_f_h, core_f_h, elem_f_h, sel_rest_h = r * lin_f, r * core_f, r * elem_f, r * sel_rest
        lin_x_h, lin_xb_h = (r * lin_x, r * lin_xb) if split else (lin_f_h, lin_f_h)
    # GShard einsum dispatch (ct.moe_einsum, twice in moe_lin): the dispatch's mask is constant, so
    # the backward has the two input gradients and only the combine's weights' gradient
    ein_w = fw * Ls_moe * ct.moe_einsum
    ein_w_h = ein_w if k.pp_layout == LAYOUT_EVEN else lay.Ls_last / Ls * ein_w
    full, sel = rc == R_FULL, rc == R_SELECTIVE
    # the loss runs beside the head unless nanotron's split puts it on another rank (lay.loss)
    lb = lay.loss
    with_head = xp.where(lb.Ls_loss < 0, 1.0, 0.0) if k.loss_blocks else 1.0
    layers_f = lin_x_h + core_f_h + elem_f_h
    t_f = layers_f + t_head + with_head * loss_f
    t_w = lin_f_h + t_head - ein_w_h
    # full recomputation re-runs the transformer layers' forward, not the head or the loss
    # (Megatron's --recompute-granularity full checkpoints the layers only)
    recompute_extra = xp.where(full, layers_f, xp.where(sel, sel_core * core_f_h + sel_rest_h, 0.0))
    t_b = lin_xb_h + t_head + p.attention_backward_time_ratio * core_f_h + elem_f_h + recompute_extra + with_head * loss_b
    if k.pp_layout == LAYOUT_EVEN:
        return PassCompute(ct, lin_f_h, lin_x_h, lin_xb_h, core_f_h, t_f, t_b, t_w)
    t_f_m = lin_x + core_f + elem_f
    t_b_m = lin_xb + p.attention_backward_time_ratio * core_f + elem_f \
        + xp.where(full, t_f_m, xp.where(sel, sel_core * core_f + sel_rest, 0.0))
    head = t_f + t_b + t_w >= t_f_m + t_b_m + lin_f - ein_w
    lin_f_sel = xp.where(head, lin_f_h, lin_f)
    lin_x_sel, lin_xb_sel = ((xp.where(head, lin_x_h, lin_x), xp.where(head, lin_xb_h, lin_xb)) if split
                             else (lin_f_sel, lin_f_sel))
    # nanotron's cast and loss on ranks of their own (lay.loss): the loss's rank runs its layers and
    # the loss; the head's rank sends each micro-batch's logits (tok x vocab / tp, activation
    # dtype) to the cast's, which sends them in fp32 to the loss's where that is another rank, and
    # the gradients come back the same way. Each such rank or link, whichever is longest, floors
    # the pipeline's pace, as the activations' link does (pipe_time.pp_links): the transfers
    # overlap the ranks' compute (the Playbook's 1B at pp 8 leaves 29 ms a micro-batch for a 24 ms
    # hop each way, so its sends and receives cannot run one after the other); the links are those
    # of two adjacent stages inside a building (pipe_time.stage_tier)
    if not k.loss_blocks:
        floor = 0.0
    else:
        r_l = xp.maximum(lb.Ls_loss, 0.0) / Ls
        _, bw_pp, a_pp = stage_tier(k, lay.b_pp, xp.asfloat(batch["pp"]), xp)
        logits = mb * k.seq / cp * k.vocab / tp
        t16, t32 = logits * k.wire_bytes / bw_pp + a_pp, logits * C.FP32_BYTES / bw_pp + a_pp
        loss_rank = (1.0 - with_head) * (r_l * (t_f_m + t_b_m + lin_f - ein_w) + loss_f + loss_b)
        floor = xp.maximum(loss_rank, xp.maximum(lb.hop16 * t16, lb.hop32 * t32))
    return PassCompute(ct, lin_f_sel, lin_x_sel, lin_xb_sel,
                       xp.where(head, core_f_h, core_f), xp.where(head, t_f, t_f_m), xp.where(head, t_b, t_b_m),
                       xp.where(head, t_w, lin_f - ein_w), floor)

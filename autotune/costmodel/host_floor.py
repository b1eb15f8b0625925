"""The host floor: a pass cannot end before the host has launched its kernels (docs/cost_model.md)."""
from __future__ import annotations

from ..specs.codes import Recompute
from . import constants as C
from .pipeline import S_DUALPIPEV, S_ZB1P, S_ZB2P, S_ZBV

R_FULL = Recompute.codes()[2]


def host_launch_time(k, Ls, Ls_dense, Ls_moe, tp, cp, rc, xp):
    """(forward, input-gradient, weight-gradient) host seconds to launch one micro-batch's kernels
    on the bottleneck rank, or (None, None, None) without a host floor (``CostParams.host_layer_fwd_us`` 0).

    Kernel launches are asynchronous: the host runs ahead of the GPU, and a pass takes the longer
    of the GPU's work and the host's launches (the launch-bound regime of small kernels; CUDA
    graphs exist to remove it). Forward: per layer the dense or MoE layer's kernels plus, at
    tp > 1, its TP collectives and, at cp > 1, cp - 1 ring steps (``constants.HOST_KERNELS_*``); backward:
    ``HOST_BACKWARD_OVER_FORWARD`` x that, of which ``HOST_WGRAD_SHARE_OF_BACKWARD`` launches the
    weight gradients and the rest, with the forward again under full recomputation, the input
    gradients. The head and loss's few launches are left out."""
    if k.host_s_dense <= 0.0:
        return None, None, None
    fwd = Ls_dense * k.host_s_dense + Ls_moe * k.host_s_moe \
        + Ls * (xp.where(tp > 1, k.host_s_tp, 0.0) + (cp - 1.0) * k.host_s_cp_step)
    bwd = C.HOST_BACKWARD_OVER_FORWARD * fwd
    bwd_w = C.HOST_WGRAD_SHARE_OF_BACKWARD * bwd
    return fwd, bwd - bwd_w + xp.where(rc == R_FULL, fwd, 0.0), bwd_w


def offload_floors(k, host_f, host_b, host_w, off_mb, xp):
    """The host floors with fine-grained activation offloading's copies (``memory.offload_bytes``):
    a micro-batch's offloaded bytes leave over the host link (HardwareSpec.host_link_Bps at
    ``constants.HOST_LINK_EFFICIENCY``) during its forward and return before its backward, on a copy
    stream beside the compute, so in steady state each pass lasts at least its copies (Megatron-Core
    caps the copies in flight and waits for them). Unchanged without offloading. Approximations:
    the copies' HBM traffic and the NIC's share of a PCIe link are not charged."""
    if not k.offload:
        return host_f, host_b, host_w
    copy_s = off_mb / (k.host_link_Bps * C.HOST_LINK_EFFICIENCY)
    if host_f is None:
        return copy_s, copy_s, 0.0
    return xp.maximum(host_f, copy_s), xp.maximum(host_b, copy_s), host_w


def host_gaps(f_, b_, w_, host_f, host_b, host_w, sched, xp):
    """(forward, input-gradient, weight-gradient, gap): a micro-batch's three passes lengthened where
    the host's launches for them outlast their work, and the sum of the lengthenings; unchanged
    without a floor (``host_f`` None). The zero-bubble schedules (ZB-H1, ZB-H2, ZBV, DualPipeV) run
    the weight gradients apart, so each of their passes is floored on its own; every other schedule
    runs input and weight gradients as one backward, floored as one (its gap lands on the input
    gradient, which it is counted with)."""
    if host_f is None:
        return f_, b_, w_, 0.0
    apart = (sched == S_ZB1P) | (sched == S_ZB2P) | (sched == S_ZBV) | (sched == S_DUALPIPEV)
    gap_f = xp.maximum(0.0, host_f - f_)
    gap_b = xp.where(apart, xp.maximum(0.0, host_b - b_), xp.maximum(0.0, host_b + host_w - b_ - w_))
    gap_w = xp.where(apart, xp.maximum(0.0, host_w - w_), 0.0)
    return f_ + gap_f, b_ + gap_b, w_ + gap_w, gap_f + gap_b + gap_w


def dp_windows(comp_f, comp_b, busy_f, busy_b, free_f, free_b, xp):
    """(forward, backward) pass time a step-end DP collective can hide behind: the pass's compute
    (``comp_*``) plus its host gap (``busy_*``, the pass without its exposed TP/CP/EP exchanges,
    is compute plus gap; the weight pass's own gap is left out: the zero-bubble forms absorb it in
    the bubble, so it does not lengthen the step), but no more of the gap than the FSDP gathers
    leave the link free (``free_*``: the paced pass less its gathers); the gap of a gather-bound
    pass sits under the gather, and counting it would let a slower host shorten the step."""
    return (xp.minimum(xp.maximum(comp_f, busy_f), xp.maximum(comp_f, free_f)),
            xp.minimum(xp.maximum(comp_b, busy_b), xp.maximum(comp_b, free_b)))

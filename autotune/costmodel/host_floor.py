"""The host floor: a pass cannot end before the host has launched its kernels (docs/cost_model.md)."""
from __future__ import annotations

from ..specs.codes import Recompute
from . import constants as C

R_FULL = Recompute.codes()[2]


def host_launch_time(k, Ls, Ls_dense, Ls_moe, tp, cp, rc, xp):
    """(forward, backward) host seconds to launch one micro-batch's kernels on the bottleneck
    rank, or (None, None) without a host floor (``CostParams.host_layer_fwd_us`` 0).

    Kernel launches are asynchronous: the host runs ahead of the GPU, and a pass takes the longer
    of the GPU's work and the host's launches (the launch-bound regime of small kernels; CUDA
    graphs exist to remove it). Forward: per layer the dense or MoE layer's kernels plus, at
    tp > 1, its TP collectives and, at cp > 1, cp - 1 ring steps (``constants.HOST_KERNELS_*``); backward:
    ``HOST_BACKWARD_OVER_FORWARD`` x that, plus the forward again under full recomputation. The
    head and loss's few launches are left out."""
    if k.host_s_dense <= 0.0:
        return None, None
    fwd = Ls_dense * k.host_s_dense + Ls_moe * k.host_s_moe \
        + Ls * (xp.where(tp > 1, k.host_s_tp, 0.0) + (cp - 1.0) * k.host_s_cp_step)
    bwd = C.HOST_BACKWARD_OVER_FORWARD * fwd + xp.where(rc == R_FULL, fwd, 0.0)
    return fwd, bwd


def host_gaps(f_, b_, t_w, host_f, host_b, xp):
    """(forward, backward, gap): a micro-batch's forward and backward (``t_w`` the weight-gradient
    time that follows it) lengthened where the host's launches outlast their work, and the sum of
    both lengthenings; unchanged without a floor (``host_f`` None)."""
    if host_f is None:
        return f_, b_, 0.0
    gap_f = xp.maximum(0.0, host_f - f_)
    gap_b = xp.maximum(0.0, host_b - b_ - t_w)
    return f_ + gap_f, b_ + gap_b, gap_f + gap_b

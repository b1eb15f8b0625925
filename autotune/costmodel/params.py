"""Calibrated efficiency parameters: few, physical, fit on published runs (not per row)."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache
from importlib import resources

import yaml


@dataclass(frozen=True)
class CostParams:
    """Achievable-efficiency curve and communication efficiency.

    GEMM efficiency (fraction of dense peak) as a saturating function of the GEMM's arithmetic
    intensity I (FLOP per byte of operands): ``eff = gemm_efficiency_max * I / (I^n + (k *
    ridge)^n)^(1/n)`` with ridge = peak FLOP/s / HBM B/s of the GPU (the roofline ridge point;
    Williams et al. 2009), k = gemm_half_intensity_ridge_ratio, n = gemm_knee_sharpness.
    """

    gemm_efficiency_max: float = 0.75
    gemm_half_intensity_ridge_ratio: float = 1.0
    gemm_knee_sharpness: float = 1.0
    """Exponent n of the GEMM efficiency's knee: ``eff = gemm_efficiency_max * I / (I^n + (k *
    ridge)^n)^(1/n)`` (``kernels.gemm_efficiency``). 1 is the hyperbola I / (I + k ridge); larger n
    bends more sharply from bandwidth-bound to compute-bound, towards the roofline min(1, I / (k
    ridge)) as n grows. Measured on the H100's expert GEMMs (64-4,096 tokens an expert): with n = 1
    no k fits both ends (the fit held 256-token GEMMs 30-47% too slow and 64-token ones 10-15% too
    fast)."""
    isolated_gemm_knee_sharpness: float = 1.0
    isolated_gemm_half_intensity_ridge_ratio: float = 1.0
    """The GEMM curve's knee (n) and half-intensity (k) of kernels run alone, back to back, where
    ``gemm_knee_sharpness`` and ``gemm_half_intensity_ridge_ratio`` describe a GEMM inside a
    training step. Used only for what cutting a GEMM into pieces costs, a ratio of two isolated
    kernels (``kernels.split_gemm_ratio``: TP comm overlap's chunks). Held at the H100 kernels' fit
    with the knee free (``autotune kernels --fit --free-knee``: n = 2.48, k = 0.819); the H200's
    measured chunk ratios (never fit on) agree with it better than with the in-step curve
    (``validation.held.KERNEL_SHAPES``). Equal to the in-step values: one curve for both."""
    attention_core_efficiency: float = 0.45
    attention_head_dim_half: float = 0.0
    """Head dimension at which the attention core runs at half ``attention_core_efficiency``:
    efficiency x d / (d + this). Smaller heads feed the tensor cores thinner matmuls (on H100,
    head_dim 64 runs at ~0.72x the TFLOP/s of 128). 0: no head-size effect."""
    attention_seq_half: float = 0.0
    """Query-chunk length (tokens per sequence on one rank: seq / cp) at which the attention
    core runs at half its efficiency: efficiency x L / (L + this); short chunks amortise the
    kernel's prologue over fewer tiles. 0: no length effect."""
    attention_backward_time_ratio: float = 2.0
    """Backward of the attention core over its forward, in time. 2.0 counts FLOPs only (dQ, dK,
    dV: twice the forward's matmuls); FlashAttention's backward also recomputes the scores and
    runs at lower efficiency: about 4.1 on H100 (``autotune kernels --fit``)."""
    fp8_gemm_speedup_realised: float = 0.65
    """Fraction of the 2x fp8 peak that fp8 GEMMs realise (quantisation, amax, bf16 remainder)."""
    framework_efficiency_deepspeed: float = 1.0
    """Compute speed of a framework class's training step relative to the same kernels run in
    isolation (the GEMM and attention levels, held at the H100 kernel measurements), all layer
    compute scaled by it (WorkloadSpec.framework): launch gaps, synchronisation and,
    in eager PyTorch, more and smaller kernels (unfused norms, activations, rotary,
    cross-entropy). Megatron-Core's fused kernels are a class of their own
    (``framework_efficiency_megatron``). Fitted per class on the published runs of that class; a
    class with no runs, and ``other`` always, takes the geometric mean of the fitted non-Megatron
    classes (``validation.fit.with_framework_prior``)."""
    framework_efficiency_megatron: float = 1.0
    framework_efficiency_pytorch: float = 1.0
    framework_efficiency_nanotron: float = 1.0
    framework_efficiency_jax: float = 1.0
    framework_efficiency_other: float = 1.0
    gpu_generation_efficiency_hopper: float = 1.0
    """Tensor-core throughput a Hopper GPU (SM 9.x) sustains, as a fraction of its datasheet peak,
    relative to the kernel-measured levels (``gemm_efficiency_max``, ``attention_core_efficiency``),
    which were measured on a Hopper GPU, an H100 SXM at 700 W (``data/h100``): held at 1.0, so the
    H100 kernels are predicted from the kernel parameters alone, whatever a fit on training runs
    finds. It scales the compute peaks, not HBM bandwidth."""
    gpu_generation_efficiency_ampere: float = 1.0
    """The same for Ampere and older (SM below 9: A100, V100), fitted on the published runs. Cause:
    the power cap. The H100 SXM measured at 700 W (``data/h100/README.md``, sustained GEMM) runs
    large GEMMs at 1,335-1,470 MHz of the 1,980 MHz boost clock its datasheet peak assumes, ~0.71
    of it; an A100 holds close to its 1,410 MHz boost, so it sustains more of its datasheet peak.
    One level for all generations made A100 runs too slow wherever H100 runs dominated a fit and
    the reverse."""
    gpu_generation_efficiency_blackwell: float = 1.0
    """The same for Blackwell (SM 10.x: B200, GB200), fitted on the published runs."""
    network_efficiency: float = 0.8
    """Achieved collective bus bandwidth over NIC bandwidth on scale-out tiers (NCCL busbw)."""
    nvlink_efficiency: float = 0.8
    """Achieved collective bus bandwidth over NVLink bandwidth (nccl-tests on DGX: ~75-85%)."""
    nccl_overhead_scale: float = 1.0
    """Multiplies NCCL's software latencies (per-call base latency and per-step overhead, from its
    own tuning.cc tables, ``nccl.py``); 0 models a library with no software cost."""
    straggler_jitter: float = 0.0
    """Relative standard deviation of one rank's step time (throttling, OS and launch jitter). A
    synchronous step waits for the slowest of its n ranks: it takes 1 + straggler_jitter *
    E[max of n standard normals] times the model's time (``stragglers.py``; ~sqrt(2 ln n)).
    0: no straggler effect."""
    host_layer_fwd_us: float = 0.0
    """Host (CPU) time to issue one dense layer's forward (fused attention, no TP), microseconds:
    the framework's Python frames, hooks and synchronisations, the autograd and ATen dispatchers
    and cudaLaunchKernel for its kernels (fitted on the runs at about 1.9 ms, far above launch
    latency alone: docs/cost_model.md). Launches are asynchronous, so the host runs ahead of the GPU,
    but a pass cannot finish before the host has issued it: a micro-batch's forward (backward)
    takes at least its layers' host time (``host_floor.host_launch_time``), which binds where
    kernels are small (small models, high TP, short micro-batches, fast GPUs). Other parts weigh
    in by kernel count (``constants.HOST_KERNELS_*``). 0: no host floor."""
    dropless_expert_imbalance: float = 1.1
    """Routed-token load of the busiest expert-parallel rank over the mean under dropless routing
    (WorkloadSpec.moe_routing = dropless): its experts' GEMMs, activations and all-to-all traffic,
    which every other rank waits for at the combine. 1.1 where no run pairs the two routings
    (assumed: DeepSeek-V3 and Mixtral report near-balanced routing with their balancing losses);
    otherwise estimated from the runs listed both ways, forced-balance and dropless, from their
    step-time ratios alone (``validation.fit.fit_imbalance``). Capacity-factor routing caps it
    at the factor, forced balancing (benchmark runs) at 1."""
    dp_collective_scale: float = 1.0
    """Multiplies every data-parallel collective's time; 0 drops them (the transport-free lower
    bound of ``costmodel.bounds``, never a calibration)."""

    integer_shares: float = 1.0
    """1: buildings of different speeds take whole micro-batches and whole layers (``hetero_split``);
    0: continuous shares, a lower bound on the same time (``costmodel.bounds``, never a calibration)."""

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def with_values(self, **kw) -> "CostParams":
        return replace(self, **kw)

    def key(self) -> str:
        """A short stable identity of the values (cache and folder names)."""
        import hashlib
        import json
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:8]

    def to_dict(self) -> dict:
        return asdict(self)


@lru_cache(maxsize=1)
def default_params() -> CostParams:
    """The shipped calibration (``autotune/data/calibration.yaml``), else the defaults."""
    f = resources.files("autotune.data").joinpath("calibration.yaml")
    if not f.is_file():
        return CostParams()
    data = yaml.safe_load(f.read_text()) or {}
    return CostParams(**{k: float(v) for k, v in (data.get("params") or {}).items() if k in CostParams.names()})


ZERO_ALLOWED = frozenset({"gemm_half_intensity_ridge_ratio", "isolated_gemm_half_intensity_ridge_ratio",
                          "attention_head_dim_half", "attention_seq_half",
                          "fp8_gemm_speedup_realised", "nccl_overhead_scale", "dp_collective_scale",
                          "straggler_jitter"})
"""Parameters for which 0 means something (no effect, no cost); the others divide a time."""
AT_LEAST_ONE = frozenset({"gemm_knee_sharpness", "isolated_gemm_knee_sharpness"})
"""The GEMM curve's knees: 1 is the hyperbola, larger bends more sharply (``kernels.gemm_efficiency``);
below 1 the curve's powers overflow for tiny exponents, and no kernel fit goes there."""


def load_params_file(path: str) -> CostParams:
    """A parameter file as ``autotune validate --fit --write`` writes it (a ``params:`` mapping,
    or the mapping itself): every key a CostParams field, every value a finite number; fields
    it leaves out keep the shipped calibration's values, except that a file stating the GEMM level
    without ``framework_efficiency_megatron`` (every calibration written before that field, whose
    GEMM level carried Megatron's overhead) keeps Megatron at 1.0, the reference it was fit with,
    and a file stating the GEMM level or Hopper's generation factor without
    ``gpu_generation_efficiency_ampere`` (every calibration written before the sixteenth session,
    when Ampere was the reference) keeps Ampere at 1.0, and a file stating the in-step GEMM curve
    without its isolated twin (every calibration written before the eighteenth session: one curve
    for both) uses that curve for both. One-line UserInputError otherwise."""
    import math

    from ..errors import UserInputError
    from ..yamlsafe import load_file
    data = load_file(path, "--params")
    if isinstance(data, dict) and isinstance(data.get("params"), dict):
        data = data["params"]
    if not isinstance(data, dict) or not data:
        raise UserInputError("--params", path, "a YAML mapping of cost-model parameters (as validate --fit --write "
                             "writes it: params: {name: value})")
    names = CostParams.names()
    out = {}
    for k, v in data.items():
        if k not in names:
            raise UserInputError(f"--params {path}: {k}", v, "a parameter among " + ", ".join(names))
        zero_ok = k in ZERO_ALLOWED
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (v == 0 and not zero_ok):
            raise UserInputError(f"--params {path}: {k}", v, "a finite number >= 0" if zero_ok else "a finite number > 0")
        if k in AT_LEAST_ONE and v < 1:
            raise UserInputError(f"--params {path}: {k}", v, "a finite number >= 1 (1: the hyperbola)")
        out[k] = float(v)
    if "gemm_efficiency_max" in out and "framework_efficiency_megatron" not in out:
        out["framework_efficiency_megatron"] = 1.0
    if ({"gemm_efficiency_max", "gpu_generation_efficiency_hopper"} & set(out)
            and "gpu_generation_efficiency_ampere" not in out):
        out["gpu_generation_efficiency_ampere"] = 1.0
    for run_curve, isolated in (("gemm_knee_sharpness", "isolated_gemm_knee_sharpness"),
                                ("gemm_half_intensity_ridge_ratio", "isolated_gemm_half_intensity_ridge_ratio")):
        if run_curve in out and isolated not in out:
            out[isolated] = out[run_curve]
    return default_params().with_values(**out)

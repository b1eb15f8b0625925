"""Hardware spec: one GPU type and its node (NVLink domain)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


MIN_BANDWIDTH_Bps = 1e3
"""Slowest link a spec may state (1 kB/s): below it a step takes years and the arithmetic
degenerates (5e-324 B/s divided into bytes overflows)."""
MAX_BANDWIDTH_Bps = 1e15
"""Fastest link a spec may state (1 PB/s, ~1,000x an NVLink 5 port); larger is a typo."""
MIN_FLOPS = 1e6
MAX_FLOPS = 1e18
"""Dense FLOP/s bounds of one device (a CPU core to ~500x a B200)."""


class HardwareSpec(BaseModel):
    """Per-GPU numbers of one accelerator type. Every number is per GPU and names its unit."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = "custom"
    peak_flops_bf16: float = Field(ge=MIN_FLOPS, le=MAX_FLOPS, description="dense bf16/fp16 FLOP/s")
    peak_flops_fp8: float = Field(ge=0, le=MAX_FLOPS, description="dense fp8 FLOP/s; 0 = no fp8 support")
    peak_flops_fp32: float = Field(default=0.0, ge=0, le=MAX_FLOPS, description="dense FLOP/s of fp32 training "
                                   "(TF32 tensor cores on GPUs); 0 = half the bf16 peak")
    hbm_bytes: float = Field(ge=2**20, le=2**50)
    hbm_bandwidth_Bps: float = Field(ge=MIN_BANDWIDTH_Bps, le=MAX_BANDWIDTH_Bps)
    nvlink_domain_gpus: int = Field(gt=0, le=576)
    nvlink_bandwidth_Bps: float = Field(ge=MIN_BANDWIDTH_Bps, le=MAX_BANDWIDTH_Bps, description="per GPU, one direction")
    nvlink_latency_s: float = Field(default=2e-6, ge=0)
    nic_bandwidth_Bps: float = Field(ge=MIN_BANDWIDTH_Bps, le=MAX_BANDWIDTH_Bps, description="scale-out NIC per GPU, one direction")
    host_link_Bps: float = Field(default=64.0e9, ge=MIN_BANDWIDTH_Bps, le=MAX_BANDWIDTH_Bps, description="GPU to host "
                                 "memory per GPU, one direction (activation offloading, WorkloadSpec.offload_modules); "
                                 "default a PCIe 5.0 x16 link's 64 GB/s")
    nccl_ll128: bool = Field(default=True, description="NCCL's LL128 protocol runs on this node: NVLink inside, "
                             "SM70 or newer (tuning.cc enables it only there); false for CPU ranks (gloo)")
    async_launch: bool = Field(default=True, description="work is launched asynchronously by a host that runs "
                               "ahead (GPUs), so a layer pass takes at least its host time (CostParams."
                               "host_layer_fwd_us); false for a CPU device, which runs its work on the calling "
                               "thread (its Python cost is in its fitted peak)")
    compute_capability: float = Field(default=9.0, ge=0, le=99, description="CUDA SM version; mixed versions "
                                      "below 9.0 disable LL128 (tuning.cc)")
    source: str = ""

    @model_validator(mode="after")
    def _check(self) -> "HardwareSpec":
        if self.peak_flops_fp8 and self.peak_flops_fp8 < self.peak_flops_bf16:
            raise ValueError("peak_flops_fp8 must be 0 (unsupported) or >= peak_flops_bf16")
        return self

    def peak_flops(self, precision: str) -> float:
        """Dense peak of a precision. fp32 defaults to half the bf16 peak: TF32 is exactly half of
        dense bf16 on A100 (156 / 312 TFLOP/s) and H100 SXM (495 / 989), NVIDIA datasheets."""
        if precision == "fp8":
            return self.peak_flops_fp8
        if precision == "fp32":
            return self.peak_flops_fp32 or self.peak_flops_bf16 / 2
        return self.peak_flops_bf16

    @property
    def ridge_flops_per_byte(self) -> float:
        """Roofline ridge point: FLOPs per HBM byte at which compute and memory balance."""
        return self.peak_flops_bf16 / self.hbm_bandwidth_Bps

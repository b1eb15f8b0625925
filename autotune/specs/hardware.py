"""Hardware spec: one GPU type and its node (NVLink domain)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class HardwareSpec(BaseModel):
    """Per-GPU numbers of one accelerator type. Every number is per GPU and names its unit."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "custom"
    peak_flops_bf16: float = Field(gt=0, description="dense bf16/fp16 FLOP/s")
    peak_flops_fp8: float = Field(ge=0, description="dense fp8 FLOP/s; 0 = no fp8 support")
    hbm_bytes: float = Field(gt=0)
    hbm_bandwidth_Bps: float = Field(gt=0)
    nvlink_domain_gpus: int = Field(gt=0, le=576)
    nvlink_bandwidth_Bps: float = Field(gt=0, description="per GPU, one direction")
    nvlink_latency_s: float = Field(default=2e-6, ge=0)
    nic_bandwidth_Bps: float = Field(gt=0, description="scale-out NIC per GPU, one direction")
    source: str = ""

    @model_validator(mode="after")
    def _check(self) -> "HardwareSpec":
        if self.peak_flops_fp8 and self.peak_flops_fp8 < self.peak_flops_bf16:
            raise ValueError("peak_flops_fp8 must be 0 (unsupported) or >= peak_flops_bf16")
        return self

    def peak_flops(self, precision: str) -> float:
        if precision == "fp8":
            return self.peak_flops_fp8
        return self.peak_flops_bf16

    @property
    def ridge_flops_per_byte(self) -> float:
        """Roofline ridge point: FLOPs per HBM byte at which compute and memory balance."""
        return self.peak_flops_bf16 / self.hbm_bandwidth_Bps

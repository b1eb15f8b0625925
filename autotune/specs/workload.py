"""Workload spec: what one training step processes."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class WorkloadSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    global_batch_seqs: int | None = Field(default=None, gt=0, le=1 << 24,
                                          description="sequences per step; default from the model preset")
    seq_len: int | None = Field(default=None, gt=0, le=1 << 24, description="default: the model's seq_len")
    precision: Literal["bf16", "fp16", "fp8"] = "bf16"
    flash_attention: bool = Field(default=True, description="fused attention (FlashAttention): causal "
                                  "blocks skipped, no s^2 scores stored or streamed through HBM")

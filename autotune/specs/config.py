"""The configuration: the decision autotune searches over.

Categorical knobs are declared once, as enums in ``specs/codes.py``; the tuples here are their
labels in code order, and the search space and the cost model refer to a choice by its code.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .codes import (Collective, DPFlavour, HeteroSplit, LoadBalancing, LossRecovery, Placement, PPSchedule, Protocol,
                    Recompute)

PLACEMENTS = Placement.labels()
"""Which parallel dimension spans buildings. hybrid = buildings split over both dp and pp."""
DP_FLAVOURS = DPFlavour.labels()
PP_SCHEDULES = PPSchedule.labels()
TORCH_SCHEDULE_NAMES = {
    "gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved_1f1b": "ScheduleInterleaved1F1B",
    "zb1p": "ScheduleInterleavedZeroBubble", "zb2p": "ScheduleInterleavedZeroBubble",
    "zbv": "ScheduleZBVZeroBubble", "dualpipev": "ScheduleDualPipeV",
}
RECOMPUTE = Recompute.labels()
LOAD_BALANCING = LoadBalancing.labels()
LOSS_RECOVERY = LossRecovery.labels()
COLLECTIVES = Collective.labels()
"""Algorithms a real library runs for data-parallel collectives: NCCL's own choice (its tuner,
ring or tree by size), NCCL ring, NCCL tree (all-reduce; all-gather / reduce-scatter use ring),
and hierarchical as frameworks build it (HSDP, NCCLX-style: inside, across, inside)."""
PROTOCOLS = Protocol.labels()
"""NCCL_PROTO: auto = NCCL's tuner picks per collective by size."""
HETERO_SPLITS = HeteroSplit.labels()
"""Work shares between buildings of different GPU speeds (``HeteroSplit``)."""

CATEGORICAL = {
    "placement": PLACEMENTS, "dp_flavour": DP_FLAVOURS, "pp_schedule": PP_SCHEDULES,
    "recompute": RECOMPUTE, "xb_load_balancing": LOAD_BALANCING,
    "xb_loss_recovery": LOSS_RECOVERY, "collective": COLLECTIVES, "nccl_protocol": PROTOCOLS,
    "hetero_split": HETERO_SPLITS,
}
INTEGER = ("tp", "cp", "ep", "etp", "pp", "dp", "pp_chunks", "micro_batch", "overlap_dp", "xb_queue_pairs",
           "nccl_channels", "nccl_buffer_mib", "dp_bucket_mib")
FIELDS = INTEGER + tuple(CATEGORICAL)


MAX_DEGREE = 1 << 22
"""Largest parallel degree accepted: the most GPUs a cluster may have (ClusterSpec bounds a
building's GPUs by the same number); larger values would overflow int64 products downstream."""


class Config(BaseModel):
    """One training configuration. Degrees multiply to the GPU count: tp*cp*pp*dp = N;
    ep groups ranks of the data-parallel dimension (ep divides dp), as in Megatron-Core."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    tp: int = Field(default=1, ge=1, le=MAX_DEGREE, description="tensor_parallel_degree (with sequence parallelism)")
    cp: int = Field(default=1, ge=1, le=MAX_DEGREE, description="context_parallel_degree")
    ep: int = Field(default=1, ge=1, le=MAX_DEGREE, description="expert_parallel_degree (divides dp)")
    etp: int = Field(default=0, ge=0, le=MAX_DEGREE, description="expert tensor-parallel degree (Megatron-Core's "
                     "MoE parallel folding, --expert-tensor-parallel-size): the experts' own TP, a divisor of tp; "
                     "0 = the same as tp. With etp < tp the EP group spans TP ranks: etp*ep divides tp*cp*dp")
    pp: int = Field(default=1, ge=1, le=MAX_DEGREE, description="pipeline_parallel_degree")
    dp: int = Field(default=1, ge=1, le=MAX_DEGREE, description="data_parallel degree (replicate x shard)")
    placement: Literal[PLACEMENTS] = "dp_out"
    dp_flavour: Literal[DP_FLAVOURS] = "fsdp"
    pp_schedule: Literal[PP_SCHEDULES] = "1f1b"
    pp_chunks: int = Field(default=1, ge=1, le=1024, description="model chunks per pipeline rank (v)")
    micro_batch: int = Field(default=1, ge=1, le=1 << 24, description="sequences per micro-batch")
    recompute: Literal[RECOMPUTE] = "none"
    overlap_dp: int = Field(default=1, ge=0, le=1, description="overlap DP communication with compute")
    xb_load_balancing: Literal[LOAD_BALANCING] = "ecmp"
    xb_queue_pairs: int = Field(default=1, ge=1, le=256)
    xb_loss_recovery: Literal[LOSS_RECOVERY] = "gbn"
    collective: Literal[COLLECTIVES] = "nccl_auto"
    nccl_protocol: Literal[PROTOCOLS] = "auto"
    nccl_channels: int = Field(default=4, ge=1, le=64, description="channels per connection of the "
                               "data-parallel communicators (NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS; MAXCHANNELS = 64)")
    nccl_buffer_mib: int = Field(default=4, ge=1, le=1024, description="NCCL_BUFFSIZE in MiB: the Simple "
                                 "protocol's buffer per connection and channel, its in-flight window")
    dp_bucket_mib: int = Field(default=0, ge=0, le=1 << 20, description="gradient bucket (MiB of the "
                               "reduced gradients, fp32 or bf16: WorkloadSpec.grad_reduce_dtype): one collective per bucket; 0 = the framework class's default: Megatron-Core max(40M, "
                               "1M x dp x cp) parameters, DeepSpeed 500M elements, torch DDP 25 MiB, else 80 MB")

    hetero_split: Literal[HETERO_SPLITS] = Field(default="even", description="work shares between buildings "
                                                 "of different GPU speeds: even, or by_speed (DP micro-batches or "
                                                 "pipeline layers in proportion to each building's speed; dp_out "
                                                 "and pp_out only)")

    @property
    def n_gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    def to_flat(self) -> dict:
        return self.model_dump()

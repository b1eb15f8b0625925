"""The result of evaluating one configuration: time, breakdown, memory, feasibility."""
from __future__ import annotations

from dataclasses import dataclass, field

from .tiers import TIER_KEYS, nested

TRAFFIC_KEYS = ("xb_bytes_per_gpu", "xb_bytes_per_step", "nvlink_bytes_per_gpu", "xb_dp_bytes_per_gpu",
                "xb_pp_bytes_per_gpu", "xb_ep_bytes_per_gpu", "xb_cp_bytes_per_gpu")
"""Bytes per step by tier (cross-building, NVLink) and, across buildings, by parallel dimension."""
BREAKDOWN_KEYS = ("compute_s", "host_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "pp_bubble_s", "pp_comm_s",
                  "dp_comm_s", "optimizer_s", "straggler_s")


def infeasible_reason(memory_bytes: float, hbm_bytes: float, deficit_bytes: float | None = None) -> str:
    """One line. On mixed GPU types (``deficit_bytes`` not memory - HBM) the GPU type short of
    memory may not be the one that holds the most (``hetero.typed_memory``)."""
    need, have = memory_bytes / 2**30, hbm_bytes / 2**30
    if deficit_bytes is not None and abs(memory_bytes - hbm_bytes - deficit_bytes) > 1.0:
        return (f"out of memory: a GPU type is short by {deficit_bytes:.0f} bytes "
                f"(the fullest GPU holds {need:.1f} GiB)")
    return (f"out of memory: needs {need:.1f} GiB per GPU, has {have:.1f} GiB "
            f"(short by {memory_bytes - hbm_bytes:.0f} bytes)")


@dataclass(frozen=True)
class Evaluation:
    config: object
    iteration_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    memory_per_gpu_bytes: float
    memory_deficit_bytes: float
    feasible: bool
    reason: str
    breakdown: dict = field(default_factory=dict)
    traffic: dict = field(default_factory=dict)
    exposure: dict = field(default_factory=dict)
    """The data-parallel step-end collectives: link time, exposed (in ``dp_comm_s``) and hidden
    behind the last micro-batch's compute."""
    tiers: dict = field(default_factory=dict)
    """{dimension: {tier: {bytes_per_gpu, link_s, exposed_s, hidden_s}}} and per-tier totals
    (``costmodel.tiers``); empty where the outputs carried no accounting."""

    @classmethod
    def from_outputs(cls, config, out: dict, hbm_bytes: float) -> "Evaluation":
        feasible = bool(out["feasible"])
        return cls(
            config=config,
            iteration_time_s=float(out["iteration_time_s"]), tokens_per_s=float(out["tokens_per_s"]),
            mfu=float(out["mfu"]), hfu=float(out["hfu"]),
            memory_per_gpu_bytes=float(out["memory_per_gpu_bytes"]),
            memory_deficit_bytes=float(out["memory_deficit_bytes"]), feasible=feasible,
            reason="" if feasible else infeasible_reason(float(out["memory_per_gpu_bytes"]), hbm_bytes,
                                                         float(out["memory_deficit_bytes"])),
            breakdown={kk: float(out[kk]) for kk in BREAKDOWN_KEYS},
            traffic={kk: float(out[kk]) for kk in TRAFFIC_KEYS} | {"micro_batches": float(out["micro_batches"])},
            exposure={"dp_link_s": float(out["dp_link_s"]), "dp_exposed_s": float(out["dp_exposed_s"]),
                      "dp_hidden_s": float(out["dp_link_s"]) - float(out["dp_exposed_s"])},
            tiers=nested(out) if TIER_KEYS[0] in out else {},
        )

    def to_dict(self) -> dict:
        return {"config": self.config.model_dump(), "iteration_time_s": self.iteration_time_s,
                "tokens_per_s": self.tokens_per_s, "mfu": self.mfu, "hfu": self.hfu,
                "memory_per_gpu_bytes": self.memory_per_gpu_bytes,
                "memory_deficit_bytes": self.memory_deficit_bytes, "feasible": self.feasible,
                "reason": self.reason, "breakdown": self.breakdown, "traffic": self.traffic,
                "exposure": self.exposure, "tiers": self.tiers}


def public_outputs(out: dict, n: int) -> dict:
    """Drop the simulator's internals; broadcast any output that came out scalar."""
    import numpy as np
    return {k: (v if np.ndim(v) else np.full(n, v)) for k, v in out.items() if not k.startswith("_")}

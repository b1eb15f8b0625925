"""Cluster spec: buildings (each with its own size and GPU type) and the network tiers."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .hardware import MAX_BANDWIDTH_Bps, MIN_BANDWIDTH_Bps, HardwareSpec

FIBRE_DELAY_S_PER_KM = 5e-6
"""One-way propagation delay in optical fibre (refractive index ~1.47 -> ~204,000 km/s)."""


class TierSpec(BaseModel):
    """One network tier above the NVLink domain.

    ``bandwidth_Bps`` is per GPU before oversubscription; a tier oversubscribed ``o``:1 gives each
    GPU ``bandwidth_Bps / o`` when every GPU below it sends across at once.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    bandwidth_Bps: float = Field(ge=MIN_BANDWIDTH_Bps, le=MAX_BANDWIDTH_Bps)
    oversubscription: float = Field(default=1.0, ge=1.0, le=1024)
    latency_s: float = Field(default=5e-6, ge=0, le=10.0, description="base one-way latency, switches and NICs")
    distance_km: float = Field(default=0.0, ge=0, le=20000)
    n_paths: int = Field(default=64, ge=1, le=1 << 16, description="equal-cost links ECMP can hash onto; "
                         "each carries uplink / n_paths")
    loss_rate: float = Field(default=0.0, ge=0, lt=0.5, description="packet loss probability")
    link_Bps: float | None = Field(default=None, ge=MIN_BANDWIDTH_Bps, le=MAX_BANDWIDTH_Bps, description="rate of one equal-cost link; when set, "
                                   "the path count follows the uplink (uplink / link_Bps), so a higher "
                                   "oversubscription means fewer links, never slower ones")
    mtu_bytes: int = Field(default=4096, ge=256, le=65536)
    ib_timeout: int = Field(default=20, ge=0, le=31, description="NCCL_IB_TIMEOUT: the RC transport's "
                            "retransmission timeout is 4.096 us x 2^ib_timeout (NCCL default 20: ~4.3 s)")
    adaptive_retransmission: bool = Field(default=True, description="the NIC adapts its timeout to the "
                                          "measured round trip (ConnectX adaptive retransmission, on by default); "
                                          "false: every tail loss waits the full ib_timeout")
    load_balancing: Literal["ecmp", "qp_spray", "packet_spray"] = "ecmp"
    queue_pairs: int = Field(default=4, ge=1, le=256)
    loss_recovery: Literal["gbn", "sr"] = "gbn"

    def paths(self, uplink_Bps: float) -> int:
        """Equal-cost links a flow can be hashed onto: uplink / link_Bps when the link rate is
        known (at least 1), else the declared n_paths."""
        if self.link_Bps is None:
            return self.n_paths
        return max(1, int(round(uplink_Bps / self.link_Bps)))

    def rto_s(self, rtt_s: float) -> float:
        """Retransmission timeout: 4.096 us x 2^ib_timeout (IB spec, NCCL_IB_TIMEOUT), or with
        adaptive retransmission the smaller of that and 4 RTT + 100 us (RTO_MIN_s)."""
        from ..costmodel.constants import RTO_MIN_s
        configured = 4.096e-6 * 2 ** self.ib_timeout
        return min(configured, 4 * rtt_s + RTO_MIN_s) if self.adaptive_retransmission else configured

    @property
    def one_way_latency_s(self) -> float:
        """alpha of the tier: base latency plus fibre propagation (5 us/km)."""
        return self.latency_s + self.distance_km * FIBRE_DELAY_S_PER_KM


class BuildingSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    gpus: int = Field(gt=0, le=1 << 22)
    gpu: HardwareSpec
    region: str = "region-0"

    @field_validator("gpu", mode="before")
    @classmethod
    def _resolve_gpu(cls, v):
        if isinstance(v, str):
            from .preset_tables import preset_dict
            return HardwareSpec.model_validate(preset_dict("hardware", v))
        return v


class ClusterSpec(BaseModel):
    """Buildings plus tiers: NVLink (from the GPU spec) < scale_out (inside a zone/pod) <
    cross_zone (between pods of a building) < cross_building < cross_region."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = "custom"
    buildings: tuple[BuildingSpec, ...] = Field(min_length=1, max_length=64)
    zone_gpus: int = Field(default=1 << 22, gt=0, le=1 << 22, description="GPUs per zone (pod) inside a building")
    scale_out: TierSpec
    cross_zone: TierSpec | None = None
    cross_building: TierSpec | None = None
    cross_region: TierSpec | None = None
    source: str = ""

    @model_validator(mode="after")
    def _check(self) -> "ClusterSpec":
        if len({b.region for b in self.buildings}) > 1 and self.cross_region is None:
            raise ValueError("cross_region tier is required when buildings are in more than one region")
        if len(self.buildings) > 1 and self.inter_building_tier is None:
            raise ValueError("cross_building tier is required when there is more than one building")
        for i, b in enumerate(self.buildings):
            if b.gpus % b.gpu.nvlink_domain_gpus and b.gpus > b.gpu.nvlink_domain_gpus:
                raise ValueError(f"buildings.{i}.gpus ({b.gpus}) must be a multiple of the NVLink "
                                 f"domain ({b.gpu.nvlink_domain_gpus})")
        return self

    @property
    def n_buildings(self) -> int:
        return len(self.buildings)

    @property
    def n_gpus(self) -> int:
        return sum(b.gpus for b in self.buildings)

    @property
    def uniform_buildings(self) -> bool:
        return len({b.gpus for b in self.buildings}) == 1

    @property
    def inter_building_tier(self) -> TierSpec | None:
        """The tier a building-spanning group crosses: cross_region if buildings span regions."""
        if len({b.region for b in self.buildings}) > 1:
            return self.cross_region
        return self.cross_building

    def network_lines(self) -> list[str]:
        """One line per network tier as the cost model reads it (per-GPU bandwidth, oversubscription,
        one-way latency with fibre, loss), NVLink first: what the printed header shows."""
        g = self.buildings[0].gpu
        out = [f"nvlink: {g.nvlink_domain_gpus} GPUs x {g.nvlink_bandwidth_Bps / 1e9:g} GB/s"]
        spanning = "cross_region" if len({b.region for b in self.buildings}) > 1 else "cross_building"
        for name in ("scale_out", "cross_zone", "cross_building", "cross_region"):
            t = getattr(self, name)
            if t is not None:
                one_zone = self.zone_gpus >= min(b.gpus for b in self.buildings)
                unused = ("" if name == "scale_out" or (name == "cross_zone" and not one_zone)
                          or (name == spanning and self.n_buildings > 1)
                          else " (not used: a building's GPUs fit in one zone)" if name == "cross_zone"
                          else " (not used: one building)" if self.n_buildings == 1
                          else " (not used: one region)" if name == "cross_region"
                          else " (not used: the buildings span regions, cross_region carries their traffic)")
                out.append(f"{name}: {t.bandwidth_Bps / 1e9:g} GB/s per GPU, 1:{t.oversubscription:g}, "
                           f"{t.one_way_latency_s * 1e6:g} us one way ({t.distance_km:g} km), loss {t.loss_rate:g}"
                           + unused)
        return out

    def with_total_gpus(self, n: int) -> "ClusterSpec":
        """Same cluster with ``n`` GPUs split evenly over its buildings."""
        from ..errors import UserInputError
        nb = self.n_buildings
        if n <= 0 or n % nb:
            raise UserInputError("gpus", n, f"a positive multiple of the {nb} buildings of cluster {self.name!r}")
        per = n // nb
        dom = max(b.gpu.nvlink_domain_gpus for b in self.buildings)
        if per > dom and per % dom:
            raise UserInputError("gpus", n, f"GPUs per building ({per}) must be a multiple of the NVLink domain ({dom})")
        return self.model_copy(update={"buildings": tuple(b.model_copy(update={"gpus": per}) for b in self.buildings)})

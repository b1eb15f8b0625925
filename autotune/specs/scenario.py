"""Scenario: model + workload + cluster, resolved and validated together."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator

from .cluster import ClusterSpec
from .model import ModelSpec
from .workload import MOE_OFFLOAD_MODULES, WorkloadSpec


def module_misfit(modules, model) -> str:
    """Why a recompute module does not apply to ``model`` ('' where all do): mla_up_proj needs
    multi-latent attention, moe_act and moe an MoE model, shared_experts shared experts."""
    if "mla_up_proj" in modules and model.attention != "mla":
        return f"mla_up_proj needs multi-latent attention (model.attention is {model.attention})"
    if {"moe_act", "moe", "shared_experts"} & set(modules) and not model.moe_experts:
        return "moe_act, moe and shared_experts need a mixture-of-experts model (model.moe_experts is 0)"
    if "shared_experts" in modules and not model.moe_shared_experts:
        return "shared_experts needs shared experts (model.moe_shared_experts is 0)"
    return ""


class Scenario(BaseModel):
    """Everything fixed while searching: what is trained, on what, over which network."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    model: ModelSpec
    workload: WorkloadSpec = WorkloadSpec()
    cluster: ClusterSpec
    _derived: dict = PrivateAttr(default_factory=dict)
    """Per-object cache of derived constants (e.g. the cost model's), keyed by the caller."""

    @model_validator(mode="after")
    def _check(self) -> "Scenario":
        if self.workload.precision == "fp8":
            for i, b in enumerate(self.cluster.buildings):
                if not b.gpu.peak_flops_fp8:
                    from ..errors import UserInputError
                    raise UserInputError("workload.precision", "fp8", f"a precision every building's GPU runs "
                                         f"(cluster.buildings.{i}.gpu {b.gpu.name} has no fp8: bf16, fp16)")
        bad = module_misfit(self.workload.recompute_modules, self.model)
        if bad:
            raise ValueError(f"workload.recompute_modules {bad}")
        moe_off = sorted(MOE_OFFLOAD_MODULES & set(self.workload.offload_modules))
        if moe_off and not self.model.moe_experts:
            raise ValueError(f"workload.offload_modules {','.join(moe_off)} need a mixture-of-experts model "
                             "(model.moe_experts is 0)")
        if self.workload.moe_unpermute is not None and not self.model.moe_experts:
            from ..errors import UserInputError
            raise UserInputError("workload.moe_unpermute", self.workload.moe_unpermute, "unset: model "
                                 f"{self.model.name} is dense (model.moe_experts is 0)")
        return self

    @property
    def seq_len(self) -> int:
        return self.workload.seq_len or self.model.seq_len

    @property
    def global_batch_seqs(self) -> int:
        """Explicit batch, else the model's default token budget in sequences, rounded to a
        multiple of 64 x buildings so that data parallelism can split evenly over buildings."""
        if self.workload.global_batch_seqs:
            return self.workload.global_batch_seqs
        quantum = 64 * self.cluster.n_buildings
        seqs = self.model.default_global_batch_tokens / self.seq_len
        return max(quantum, int(round(seqs / quantum)) * quantum)

    @property
    def n_gpus(self) -> int:
        return self.cluster.n_gpus

    @property
    def precision(self) -> str:
        return self.workload.precision

    @property
    def key(self) -> str:
        """A stable identity of the content (study metadata, on-disk caches). Not cached: a copy
        made with ``model_copy(update=...)`` must not inherit its source's key."""
        import hashlib
        # fields added later are left out at their defaults, so keys of older studies stay valid
        # (framework, fsdp_unit_layers and the overlap and dedup flags were added without this and
        # are in every key since; changing that now would break the studies made since)
        w = self.workload
        later = {name for name, default in (("fsdp_regather", "every_pass"), ("activation_memory", "fused"),
                                            ("optimizer_post_validation", False), ("pipeline_layout", None),
                                            ("recompute_modules", ("core_attn",)), ("optimizer_moments", "fp32"),
                                            ("shard_gradients", False), ("grad_dtype", "fp32"),
                                            ("fp8_param_gather", False), ("grad_reduce_dtype", None),
                                            ("fsdp_gather", "unit"), ("moe_routing", "dropless"),
                                            ("moe_capacity_factor", 1.0), ("offload_modules", ()),
                                            ("zero1_param_sync", "all_gather"), ("zero1_shard_ranks", 0),
                                            ("moe_einsum_dispatch", False), ("attention_kernel", "native"),
                                            ("moe_unpermute", None))
                 if getattr(w, name) == default}
        exclude: dict = {"workload": later} if later else {}
        # HardwareSpec.async_launch, added later too, left out where it is at its default (GPUs), and
        # host_link_Bps (later still) wherever nothing is offloaded over it
        quiet = set() if w.offload_modules else {"host_link_Bps"}
        at_default = {i: {"gpu": {"async_launch"} | quiet} if b.gpu.async_launch else {"gpu": quiet}
                      for i, b in enumerate(self.cluster.buildings) if b.gpu.async_launch or quiet}
        if at_default:
            exclude["cluster"] = {"buildings": at_default}
        return hashlib.sha256(self.model_dump_json(exclude=exclude or None).encode()).hexdigest()[:16]

    def with_workload(self, **fields) -> "Scenario":
        """The same scenario with these workload fields changed (a backend's workload semantics)."""
        return type(self).model_validate({**self.model_dump(), "workload": {**self.workload.model_dump(), **fields}})

    def model_copy(self, *, update=None, deep: bool = False) -> "Scenario":
        """Copies start with an empty derived-value cache (pydantic copies private attributes
        shallowly, which would share cost-model constants between different networks)."""
        new = super().model_copy(update=update, deep=deep)
        new._derived = {}
        return new

    def network_lines(self) -> list[str]:
        return self.cluster.network_lines()

    def summary(self) -> dict:
        return {"model": self.model.name, "cluster": self.cluster.name, "gpus": self.n_gpus,
                "buildings": self.cluster.n_buildings, "global_batch_seqs": self.global_batch_seqs,
                "seq_len": self.seq_len, "precision": self.precision}

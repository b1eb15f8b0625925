"""Workload spec: what one training step processes."""
from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


FRAMEWORK_PIPELINE_LAYOUT = {"nanotron": "balanced"}
"""Each framework class's own pipeline layout where it differs from Megatron's even split:
nanotron splits blocks by their FLOPs (``get_block_compute_costs``). The pytorch class is wider
than torchtitan (whose ``generate_llm_fqn_per_model_part`` counts the embedding and the head as a
layer each: ends), so it keeps even unless ``pipeline_layout`` says otherwise."""


FRAMEWORK_MOE_UNPERMUTE = {"pytorch": "scatter_add"}
"""Each framework class's MoE un-permutation where it is not a fused kernel
(``WorkloadSpec.resolved_moe_unpermute``): torchtitan's ``MoE.forward`` (torchtitan/models/moe.py)
combines the experts' outputs with ``out.scatter_add(dim=0, index=token_indices_experts_sorted, ...)``
after a ``torch.gather`` permutation whose gradient is a scatter-add too, so forward and backward
each run one. The rate is the atomic kernel's as measured (``autotune/data/h100``, index_add_).
torchtitan replaced it by a batched matmul over the top-k outputs from 2025-10-31 (PR 1974) until
2026-04-01 (PR 2775, which brought scatter_add back with ``torch.use_deterministic_algorithms``,
whose scatter-add is a sort-based kernel this project has not measured): a run of the versions
between is ``moe_unpermute: fused``, and a deterministic one is charged the atomic rate, an
assumption."""


FRAMEWORK_GRAD_REDUCE = {"megatron": "buffer", "nanotron": "buffer"}
"""Each framework class's gradient-reduction dtype where it is not the 16-bit working dtype
(``WorkloadSpec.resolved_grad_reduce_dtype``): buffer = the gradient buffer's dtype (grad_dtype).
Megatron: arguments.py turns --accumulate-allreduce-grads-in-fp32 on for bf16 ('bfloat16 requires
gradient accumulation and all-reduce to be done in fp32') unless --grad-reduce-in-bf16; nanotron:
its fp32 accumulation hook (``get_fp32_accum_hook``) reduce-scatters / all-reduces the fp32
buffers. The others reduce in the training dtype: DeepSpeed (communication_data_type's default),
the pytorch class's FSDP1 recipes (MixedPrecision(reduce_dtype=bfloat16): fms-fsdp's bfSixteen,
Composer's PURE), InternEvo and Colossal-AI's ZeRO (``reduce_tensor`` keeps the gradient's own
dtype); torchtitan's FSDP2 (mixed_precision_reduce float32), Composer's DEFAULT and torch DDP
under autocast reduce in fp32 and are stated so (grad_reduce_dtype); JAX is read the same way
(not established: MaxText's float32 weights may reduce in fp32)."""


RECOMPUTE_MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act", "shared_experts", "moe")
"""Megatron-Core's ``--recompute-modules`` (transformer_config.py) that the model prices: what
``recompute = selective`` re-runs in the backward. core_attn alone is Korthikanti et al. 2022's
selective recomputation (Megatron's default module list)."""

OFFLOAD_MODULES = ("attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act",
                   "fused_group_mlp")
"""Megatron-Core's ``--offload-modules`` (fine-grained activation offloading, transformer_config.py
and docs/user-guide/features/fine_grained_activation_offloading.md): each moves its module's input
activation to host memory in the forward and back before its backward."""

MOE_OFFLOAD_MODULES = frozenset({"expert_fc1", "moe_act", "fused_group_mlp"})


def module_list(v, allowed: tuple):
    """A comma- or space-separated string of module names as a tuple in ``allowed``'s order (any
    order and repeats give the same canonical tuple); anything else is left for pydantic to reject."""
    if isinstance(v, str):
        v = [x for x in re.split(r"[,\s]+", v.strip()) if x]
    if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v) and set(v) <= set(allowed):
        return tuple(m for m in allowed if m in v)
    return v


def default_pipeline_layout(framework: str) -> str:
    """The framework class's own pipeline layout (``FRAMEWORK_PIPELINE_LAYOUT``, else even)."""
    return FRAMEWORK_PIPELINE_LAYOUT.get(framework, "even")


class WorkloadSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    global_batch_seqs: int | None = Field(default=None, gt=0, le=1 << 24,
                                          description="sequences per step; default from the model preset")
    seq_len: int | None = Field(default=None, gt=0, le=1 << 24, description="default: the model's seq_len")
    precision: Literal["bf16", "fp16", "fp8", "fp32"] = Field(
        default="bf16", description="training precision: bf16/fp16 mixed precision, fp8 GEMMs on top of it, or "
        "fp32 throughout (weights, activations and gradients on the wire; the CPU reference workload)")
    fsdp_regather: Literal["every_pass", "forward", "never"] = Field(
        default="every_pass", description="when FSDP/HSDP all-gather parameters within a step: every_pass = "
        "ZeRO-3 (DeepSpeed): before every micro-batch's forward and backward, gradients reduce-scattered "
        "every micro-batch; forward = FSDP2 under torch.distributed.pipelining (reshard_after_forward): "
        "before every forward, once for the backward, one reduce-scatter per step; never = torchtitan "
        "under PP (reshard_after_forward=False): one all-gather and one reduce-scatter per step")
    shard_gradients: bool = Field(
        default=False, description="ZeRO stage 2 (DeepSpeed, Fast-LLM zero_stage 2, ColossalAI zero2): under the "
        "zero1 flavour the gradients are sharded over the data-parallel group as the optimizer states are "
        "(Rajbhandari et al. 2020, P_os+g); false: a full gradient buffer on every rank (Megatron's "
        "distributed optimizer, ZeRO-1). The collectives are the same")
    fsdp_unit_layers: int = Field(default=1, ge=1, le=1 << 12, description="transformer layers per FSDP "
                                  "unit: one all-gather and one reduce-scatter per unit (FSDP2 fully_shard per block = 1)")
    zero1_param_sync: Literal["all_gather", "broadcast"] = Field(
        default="all_gather", description="how the zero1 flavour syncs: all_gather = gradients "
        "reduce-scattered and updated parameters all-gathered over the data-parallel ranks (Megatron-Core's "
        "distributed optimizer, DeepSpeed ZeRO-1); broadcast = gradients all-reduced over all data-parallel "
        "ranks in buckets behind the backward, then each optimizer shard's owner broadcasts its updated "
        "parameters to its shard group after the step, one broadcast per owner (InternEvo's "
        "HybridZeroOptimizer with overlap_sync_param off, its 7B configs' default)")
    zero1_shard_ranks: int = Field(
        default=0, ge=0, le=1 << 20, description="data-parallel ranks one optimizer shard group spans under "
        "zero1_param_sync broadcast: 0 = all of them (InternEvo's zero1=-1), g = groups of g consecutive "
        "ranks, each holding a full replica of the optimizer states (InternEvo's zero1=g; at most the "
        "data-parallel size)")
    fsdp_gather: Literal["unit", "module", "parameter"] = Field(
        default="unit", description="how FSDP / ZeRO-3 issues its collectives: unit = one all-gather and one "
        "reduce-scatter per FSDP unit (fsdp_unit_layers; PyTorch FSDP, Megatron-Core FSDP); module = one "
        "all-gather per linear module, coalesced with its prefetch up to 5e7 elements, and one "
        "reduce-scatter per 5e8-element gradient bucket (DeepSpeed ZeRO-3 from v0.6, all_gather_coalesced); "
        "parameter = one all-gather and one reduce-scatter per parameter tensor, each copying world-size "
        "views out of or into its flat buffer (DeepSpeed ZeRO-3 up to v0.5)")
    framework: Literal["megatron", "deepspeed", "pytorch", "nanotron", "jax", "other"] = Field(
        default="megatron", description="training framework class: its compute runs at the fitted "
        "framework_efficiency_<class> of the isolated kernels' speed (CostParams)")
    pipeline_layout: Literal["even", "ends", "balanced"] | None = Field(
        default=None, description="how pipeline stages share the layers and the head (the output "
        "projection): even = ceil(L / stages) layers a stage, the head on top of the last (Megatron's "
        "default, DeepSpeed's type:transformer); ends = embedding and head count as one layer each "
        "(torchtitan's input_weight = output_weight = 1, Megatron-Core's "
        "--account-for-embedding/loss-in-pipeline-split: the first and last stage one layer fewer); "
        "balanced = whole layers placed so the head's stage weighs no more than the others by FLOPs "
        "(nanotron's get_block_compute_costs split, a Megatron-Core --pipeline-model-parallel-layout); "
        "default: the framework class's own (nanotron balanced, the others even)")
    tp_comm_overlap: bool = Field(default=False, description="tensor-parallel collectives overlapped with "
                                  "their GEMMs (TransformerEngine userbuffers, Megatron --tp-comm-overlap): "
                                  "only what outlasts the layer's GEMMs, and at least the piece that cannot "
                                  "overlap, is exposed")
    ep_comm_overlap: bool = Field(default=False, description="expert-parallel all-to-all of one micro-batch "
                                  "overlapped with another micro-batch's compute (Megatron-Core "
                                  "--overlap-moe-expert-parallel-comm, the DualPipe idea in 1F1B): the dispatch "
                                  "and combine hide behind the paired micro-batch's layer, in all but one micro-batch")
    ep_token_dedup: bool = Field(default=False, description="the MoE dispatcher sends each token to a remote "
                                 "node once, however many of its experts live there, and forwards it inside "
                                 "that node on NVLink (DeepEP, HybridEP, Megatron-Core's flex dispatcher); "
                                 "otherwise one copy per selected expert crosses (NCCL all-to-all)")
    moe_einsum_dispatch: bool = Field(default=False, description="GShard-style dense dispatch and combine "
                                      "(DeepSpeed-MoE's sharded_moe.MOELayer, GShard, fairseq): the routed tokens "
                                      "are gathered and scattered back by einsums over one-hot masks of s tokens x e "
                                      "experts x c capacity slots, two s x (e c) x hidden GEMMs a layer forward and "
                                      "three backward, and the masks kept for the backward; otherwise the tokens are "
                                      "permuted (Megatron-Core, memory-bound)")
    moe_unpermute: Literal["fused", "scatter_add"] | None = Field(
        default=None, description="how the MoE layer puts the experts' outputs back in token order: fused = a "
        "streaming kernel (Megatron-Core's moe_unpermute, DeepEP's combine, MegaBlocks' scatter); scatter_add = "
        "eager PyTorch's atomic scatter-add (torchtitan's MoE.forward; the gradient of its gather is one too), "
        "at the atomics' rate. Default (None): the framework class's own (FRAMEWORK_MOE_UNPERMUTE: "
        "pytorch scatter_add, the rest fused), fused under ep_token_dedup")
    flash_attention: bool = Field(default=True, description="fused attention (FlashAttention): causal "
                                  "blocks skipped, no s^2 scores stored or streamed through HBM")
    attention_kernel: Literal["native", "fa2"] = Field(
        default="native", description="which fused attention kernel runs: native = the GPU generation's own "
        "(cuDNN or FlashAttention-3 on Hopper and newer, FlashAttention-2 on Ampere); fa2 = FlashAttention-2 "
        "(the flash-attn 2 package, PyTorch SDPA's flash backend), which on compute capability 9.0 and newer "
        "runs at 0.70 (head dim 64) to 0.62 (128) of the native kernel's speed (the FlashAttention-3 paper; "
        "constants.FA2_HOPPER_SPEED_RATIO_HDIM64, _HDIM128)")
    moe_routing: Literal["dropless", "capacity", "balanced"] = Field(
        default="dropless", description="how routed tokens load the experts: dropless = every token reaches its "
        "top-k experts, the busiest rank carrying CostParams.dropless_expert_imbalance times the mean; "
        "capacity = tokens beyond moe_capacity_factor times an expert's mean share are dropped (GShard, "
        "Megatron-Core --moe-expert-capacity-factor); balanced = routing forced even (Megatron-Core "
        "--moe-router-force-load-balancing, a benchmarking mode)")
    moe_capacity_factor: float = Field(default=1.0, ge=0.25, le=16.0, description="with moe_routing = capacity: "
                                       "an expert's token capacity over its mean share")
    optimizer_post_validation: bool = Field(
        default=False, description="the optimizer steps before the pipeline-wide checks (gradient-norm clipping, "
        "inf/NaN) and rolls back in the rare step they fail (Qi et al. 2024, sec. 4; their Megatron fork's "
        "--enable-optimizer-post-validation): ZB-2p no longer waits at the step for the first forward to reach "
        "the last stage (priced for ZB-2p only)")
    optimizer_moments: Literal["fp32", "bf16"] = Field(
        default="fp32", description="dtype of Adam's first and second moments: fp32 (12 B of optimizer "
        "state a parameter with the fp32 master) or bf16 (8 B; Megatron-Core's --use-precision-aware-optimizer "
        "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, DeepSeek-V3's report sec. 3.3.2)")
    grad_dtype: Literal["fp32", "bf16"] = Field(
        default="fp32", description="dtype of the gradient buffer the backward accumulates into: fp32 (4 B a "
        "parameter; Megatron's default under bf16, --accumulate-allreduce-grads-in-fp32) or bf16 (2 B; "
        "Megatron's --grad-reduce-in-bf16, NeMo's performance recipes' grad_reduce_in_fp32=False); mixed "
        "precision only. Megatron's DDP and distributed optimizer and nanotron reduce this buffer over "
        "the data-parallel collectives (bf16 under fp16 and Megatron's FSDP: grad_reduce_dtype)")
    grad_reduce_dtype: Literal["fp32", "bf16"] | None = Field(
        default=None, description="dtype the data-parallel collectives reduce gradients in (all-reduce, "
        "reduce-scatter); bf16 stands for the 16-bit working dtype (fp16 under fp16). Parameter all-gathers "
        "move the working weights (2 B, 1 B with fp8_param_gather). Default (None): the framework class's "
        "own (FRAMEWORK_GRAD_REDUCE): Megatron and nanotron reduce their gradient buffer (grad_dtype; "
        "Megatron's arguments.py: 'bfloat16 requires gradient accumulation and all-reduce to be done in "
        "fp32', fp16 runs reduce in fp16; Megatron's FSDP paths reduce the bf16 parameters' gradients in "
        "bf16; nanotron's fp32 accumulation hook reduce-scatters the fp32 buffer); the others in the working "
        "dtype (DeepSpeed's communication_data_type, FSDP1's MixedPrecision recipes, InternEvo's and "
        "Colossal-AI's ZeRO). torchtitan's FSDP2 (mixed_precision_reduce float32), Composer's DEFAULT and "
        "torch DDP under autocast reduce in fp32: state fp32. fp32 training reduces in fp32 whatever is set")
    fp8_param_gather: bool = Field(
        default=False, description="fp8 training keeps the model's working weights in fp8 (1 B a parameter "
        "instead of 2; the fp32 master stays with the optimizer) and gathers them in fp8 (Megatron-Core's "
        "--fp8-param-gather, NeMo's fp8 recipes); precision fp8 only: 1 B in memory and on the "
        "data-parallel all-gathers")
    activation_memory: Literal["fused", "eager", "dots"] = Field(
        default="fused", description="which tensors the backward keeps: fused = Megatron-Core / "
        "TransformerEngine kernels (Korthikanti et al. 2022's per-layer bytes); eager = PyTorch eager "
        "autograd (unfused RMSNorm, SwiGLU's gate and product, torch's cross-entropy and pipelining), as "
        "the reference workload and torchtitan without torch.compile run; dots = JAX rematerialisation "
        "that keeps the weight matmuls' outputs and the attention output (MaxText's remat_policy minimal_flash: "
        "checkpoint_dots_with_no_batch_dims and 'context'), under recompute selective; otherwise as fused")

    recompute_modules: tuple[Literal[RECOMPUTE_MODULES], ...] = Field(
        default=("core_attn",), min_length=1, description="what recompute = selective re-runs in the "
        "backward (Megatron-Core's --recompute-modules; a comma-separated list): core_attn = the attention "
        "core (Korthikanti et al.'s selective recomputation, the default), layernorm = both norms' outputs, "
        "mla_up_proj = MLA's up projections (their queries, keys and values; MLA models only), "
        "mlp = a dense layer's MLP, moe_act = the routed experts' activation function, shared_experts = "
        "the shared experts' MLP, moe = the whole MoE block with its dispatch and combine. Each drops "
        "what that module keeps for the backward and charges its forward again; fused activation memory only")

    offload_modules: tuple[Literal[OFFLOAD_MODULES], ...] = Field(
        default=(), description="fine-grained activation offloading (Megatron-Core's "
        "--fine-grained-activation-offloading --offload-modules; a comma-separated list): each module's input "
        "activation goes to host memory over the GPU's host link (HardwareSpec.host_link_Bps) in the forward "
        "and comes back for the backward, overlapped with the pass's compute. attn_norm = the attention's "
        "separate input norm (MLA; fused into qkv_linear otherwise), qkv_linear = the QKV projection's input, "
        "core_attn = queries, keys and values, attn_proj = the attention output (needs core_attn), mlp_norm = "
        "an MoE layer's pre-MLP norm, expert_fc1 = each routed copy's permuted input, moe_act = the experts' "
        "fc1 output, fused_group_mlp = the whole grouped expert MLP's (not with expert_fc1 or moe_act). "
        "Fused activation memory only; no effect under recompute full")

    @field_validator("recompute_modules", mode="before")
    @classmethod
    def _modules_from_text(cls, v):
        """A comma- or space-separated string (``--set workload.recompute_modules=layernorm,moe_act``)
        as a tuple; any order and repeats give the same canonical tuple (RECOMPUTE_MODULES' order)."""
        return module_list(v, RECOMPUTE_MODULES)

    @field_validator("offload_modules", mode="before")
    @classmethod
    def _offload_from_text(cls, v):
        """As ``recompute_modules``, in OFFLOAD_MODULES' order."""
        return module_list(v, OFFLOAD_MODULES)

    @model_validator(mode="after")
    def _modules_need_fused(self):
        if self.activation_memory != "fused" and self.recompute_modules != ("core_attn",):
            raise ValueError(f"recompute_modules {','.join(self.recompute_modules)} needs activation_memory "
                             f"fused (Megatron-Core's --recompute-modules); {self.activation_memory} prices core_attn only")
        if self.zero1_shard_ranks and self.zero1_param_sync != "broadcast":
            raise ValueError(f"zero1_shard_ranks {self.zero1_shard_ranks} needs zero1_param_sync broadcast "
                             "(InternEvo's hybrid ZeRO); the all_gather sync shards over all data-parallel ranks")
        off = set(self.offload_modules)
        if off and self.activation_memory != "fused":
            raise ValueError(f"offload_modules {','.join(self.offload_modules)} needs activation_memory fused, "
                             f"not {self.activation_memory} (Megatron-Core's fine-grained activation offloading)")
        if "attn_proj" in off and "core_attn" not in off:
            raise ValueError("offload_modules attn_proj needs core_attn too (attn_proj's input is core_attn's "
                             "output, which core_attn's backward needs; Megatron-Core refuses it alone)")
        if "fused_group_mlp" in off and off & {"expert_fc1", "moe_act"}:
            raise ValueError("offload_modules fused_group_mlp offloads the whole grouped expert MLP: list it "
                             "without expert_fc1 or moe_act")
        if self.attention_kernel != "native" and not self.flash_attention:
            raise ValueError(f"attention_kernel {self.attention_kernel} is a fused kernel: it needs flash_attention true")
        if self.moe_einsum_dispatch and (self.ep_token_dedup or self.ep_comm_overlap):
            raise ValueError("moe_einsum_dispatch is DeepSpeed-MoE's dispatcher: it neither de-duplicates tokens "
                             "(ep_token_dedup) nor overlaps its all-to-all (ep_comm_overlap); set those false")
        if off & MOE_OFFLOAD_MODULES and "moe" in self.recompute_modules:
            raise ValueError(f"offload_modules {','.join(sorted(off & MOE_OFFLOAD_MODULES))} offload inside the "
                             "MoE block, which recompute_modules moe recomputes whole (Megatron-Core refuses both)")
        return self

    @field_validator("fp8_param_gather")
    @classmethod
    def _fp8_weights_need_fp8(cls, v, info):
        """Checked on the field (precision is declared before it), so an error names this field."""
        precision = info.data.get("precision", "bf16")
        if v and precision != "fp8":
            raise ValueError(f"fp8_param_gather needs precision fp8 (weights kept in fp8), not {precision}")
        return v

    @field_validator("grad_dtype", "grad_reduce_dtype")
    @classmethod
    def _bf16_grads_need_mixed_precision(cls, v, info):
        if v == "bf16" and info.data.get("precision") == "fp32":
            raise ValueError(f"{info.field_name} bf16 needs mixed precision (bf16, fp16 or fp8), not fp32 throughout")
        return v

    @property
    def resolved_grad_reduce_dtype(self) -> str:
        """The DDP and ZeRO-1 flavours' reduction dtype: ``grad_reduce_dtype``, or the framework
        class's own (``FRAMEWORK_GRAD_REDUCE``); fp32 throughout under fp32 training, and
        Megatron's fp32 reduction is for bf16 (and fp8) only."""
        if self.precision == "fp32":
            return "fp32"
        if self.grad_reduce_dtype is not None:
            return self.grad_reduce_dtype
        rule = FRAMEWORK_GRAD_REDUCE.get(self.framework, "working")
        if rule == "buffer":
            return "bf16" if self.precision == "fp16" and self.framework == "megatron" else self.grad_dtype
        return "fp32" if rule == "fp32" else "bf16"

    @property
    def resolved_fsdp_grad_reduce_dtype(self) -> str:
        """The FSDP and HSDP flavours' reduction dtype: as ``resolved_grad_reduce_dtype``, except
        that Megatron's sharded paths reduce the bf16 gradients of its bf16 parameters (its torch
        FSDP2 wrapper calls fully_shard without a MixedPrecisionPolicy; Megatron-FSDP's
        main_grads_dtype defaults to the parameters' dtype)."""
        if self.framework == "megatron" and self.grad_reduce_dtype is None and self.precision != "fp32":
            return "bf16"
        return self.resolved_grad_reduce_dtype

    @property
    def resolved_moe_unpermute(self) -> str:
        """``moe_unpermute``, or the framework class's own (``FRAMEWORK_MOE_UNPERMUTE``) where no
        de-duplicating dispatcher combines the tokens (ep_token_dedup: DeepEP's combine sums them)."""
        if self.moe_unpermute is not None:
            return self.moe_unpermute
        return "fused" if self.ep_token_dedup else FRAMEWORK_MOE_UNPERMUTE.get(self.framework, "fused")

    @property
    def resolved_pipeline_layout(self) -> str:
        """``pipeline_layout``, or the framework class's default where it is not set."""
        if self.pipeline_layout is not None:
            return self.pipeline_layout
        return default_pipeline_layout(self.framework)

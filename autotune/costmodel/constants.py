"""Named physical constants of the cost model. Each carries its unit in its name and a source.

Calibrated efficiency parameters are not here: they live in ``params.CostParams`` and are fit on
the published runs (``autotune validate --fit``).
"""

# ---- bytes per parameter, mixed-precision Adam (Rajbhandari et al. 2020, ZeRO, sec. 3.1;
# Megatron-LM keeps fp32 main gradients) -> 2 + 4 + 12 = 18 bytes/param (docs/cost_model.md: 16-18)
WEIGHT_BYTES_PER_PARAM = 2.0          # bf16 working weights
GRAD_BYTES_PER_PARAM = 4.0            # fp32 main gradients
OPTIMIZER_BYTES_PER_PARAM = 12.0      # fp32 master weights + Adam m and v
BF16_GRAD_BYTES_PER_PARAM = 2.0       # bf16 gradient buffer (Megatron --grad-reduce-in-bf16; WorkloadSpec.grad_dtype)
FP8_WEIGHT_BYTES_PER_PARAM = 1.0      # fp8 working weights (Megatron-Core --fp8-param-gather)
ADAM_STEP_TRAFFIC_BYTES_PER_PARAM = 30.0
"""HBM traffic of one fused Adam step per owned parameter: read fp32 master, m, v, grad (16 B),
write master, m, v (12 B) and the bf16 copy (2 B)."""

ADAM_BF16_MOMENTS_SAVED_BYTES_PER_PARAM = 4.0
"""Adam's m and v kept in bf16 instead of fp32 (Megatron-Core's --use-precision-aware-optimizer
--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16; DeepSeek-V3 report sec. 3.3.2): 2 B each fewer."""
ADAM_BF16_MOMENTS_TRAFFIC_SAVED_BYTES_PER_PARAM = 8.0
"""The Adam step reads and writes m and v at 2 B instead of 4: 8 B fewer of its 30 B traffic."""

FP32_BYTES = 4.0                      # one fp32 element (precision=fp32 training; gradients reduced in
                                      # fp32: WorkloadSpec.resolved_grad_reduce_dtype)
ACTIVATION_BYTES = 2.0                # bf16 on the wire: activations (TP, CP, PP, EP) and gradients
                                      # reduced in bf16 (Megatron --grad-reduce-in-bf16, FSDP1's
                                      # bfSixteen, DeepSpeed); parameter all-gathers move the working
                                      # weights (WEIGHT_BYTES_PER_PARAM, FP8_WEIGHT_BYTES_PER_PARAM)
LOGITS_BYTES = 8.0
"""Bytes per logit (token x vocab / tp) at the loss: the fp32 logits (4 B) and their fp32
gradient (4 B) are live together when backward starts (an unfused cross-entropy; Megatron's
fused vocab-parallel one reuses the buffer). Of 4, 8 and 12, 8 matches the playbook's measured
peaks best (60 rows, median |error| 9.3% vs 12.8% and 12.7%): an in-sample choice."""

# ---- activations (Korthikanti et al. 2022, arXiv:2205.05198, eq. 2 and Table 2) ----
ACT_ATTN_BYTES_PER_TOKEN_HIDDEN = 15.0   # attention block 11 sbh + two layer norms 4 sbh (multi-head
                                         # attention with heads x head_dim = h: its 11 sbh are 2 B x (the
                                         # QKV input, Q, K, V and the output projection's input, h each)
                                         # + a 1 B dropout mask; ScenarioConsts.attn_act_elems counts each
                                         # tensor at its own width: GQA's K and V, MLA's latents)
ACT_ATTN_MASK_AND_NORMS_BYTES_PER_TOKEN_HIDDEN = 5.0  # of the 15: the dropout mask (1) and the norms' inputs (4)
ACT_MLP_BYTES_PER_TOKEN_HIDDEN = 19.0    # MLP block with a 4h GELU FFN
ACT_SCORES_BYTES_PER_TOKEN_HEAD_SEQ = 5.0  # softmax scores + dropout mask, the 5 a s^2 b term
ACT_MLP_INPUT_BYTES_PER_TOKEN_HIDDEN = 2.0  # the MLP's 16-bit input, part of its 19 sbh
ACT_MOE_ROUTED_COPY_ELEMS_PER_TOKEN_HIDDEN = 2.0  # per routed copy: the permuted expert input and the
                                                  # expert output (the combine's probability gradient)
ACT_FULL_RECOMPUTE_BYTES_PER_TOKEN_HIDDEN = 2.0  # only the bf16 layer input is kept
ACT_FP8_GEMM_INPUT_CUT_SHARE = 0.5
"""Share of a GEMM input's 16-bit bytes an fp8 run does not keep (dimensionless): TransformerEngine
saves the input a Linear, LayerNormLinear (its ln_out) or GroupedLinear needs for its weight gradient
as one quantized copy, 1 B an element (the transpose or columnwise data only: delayed and current
scaling on Hopper, MXFP8 on Blackwell; module/linear.py, layernorm_linear.py, grouped_linear.py,
``update_usage(rowwise_usage=False)``), where bf16 keeps 2 B. Not cut: MLA's down-projection input (its
two projections keep a 1-byte copy each in Megatron-Core's unfused layout), the shared experts' fc1
input (``save_original_input`` on TransformerEngine >= 2.6: the MoE block's input, kept anyway), the
output projection's input under non-delayed recipes (``save_original_input``: the attention output,
which the attention keeps); under delayed scaling that projection adds a 1-byte copy of the attention
output, not charged here."""
# what each of Megatron-Core's --recompute-modules drops (recompute = selective), in Korthikanti's
# per-token units (bytes per token per hidden unit at a 4h FFN width):
ACT_NORM_OUTPUT_BYTES_PER_TOKEN_HIDDEN = 2.0  # layernorm: a separate norm's bf16 output (TransformerEngine
                                              # fuses the input norm into linear_qkv and a dense layer's
                                              # pre-MLP norm into fc1, gpt_layer_specs.py: only MLA's input
                                              # norm and an MoE layer's pre-MLP norm are separate)
ACT_MOE_INPUT_BYTES_PER_TOKEN_HIDDEN = 2.0  # an MoE block's bf16 input (the pre-MLP norm's output), kept by
                                            # the router and the permutation
ACT_MLP_FC2_INPUT_BYTES_PER_TOKEN_HIDDEN = 8.0  # moe_act: the activation's output, fc2's input (4h x 2 B,
                                                # of the MLP's 19 sbh; the FFN's width, gated or not)
HBM_ACHIEVED_FRACTION = 0.89
"""Fraction of the datasheet HBM bandwidth a streaming kernel sustains: ``x.clone()`` of 134-268 MB
bf16 tensors on the H100 SXM (``autotune/data/h100``, kind copy) runs at 2.92-2.98 TB/s of 3.35
(0.87-0.89; STREAM-like copies on HBM3 reach about the same). Every memory-bound term pays it
(``kernels.memory_bound_time_s``)."""
RMSNORM_TRAFFIC_BYTES_PER_ELEMENT = 6.0
"""A bf16 RMSNorm whose rows do not stay on chip reads its input twice (the sum of squares, then
the scaling) and writes once: 3 x 2 B a token and hidden unit; the H100's ``F.rms_norm`` moves its
4 B of input and output in the time of 6 B at the copy rate (``autotune kernels``, kind rmsnorm_fwd)."""
NORM_RECOMPUTE_TRAFFIC_BYTES_PER_TOKEN_HIDDEN = RMSNORM_TRAFFIC_BYTES_PER_ELEMENT
"""Re-running one separate norm in the backward (layernorm in recompute_modules): a two-pass norm over
the bf16 hidden vector, 6 B a token and hidden unit (the norms of a layer's forward are in
``ELEMENTWISE_TRAFFIC_BYTES_PER_TOKEN_HIDDEN``'s estimate)."""

# ---- activations of PyTorch eager autograd (WorkloadSpec.activation_memory = "eager") ----
# Derived from what autograd saves, counted with torch.autograd.graph.saved_tensors_hooks on the
# reference workload's Llama block (tests/test_workload_memory.py holds the count): per token
# and layer, elements of the activation dtype.
ACT_EAGER_NORM_ELEMS_PER_TOKEN_HIDDEN = 3.0   # RMSNorm: its input, input x rsqrt, its output
ACT_EAGER_GATED_MLP_ELEMS_PER_TOKEN_FFN = 4.0  # SwiGLU: gate and up (2f), silu(gate), their product
ACT_EAGER_PLAIN_MLP_ELEMS_PER_TOKEN_FFN = 2.0  # GELU MLP: its input and its output
# (attention: queries, keys, values and the attention output, qv_width + kv_width)
EAGER_LOGITS_KEPT_BYTES = 4.0
"""Bytes per logit (token x vocab / tp) kept for each micro-batch in flight on the rank that holds
the head: torch's cross-entropy keeps its fp32 log-softmax output; torch.distributed.pipelining
also keeps the stage output (the logits, 4 B more) for the stage's backward."""
EAGER_LOGITS_TRANSIENT_BYTES = 8.0
"""Bytes per logit live once, when the loss's backward starts: the gradients of the log-softmax
output and of the logits (fp32)."""
HBM_USABLE_GIB_PER_NOMINAL_GB = 0.989
"""Device memory a framework can allocate from, in GiB per GB of the datasheet's nominal HBM size:
PyTorch reports an 80 GB H100 at 79.11 GiB total capacity (vllm-project/vllm#27508), an 80 GB
A100 at 79.25 GiB (levihsu/OOTDiffusion#235), a 40 GB A100 at 39.50 GiB (TianheWu/CoSeR#10):
0.987-0.991. Nominal sizes are binary gigabytes less what ECC and the driver keep; read as decimal
gigabytes (80e9 B) they understated an 80 GB GPU by 6%. Used for the hardware presets' hbm_bytes
and for a runs file's stated HBM size (``hbm_bytes_of_nominal_gb``)."""


def hbm_bytes_of_nominal_gb(nominal_gb: float) -> float:
    """Bytes a framework can allocate on a GPU sold as ``nominal_gb`` GB of HBM."""
    return nominal_gb * HBM_USABLE_GIB_PER_NOMINAL_GB * 2.0**30


HOST_LINK_EFFICIENCY = 0.8
"""Share of a GPU's host link (HardwareSpec.host_link_Bps) a pinned-memory copy stream sustains
(PCIe's packet and flow-control overhead leaves ~80-85% of a Gen4/Gen5 x16 link's nominal rate to
cudaMemcpyAsync; assumed the same for NVLink-C2C): the activation offloading copies."""
FRAMEWORK_RESERVED_BYTES = 3.0e9
"""CUDA context, NCCL buffers and allocator fragmentation: an engineering allowance (assumed)."""

# ---- compute ----
CAUSAL_ATTENTION_WORK_FRACTION = 0.5
"""Causal FlashAttention skips the masked upper triangle of QK^T (Dao 2023): half the core work."""
FA2_SLOW_FROM_COMPUTE_CAPABILITY = 9.0
"""From this SM version (Hopper) on, FlashAttention-2 is not the GPU's native fused attention kernel
(it has no code path for warpgroup MMA and TMA) and runs at ``kernels.fa2_speed_ratio``; below it,
FA2 is the native kernel (Ampere)."""
FA2_HOPPER_SPEED_RATIO_HDIM64 = 0.70
FA2_HOPPER_SPEED_RATIO_HDIM128 = 0.62
"""FlashAttention-2's forward + backward speed over the native fused kernel (cuDNN) on GPUs of
compute capability 9.0 or newer, which FA2 runs without their warpgroup MMA and TMA instructions,
at head dim 64 and 128: Shah et al. 2024 (FlashAttention-3, arXiv:2407.08608), H100 SXM5, 4k, 8k,
16k tokens, FA2 / cuDNN TFLOP/s (the forward figures without the causal mask; with it the ratios
are within 0.01): head dim 128 forward 368/609, 370/600, 370/595, backward 310/499, 318/518,
322/516; head dim 64 forward 321/408, 322/412, 324/413, backward 279/417, 287/432, 291/433.
Forward and backward combined at the backward's 2.5x the forward's FLOPs,
3.5 / (1 / r_fwd + 2.5 / r_bwd): 0.616, 0.615, 0.623 (mean 0.618) and 0.699, 0.694, 0.701 (mean 0.698)
(``kernels.fa2_speed_ratio``; WorkloadSpec.attention_kernel). Caveats: the native level here is
this project's H100 SDPA calibration, whose causal forward (610-654 TFLOP/s at 8k-32k) is faster
than the paper's 2024 cuDNN, so against it FA2 may be slower still; Blackwell (10.x) takes the
Hopper ratios, an extrapolation (FA2 has no Blackwell code path either)."""
UNFUSED_SOFTMAX_TRAFFIC_BYTES_PER_SCORE = 10.0
"""Unfused attention (pre-FlashAttention Megatron): the s x s scores go through HBM: write QK^T
(2 B), fused scale-mask-softmax read + write (4 B), dropout read + write + mask (5 B) ~ 10 B per
score element in forward, twice that in backward."""
TE_PIPELINE_SPLIT_PIECES = 4.0
"""GEMM pieces of TransformerEngine's "pipeline" comm-GEMM overlap (the row-parallel forward
GEMMs, proj_fprop and fc2_fprop, whose reduce-scatter follows each piece): ``num_splits`` 4 in
``initialize_ub``'s defaults from TE 1.0 to 2.x (transformer_engine/pytorch/module/base.py) and
in NeMo's userbuffers configs for H100. Its "ring_exchange" GEMMs run one piece per TP rank."""
ELEMENTWISE_TRAFFIC_BYTES_PER_TOKEN_HIDDEN = 68.0
"""Memory-bound elementwise kernels (norms, activations, residuals, dropout) move roughly the
stored-activation bytes twice (write + read): 2 x 34 bytes per token per hidden unit per layer."""
MOE_PERMUTE_TRAFFIC_BYTES_PER_ROUTED_ELEMENT = 8.0
"""MoE token permutation (gather routed copies into expert order) and un-permutation (scatter
back, weighted sum): each reads and writes every routed element once, 2 + 2 B in bf16, so 8 B
per routed token per hidden unit per MoE layer pass. Memory-bound: the H100 measurements
(``autotune/data/h100``, kind moe_permute) run it at ~3.1 TB/s, about the HBM rate."""
SCATTER_ADD_BF16_ELEMENTS_PER_S = 1.24e11
"""bf16 elements a second that eager PyTorch's atomic scatter-add (``index_add_``, ``scatter_add``)
adds into its destination on Hopper: the median of the six H100 cases of kind moe_unpermute
(``autotune/data/h100``: 16k-8k tokens, top-2 and top-8, hidden 4-16k; 0.70-0.79 TB/s counted as
6 B an element: read the source, read and write the destination), 744 GB/s / 6 B. Atomic-bound,
not HBM-bound: the H200, never fit on, runs the same cases at 0.72-0.82 TB/s with 1.4x the HBM
bandwidth. Taken as is for every GPU (measured on Hopper only). Used where the MoE layer
un-permutes that way (``WorkloadSpec.moe_unpermute``)."""
STRIDED_ELEMENTWISE_BF16_ELEMENTS_PER_S = 3.57e11
"""bf16 output elements a second that an eager PyTorch element-wise kernel writes when an input is
a strided view (``a, b = x.chunk(2, -1)``: TensorIterator leaves its vectorised path and computes
every element's offsets, so the SMs bound the kernel, not the HBM): the median of the three H100
cases of kind swiglu_fwd (``autotune/data/h100``: ``F.silu(u[:, :h]) * u[:, h:]``, 8-16k tokens, h
4-16k; two such kernels, 3.46-3.58e11 elements a second each). SM-bound, not HBM-bound: the
H200, never fit on, runs the same cases at 2.98-3.83e11 with 1.4x the HBM bandwidth (the same 132
SMs and clock; its smallest case, h = 4,096, runs 16% slower than this rate). The data fix the two
kernels' sum: giving silu and the product the same rate is an assumption. Taken as is for every
GPU (measured on Hopper only; an A100's fewer, slower SMs would run slower). Used by
``kernels.eager_gated_activation_time_s``."""
CROSS_ENTROPY_FWD_TRAFFIC_BYTES_PER_LOGIT = 38.0
CROSS_ENTROPY_BWD_TRAFFIC_BYTES_PER_LOGIT = 14.0
"""The loss over the head's logits, memory-bound passes per logit on the head's rank (each rank
its vocab / tp share), as Megatron-Core's vocab-parallel cross-entropy runs it on ``logits.float()``
(tensor_parallel/cross_entropy.py; nanotron's sharded_cross_entropy is the same sequence).
Forward: the bf16 -> fp32 cast (2 B read, 4 B written), the row max (4 B), the max subtracted
(4 + 4), exp (4 + 4), the row sum (4), the division into the softmax kept for backward (4 + 4):
38 B. Backward: softmax x the incoming gradient (4 + 4), cast back to bf16 for the head's
input-gradient GEMM (4 + 2): 14 B. Small next to a large model's layers; at hidden 2-4k and a
50-150k vocabulary it weighs about a layer."""

# ---- network ----
PACKET_SPRAY_EFFICIENCY = 0.95
"""Per-packet spraying / adaptive routing: near-full bisection; 5% lost to headers and reorder
buffers (assumed; switch vendors quote 90-97% effective utilisation)."""
PACKET_SPRAY_REORDER_PROB = 1e-3
"""Probability a sprayed packet arrives out of order and, under go-back-N, triggers a window
retransmission (assumed; paths of unequal queueing delay)."""
SR_TAIL_TIMEOUT_FRACTION = 0.01
"""Fraction of losses that selective repeat can only recover by a retransmission timeout (tail
losses with no later packet to reveal the gap) (assumed)."""
RTO_MIN_s = 1e-4
"""Minimum retransmission timeout of the RDMA transport (assumed, tuned RoCE deployments)."""
DEFAULT_BUCKET_BYTES = 40e6 * 2.0
"""Gradient bucket of a framework class without a documented default below (jax, other): 80 MB,
Megatron-Core's 40M-parameter minimum at 2 bytes per bf16 gradient."""
FRAMEWORK_BUCKET_ELEMS = {
    # class: (minimum elements per bucket, elements per data-parallel rank), bytes = elements x wire bytes
    "megatron": (40e6, 1e6),     # Megatron-Core DistributedDataParallelConfig.bucket_size: "max(40000000,
                                 # 1000000 * dp_size) parameters (larger DP sizes need larger buckets to
                                 # ensure collectives do not become latency-bound)", dp_size with CP
    "deepspeed": (5e8, 0.0),     # DeepSpeed config: zero_optimization.reduce_bucket_size and
                                 # allreduce_bucket_size, 500,000,000 elements each by default
}
"""Elements per gradient bucket when the configuration leaves it to the framework (dp_bucket_mib = 0);
one collective per bucket, the last one exposed (pipeline.step_end_exposed)."""
ZERO3_PREFETCH_BUCKET_ELEMS = 5e7
"""Parameters DeepSpeed ZeRO-3 (v0.6 and later) gathers in one coalesced all-gather at most:
stage3_prefetch_bucket_size's default, 50,000,000 elements (runtime/zero/config.py); the module
being fetched and those prefetched after it share the call (WorkloadSpec.fsdp_gather = module)."""
ZERO3_MAX_LIVE_PARAMETERS_ELEMS = 1e9
"""Parameters DeepSpeed ZeRO-3 keeps gathered before its prefetch stops: stage3_max_live_parameters'
default, 1,000,000,000 elements (runtime/zero/config.py); the coordinator prefetches at most
min(this - gathered, stage3_prefetch_bucket_size) elements (PartitionedParameterCoordinator.fetch_sub_module)."""
ZERO3_REDUCE_BUCKET_ELEMS = 5e8
"""Gradient elements per reduce-scatter of DeepSpeed ZeRO-3 (v0.6 and later): reduce_bucket_size's
default, 500,000,000 (reduce_scatter_coalesced over the bucket)."""
ZERO3_MAX_REUSE_DISTANCE_ELEMS = 1e9
"""DeepSpeed ZeRO-3 keeps a fetched parameter after its module ran only if the parameter is used
again within this many parameters of the modules traced next (stage3_max_reuse_distance's default,
1,000,000,000 from v0.3 to today; PartitionedParameterCoordinator.__params_to_release). Under full
recomputation a module's recompute forward and its backward are separated by twice the parameters
of the modules after it in the layer, so the large early modules of a large layer are gathered
again for their backward (``zero3.zero3_refetch_share``)."""
LIST_COLLECTIVE_COPY_s = 5e-6
"""Host seconds per rank of a list all-gather or reduce-scatter: PyTorch's ProcessGroupNCCL (1.8-1.10)
runs one NCCL call on a flat buffer and copies each of the world-size list entries out of it (into
it, for reduce-scatter), one copy launch each. DeepSpeed ZeRO-3 up to v0.5 called it once per
parameter tensor, after a torch.cuda.synchronize (partition_parameters._allgather_param), so the
copies are exposed: world size x this per call (WorkloadSpec.fsdp_gather = parameter). 5 us: one
ATen copy launch through the dispatcher and the CUDA driver (assumed)."""
ONE_BUCKET_WITHOUT_OVERLAP_FRAMEWORKS = frozenset({"megatron"})
"""Framework classes that reduce the whole gradient in one collective where the reduction does not
overlap the backward: Megatron-Core sets bucket_size = None unless overlap_grad_reduce
(distributed_data_parallel.py)."""
TORCH_DDP_BUCKET_BYTES = 25.0 * 2**20
"""Bytes per gradient bucket of torch.nn.parallel.DistributedDataParallel (bucket_cap_mb = 25 MiB):
the pytorch class's DDP flavour and nanotron, which wraps torch DDP for every flavour
(``ddp_bucket_cap_mb``). The pytorch class's ZeRO-1 frameworks (InternEvo, Colossal-AI) have
buckets of their own (Colossal-AI's reduce_bucket_size_in_m = 12M elements); DEFAULT_BUCKET_BYTES
stands in for them, a placeholder. Megatron-DeepSpeed rows run in the megatron class and get
Megatron's buckets, though DeepSpeed's engine reduces their gradients (500M elements)."""
# ---- host (CPU) dispatch: the floor under a layer pass whose kernels are smaller than their launch ----
# Kernel counts weigh the host time of a layer's parts against a dense layer's
# (CostParams.host_layer_fwd_us: the host time of HOST_KERNELS_DENSE_LAYER_FWD launches).
HOST_KERNELS_DENSE_LAYER_FWD = 12.0
"""Kernels an eager framework launches for one dense layer's forward (counted from the Llama/GPT
block as Megatron-Core and torchtitan run it): input norm, QKV GEMM, rotary on q and on k (2),
attention core, output projection, residual add, pre-MLP norm, fc1 (gate and up fused),
activation, fc2, residual add."""
HOST_KERNELS_UNFUSED_ATTENTION_EXTRA = 4.0
"""Extra kernels of unfused attention (no FlashAttention) over the one fused core: QK^T batched
GEMM, scale-mask-softmax, dropout, PV batched GEMM and a layout copy, in place of one kernel."""
HOST_KERNELS_TP_LAYER_FWD = 4.0
"""Tensor-parallel collectives of one layer's forward under sequence parallelism: 2 all-gathers and
2 reduce-scatters (Korthikanti et al. 2022, sec. 4.2.2), each one launch."""
HOST_KERNELS_CP_STEP_FWD = 4.0
"""Extra kernels per ring step of context parallelism beyond the first, per layer forward
(TransformerEngine's P2P ring attention): the step's attention kernel on the arrived K/V block,
the batched send/receive of the next block, and the two kernels that merge the partial outputs by
their softmax statistics."""
HOST_KERNELS_MOE_EXTRA_FWD = 6.0
"""Extra kernels of an MoE layer's forward over a dense one, on Megatron-Core's fused path
(--moe-router-fusion, --moe-permute-fusion): router GEMM, fused softmax and top-k, fused
permutation, dispatch all-to-all, fused un-permutation, combine all-to-all; the grouped expert
GEMMs take fc1's and fc2's places. (An unfused router and permutation launch about 14.)"""
HOST_BACKWARD_OVER_FORWARD = 1.0
"""Host time of a layer's backward over its forward's: about twice the kernels (input- and
weight-gradient GEMMs, element-wise backward), launched by autograd's C++ engine without the
forward's Python frames, at about half the per-kernel host cost (assumed)."""
HOST_WGRAD_SHARE_OF_BACKWARD = 1.0 / 6.0
"""Share of a layer's backward launches that belong to its weight-gradient pass: one weight-gradient
GEMM per linear (4 in a dense layer: QKV, output projection, fc1, fc2) of about 24 backward
launches (twice the forward's HOST_KERNELS_DENSE 12). The zero-bubble schedules run that pass on
its own (Qi et al. 2024), so it is floored on its own; the rest floors the input-gradient pass."""

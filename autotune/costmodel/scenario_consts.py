"""Per-scenario constants of the cost model, computed once and cached (the hot path only does
array arithmetic over configurations)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..specs.scenario import Scenario
from . import constants as C
from .kernels import fa2_speed_ratio, gemm_out_weight
from .network import effective_bandwidth_Bps
from .params import CostParams
from .xp import NUMPY, SCALAR


@dataclass(frozen=True)
class ScenarioConsts:
    L: float; h: float; ffn: float; heads: float; kv_dim: float; vocab: float; seq: float
    attn_gemms: tuple            # (K, N, tp-split dimension) per attention projection (ModelSpec.attn_gemms)
    qv_width: float              # heads x (d_qk + d_v): the attention core's FLOPs per query-key pair / 2
    kv_width: float              # key + value elements per token (CP's exchange)
    qk_head_dim: float
    attn_keys: float             # keys per query the kernel computes, mean over layers
    model_attn_keys: float       # keys per query counted in model FLOPs
    experts: float; top_k: float; shared: float; ffn_e: float; moe_frac: float
    mlp_mats: float; attn_params: float; dense_mlp_params: float; moe_other_params: float
    expert_params: float; global_batch: float; n_gpus: float
    B: float; G_b: float; node: float; zone: float; b_pp_hybrid: float; b_dp_hybrid: float
    peak_lin: float; peak_bf16: float; ridge: float
    peak_precision: float        # datasheet peak at the precision, GPU-weighted mean over the buildings (MFU)
    gemm_out_weight: float       # 2 for fp8 GEMMs (bf16 output, 1-byte operands; kernels.gemm_efficiency)
    hbm_bytes: float; hbm_Bps: float; nvlink_Bps: float; nvlink_alpha_s: float; nic_Bps: float
    so_Bps: float; so_alpha_s: float; cz_Bps: float; cz_alpha_s: float
    tier_bw_table: object        # (NVLink, scale-out, cross-zone) bandwidth, for tier_of_span
    tier_alpha_table: object     # their one-way latencies
    x_uplink_Bps: float; x_alpha_s: float; x_rtt_s: float; x_paths: int; x_loss: float; x_mtu: int
    x_rto_s: float
    ll128: bool                  # NCCL's LL128 protocol runs on every building's nodes
    fsdp_unit_layers: float      # layers per FSDP unit (one all-gather / reduce-scatter each)
    x_tier: object
    x_tier_name: str             # "cross_region" where buildings span regions, else "cross_building"
    net_eff: float
    flash: bool
    attn_speed: float            # attention kernel speed over the native one (WorkloadSpec.attention_kernel)
    eager_acts: bool             # WorkloadSpec.activation_memory == "eager"
    dots_acts: bool              # WorkloadSpec.activation_memory == "dots"
    post_validation: bool        # WorkloadSpec.optimizer_post_validation
    tp_overlap: bool             # WorkloadSpec.tp_comm_overlap
    ep_overlap: bool             # WorkloadSpec.ep_comm_overlap
    ep_dedup: bool               # WorkloadSpec.ep_token_dedup
    expert_load: float           # busiest EP rank's routed tokens over the mean (expert_load)
    einsum_cols: float           # einsum dispatch's mask columns e x c per token of the layer's input (einsum_columns)
    compute_scale: float         # 1 / framework_efficiency of the workload's framework class
    wire_bytes: float            # bytes per element of activations (TP, CP, EP, PP messages)
    weight_bytes: float; grad_bytes: float; optimizer_bytes: float   # resident, per parameter
    reduce_bytes: float          # per gradient element on DDP / ZeRO-1 reductions (WorkloadSpec.resolved_grad_reduce_dtype)
    fsdp_reduce_bytes: float     # on FSDP / HSDP reductions (resolved_fsdp_grad_reduce_dtype); DP all-gathers
                                 # move weight_bytes a parameter
    fsdp_regather: int           # FSDP_EVERY_PASS, FSDP_FORWARD or FSDP_NEVER
    shard_gradients: bool        # WorkloadSpec.shard_gradients (ZeRO-2 under the zero1 flavour)
    pp_layout: int               # LAYOUT_EVEN, LAYOUT_ENDS or LAYOUT_BALANCED (WorkloadSpec.pipeline_layout)
    head_layer_equiv: float      # the head's block cost in layers, nanotron's weights (balanced split)
    loss_blocks: bool            # the logits' fp32 cast and the loss are pipeline blocks of their own (nanotron)
    rc_modules: frozenset = frozenset({"core_attn"})   # WorkloadSpec.recompute_modules (recompute = selective)
    zero1_bcast: bool = False          # WorkloadSpec.zero1_param_sync == "broadcast" (InternEvo)
    zero1_group: float = 0.0           # WorkloadSpec.zero1_shard_ranks (0: all data-parallel ranks)
    offload: frozenset = frozenset()   # WorkloadSpec.offload_modules (fine-grained activation offloading)
    host_link_Bps: float = 64.0e9      # the slowest GPU's host link, one direction (HardwareSpec.host_link_Bps)
    q_width: float = 0.0               # query elements per token (heads x d_qk), core_attn's input with keys and values
    v_out_width: float = 0.0           # attention output elements per token (heads x d_v), attn_proj's input
    attn_act_elems: float = 0.0  # elements per token the attention block's GEMMs and core keep (ModelSpec)
    mla_up_elems: float = 0.0    # of them, MLA's up-projected queries, keys and values (mla_up_proj)
    mla: float = 0.0             # 1.0 for multi-latent attention (its input norm is a separate module)
    mla_latent_elems: float = 0.0  # MLA's normed latents per token, the up projections' inputs (q_lora + kv_lora)
    fp8_input_cut: float = 0.0   # share of a GEMM input's 16-bit bytes not kept (fp8: ACT_FP8_GEMM_INPUT_CUT_SHARE)
    mla_up_gemms: tuple = ()     # MLA's up projections as (K, N) per token, N split by TP
    adam_traffic_bytes: float = C.ADAM_STEP_TRAFFIC_BYTES_PER_PARAM   # per owned parameter (WorkloadSpec.optimizer_moments)
    bucket_min_bytes: float = C.DEFAULT_BUCKET_BYTES   # the framework's default gradient bucket (framework_bucket)
    bucket_bytes_per_rank: float = 0.0                 # ... grown by this per data-parallel rank (dp x cp)
    ddp_bucket_bytes: float = 0.0                      # > 0: the DDP flavour's bucket instead (torch DDP)
    one_bucket_without_overlap: bool = False           # C.ONE_BUCKET_WITHOUT_OVERLAP_FRAMEWORKS
    scatter_unpermute: bool = False  # MoE un-permutation by eager atomic scatter-add (WorkloadSpec.moe_unpermute)
    moe_input_tp_replicated: bool = False  # torchtitan (pytorch class): the MoE input whole on every TP rank
    host_s_dense: float = 0.0    # host seconds to launch one dense layer's forward (no TP collectives)
    host_s_moe: float = 0.0      # ... one MoE layer's
    host_s_tp: float = 0.0       # ... a layer's TP collectives (tp > 1)
    host_s_cp_step: float = 0.0  # ... a layer's context-parallel ring step beyond the first
    fsdp_gather: int = 0         # FSDP_GATHER_UNIT, _MODULE or _PARAMETER (WorkloadSpec.fsdp_gather)
    layer_linears: float = 4.0   # linear modules of a layer (fsdp_gather_counts)
    layer_tensors: float = 6.0   # parameter tensors of a layer (fsdp_gather_counts)
    layer_modules: tuple = ()    # the layer's linear modules in forward order, (parameters, split by tp)


FSDP_EVERY_PASS, FSDP_FORWARD, FSDP_NEVER = range(3)
FSDP_GATHER_UNIT, FSDP_GATHER_MODULE, FSDP_GATHER_PARAMETER = range(3)
_FSDP_GATHER = {"unit": FSDP_GATHER_UNIT, "module": FSDP_GATHER_MODULE, "parameter": FSDP_GATHER_PARAMETER}
_REGATHER = {"every_pass": FSDP_EVERY_PASS, "forward": FSDP_FORWARD, "never": FSDP_NEVER}
LAYOUT_EVEN, LAYOUT_ENDS, LAYOUT_BALANCED = range(3)
_LAYOUT = {"even": LAYOUT_EVEN, "ends": LAYOUT_ENDS, "balanced": LAYOUT_BALANCED}


def head_layer_equivalents(m) -> float:
    """The head's weight in layers as nanotron weighs pipeline blocks (``get_block_compute_costs``):
    vocab x hidden for the head over 4 n_heads d_head hidden (all four attention projections at
    full width, GQA ignored) + mlp_matrices x d_ff x hidden for a layer; a MoE layer's d_ff is its
    routed top-k and shared experts'. Averaged over the dense and MoE layers."""
    attn = 4 * m.n_heads * m.qk_head_dim * m.hidden
    dense = attn + m.mlp_matrices * m.ffn_hidden * m.hidden
    moe = attn + m.mlp_matrices * (m.moe_top_k + m.moe_shared_experts) * m.moe_ffn_hidden * m.hidden
    frac = m.n_moe_layers / m.n_layers
    return m.vocab * m.hidden / ((1.0 - frac) * dense + frac * moe)


def precision_bytes(precision: str, moments: str = "fp32", grad_dtype: str = "fp32",
                    fp8_params: bool = False) -> tuple[float, float, float, float]:
    """(wire, weight, gradient, optimizer) bytes per element / parameter of a precision.
    Mixed precision (bf16/fp16/fp8 GEMMs): bf16 on the wire, 2 + 4 + 12 resident
    (``constants``); fp32 throughout: 4 on the wire, fp32 weights and gradients, Adam m and v
    (4 + 4 + 8 = 16 B/param, no separate master copy). bf16 ``moments`` (WorkloadSpec.optimizer_moments)
    keep m and v in 2 B each: 4 B fewer of optimizer state; a bf16 ``grad_dtype`` keeps a 2 B gradient
    buffer, ``fp8_params`` (fp8 only) 1 B working weights (WorkloadSpec.grad_dtype, fp8_param_gather)."""
    saved = C.ADAM_BF16_MOMENTS_SAVED_BYTES_PER_PARAM if moments == "bf16" else 0.0
    if precision == "fp32":
        return C.FP32_BYTES, C.FP32_BYTES, C.FP32_BYTES, 2 * C.FP32_BYTES - saved
    weight = C.FP8_WEIGHT_BYTES_PER_PARAM if fp8_params and precision == "fp8" else C.WEIGHT_BYTES_PER_PARAM
    grad = C.BF16_GRAD_BYTES_PER_PARAM if grad_dtype == "bf16" else C.GRAD_BYTES_PER_PARAM
    return C.ACTIVATION_BYTES, weight, grad, C.OPTIMIZER_BYTES_PER_PARAM - saved


def adam_traffic_bytes(w, state_bytes) -> float:
    """HBM bytes of one fused Adam step per owned parameter: ``constants.ADAM_STEP_TRAFFIC_BYTES_PER_PARAM``
    (fp32 m, v, master and gradient read, m, v and master written, a bf16 weight copy written),
    less what bf16 moments and fp8 working weights do not move (the weight copy written at 1 B).
    A bf16 gradient buffer saves nothing here: Megatron's optimizer casts the bf16 gradient to an
    fp32 main gradient before the step (``shard_main_param.grad = shard_model_grad.float()``)."""
    _, weight, _, _ = state_bytes
    saved = C.ADAM_BF16_MOMENTS_TRAFFIC_SAVED_BYTES_PER_PARAM if w.optimizer_moments == "bf16" else 0.0
    if w.precision != "fp32":
        saved += C.WEIGHT_BYTES_PER_PARAM - weight
    return C.ADAM_STEP_TRAFFIC_BYTES_PER_PARAM - saved


def hybrid_split(B: int) -> tuple[int, int]:
    """Buildings split over pp x dp for the hybrid placement: smallest proper factor to pp."""
    for f in range(2, B):
        if B % f == 0:
            return f, B // f
    return 0, 0


def _intra_tier_Bps(tier, gpus_below: int, nic_Bps: float, net_eff: float) -> float:
    """Per-GPU goodput inside a building tier when every GPU below it sends across at once,
    with the tier's declared transport (load balancing, QPs, loss recovery)."""
    uplink = gpus_below * tier.bandwidth_Bps / tier.oversubscription
    lb = {"ecmp": 0, "qp_spray": 1, "packet_spray": 2}[tier.load_balancing]
    lr = {"gbn": 0, "sr": 1}[tier.loss_recovery]
    rtt = 2 * tier.one_way_latency_s
    bw = effective_bandwidth_Bps(lb, float(tier.queue_pairs), lr, float(gpus_below), uplink, nic_Bps, tier.paths(uplink),
                                 rtt, tier.loss_rate, tier.mtu_bytes, net_eff, rto_s=tier.rto_s(rtt), xp=SCALAR)
    return float(bw)


def scenario_consts(scenario: Scenario, params: CostParams) -> ScenarioConsts:
    """Cached on the (immutable) scenario object, per parameter set."""
    cache = scenario._derived
    key = ("costmodel", id(scenario), params)
    hit = cache.get(key)
    if hit is not None and hit[0] is scenario:      # owner check: never another object's constants
        return hit[1]
    if len(cache) > 32:
        cache.clear()
    k = _compute_consts(scenario, params)
    cache[key] = (scenario, k)
    return k


def expert_load(w, p: CostParams) -> float:
    """The busiest expert-parallel rank's routed tokens over the mean (WorkloadSpec.moe_routing):
    dropless, CostParams.dropless_expert_imbalance; capacity factor c, min(c, that): tokens past
    capacity are dropped (without padding to capacity a rank never carries more than its natural
    load; einsum dispatch pads every expert to its capacity, c, ``einsum_columns``); balanced, 1."""
    if w.moe_routing == "balanced":
        return 1.0
    if w.moe_routing == "capacity":
        cf = w.moe_capacity_factor
        return cf if w.moe_einsum_dispatch else min(cf, p.dropless_expert_imbalance)
    return p.dropless_expert_imbalance


def einsum_columns(w, m, p: CostParams) -> float:
    """Columns e x c of GShard-style dispatch masks (WorkloadSpec.moe_einsum_dispatch) per token of
    the MoE layer's input, 0 without them. DeepSpeed-MoE (sharded_moe.py ``_capacity``): c = ceil(k
    cf s / e) slots an expert, so e c = k cf s under capacity routing; dropless, c is the busiest
    expert's count (the dispatcher's all-reduce of the maximum), k s x the imbalance; balanced, k s."""
    if not (w.moe_einsum_dispatch and m.moe_experts):
        return 0.0
    return m.moe_top_k * expert_load(w, p)


def ep_load(k: ScenarioConsts, ep, xp=NUMPY):
    """The busiest EP rank's routed load over the mean: ``k.expert_load`` across ep > 1 ranks; at
    ep 1 every rank holds every expert and carries the mean. Under einsum dispatch every expert
    runs its c slots, padded, whatever the routing (``einsum_columns`` / top-k, at any ep)."""
    if k.einsum_cols:
        return k.expert_load
    return xp.where(ep > 1, k.expert_load, 1.0)


def _compute_consts(scenario: Scenario, params: CostParams) -> ScenarioConsts:
    m, c = scenario.model, scenario.cluster
    gpus = [b.gpu for b in c.buildings]
    # synchronous training runs at the pace of its slowest GPU; memory must fit the smallest
    slow = min(gpus, key=lambda g: (g.peak_flops(scenario.precision) or g.peak_flops_bf16)
               * generation_efficiency(params, g))
    sustained = generation_efficiency(params, slow)
    peak_bf16 = slow.peak_flops_bf16
    if scenario.precision == "fp32":
        peak_bf16 = slow.peak_flops("fp32")          # every GEMM and the attention core run in fp32
    ridge = peak_bf16 / slow.hbm_bandwidth_Bps       # roofline ridge of the datasheet peak (the kernel-fitted shape)
    peak_bf16 = peak_bf16 * sustained
    if scenario.precision == "fp8":
        ratio = slow.peak_flops_fp8 / slow.peak_flops_bf16
        peak_lin = peak_bf16 * (1.0 + (ratio - 1.0) * params.fp8_gemm_speedup_realised)
    else:
        peak_lin = peak_bf16
    nic = min(g.nic_bandwidth_Bps for g in gpus)
    G_b = min(b.gpus for b in c.buildings)
    zone = min(c.zone_gpus, G_b)
    so_Bps = _intra_tier_Bps(c.scale_out, zone, nic, params.network_efficiency)
    cz = c.cross_zone or c.scale_out
    cz_Bps = _intra_tier_Bps(cz, G_b, nic, params.network_efficiency)
    xt = c.inter_building_tier or c.scale_out
    b_pp_h, b_dp_h = hybrid_split(c.n_buildings)
    x_uplink = G_b * xt.bandwidth_Bps / xt.oversubscription
    caps = {g.compute_capability for g in gpus}
    nvlink_Bps = min(g.nvlink_bandwidth_Bps for g in gpus) * params.nvlink_efficiency
    nvlink_alpha_s = max(g.nvlink_latency_s for g in gpus)
    ll128 = all(g.nccl_ll128 for g in gpus) and (len(caps) == 1 or min(caps) >= 9.0)
    state_bytes = precision_bytes(scenario.precision, scenario.workload.optimizer_moments,
                                  scenario.workload.grad_dtype, scenario.workload.fp8_param_gather)
    k = ScenarioConsts(
        L=m.n_layers, h=m.hidden, ffn=m.ffn_hidden, heads=m.n_heads, kv_dim=m.kv_dim, vocab=m.vocab,
        attn_gemms=m.attn_gemms, qv_width=m.n_heads * (m.qk_head_dim + m.v_dim), kv_width=m.kv_width,
        qk_head_dim=m.qk_head_dim,
        attn_keys=m.attention_keys_per_query(scenario.seq_len, scenario.workload.flash_attention),
        model_attn_keys=m.attention_model_keys(scenario.seq_len),
        seq=scenario.seq_len, experts=m.moe_experts, top_k=m.moe_top_k, shared=m.moe_shared_experts,
        ffn_e=m.moe_ffn_hidden, moe_frac=m.n_moe_layers / m.n_layers, mlp_mats=m.mlp_matrices,
        attn_params=m.attn_params, dense_mlp_params=m.dense_mlp_params,
        moe_other_params=m.moe_layer_nonexpert_params, expert_params=m.expert_params,
        global_batch=scenario.global_batch_seqs, n_gpus=c.n_gpus,
        B=c.n_buildings, G_b=G_b, node=min(g.nvlink_domain_gpus for g in gpus), zone=zone,
        b_pp_hybrid=b_pp_h, b_dp_hybrid=b_dp_h,
        peak_lin=peak_lin, peak_bf16=peak_bf16, gemm_out_weight=gemm_out_weight(scenario.precision), peak_precision=sum(b.gpus * b.gpu.peak_flops(scenario.precision) for b in c.buildings) / c.n_gpus,
        ridge=ridge,
        hbm_bytes=min(g.hbm_bytes for g in gpus), hbm_Bps=min(g.hbm_bandwidth_Bps for g in gpus),
        nvlink_Bps=nvlink_Bps, nvlink_alpha_s=nvlink_alpha_s, nic_Bps=nic,
        so_Bps=so_Bps, so_alpha_s=c.scale_out.one_way_latency_s,
        cz_Bps=cz_Bps, cz_alpha_s=cz.one_way_latency_s,
        tier_bw_table=np.array([nvlink_Bps, so_Bps, cz_Bps]),
        tier_alpha_table=np.array([nvlink_alpha_s, c.scale_out.one_way_latency_s, cz.one_way_latency_s]),
        x_uplink_Bps=x_uplink, x_alpha_s=xt.one_way_latency_s,
        x_rtt_s=2 * xt.one_way_latency_s, x_paths=xt.paths(x_uplink), x_loss=xt.loss_rate, x_mtu=xt.mtu_bytes,
        x_rto_s=xt.rto_s(2 * xt.one_way_latency_s), ll128=ll128,
        fsdp_unit_layers=float(scenario.workload.fsdp_unit_layers),
        x_tier=xt, x_tier_name="cross_region" if len({b.region for b in c.buildings}) > 1 else "cross_building",
        net_eff=params.network_efficiency, flash=scenario.workload.flash_attention,
        attn_speed=fa2_speed_ratio(m.qk_head_dim) if scenario.workload.attention_kernel == "fa2" and slow.compute_capability >= C.FA2_SLOW_FROM_COMPUTE_CAPABILITY else 1.0,
        eager_acts=scenario.workload.activation_memory == "eager",
        dots_acts=scenario.workload.activation_memory == "dots",
        post_validation=scenario.workload.optimizer_post_validation,
        tp_overlap=scenario.workload.tp_comm_overlap, ep_overlap=scenario.workload.ep_comm_overlap,
        ep_dedup=scenario.workload.ep_token_dedup,
        expert_load=expert_load(scenario.workload, params),
        einsum_cols=einsum_columns(scenario.workload, m, params),
        compute_scale=1.0 / framework_efficiency(params, scenario.workload.framework),
        **dict(zip(("wire_bytes", "weight_bytes", "grad_bytes", "optimizer_bytes"), state_bytes)),
        adam_traffic_bytes=adam_traffic_bytes(scenario.workload, state_bytes),
        reduce_bytes=C.FP32_BYTES if scenario.workload.resolved_grad_reduce_dtype == "fp32" else C.ACTIVATION_BYTES,
        fsdp_reduce_bytes=C.FP32_BYTES if scenario.workload.resolved_fsdp_grad_reduce_dtype == "fp32"
        else C.ACTIVATION_BYTES,
        fsdp_regather=_REGATHER[scenario.workload.fsdp_regather],
        shard_gradients=scenario.workload.shard_gradients,
        pp_layout=_LAYOUT[scenario.workload.resolved_pipeline_layout], head_layer_equiv=head_layer_equivalents(m),
        loss_blocks=scenario.workload.framework == "nanotron",
        rc_modules=frozenset(scenario.workload.recompute_modules),
        zero1_bcast=scenario.workload.zero1_param_sync == "broadcast",
        zero1_group=float(scenario.workload.zero1_shard_ranks),
        offload=frozenset(scenario.workload.offload_modules), host_link_Bps=min(g.host_link_Bps for g in gpus),
        q_width=float(m.n_heads * m.qk_head_dim), v_out_width=float(m.n_heads * m.v_dim),
        attn_act_elems=m.attention_saved_elems, mla_up_elems=m.mla_up_elems, mla_up_gemms=m.mla_up_gemms,
        mla=1.0 if m.attention == "mla" else 0.0,
        mla_latent_elems=float(m.mla_latent_elems),
        fp8_input_cut=C.ACT_FP8_GEMM_INPUT_CUT_SHARE if scenario.precision == "fp8" else 0.0,
        **framework_bucket(scenario.workload.framework,
                           C.FP32_BYTES if scenario.workload.resolved_grad_reduce_dtype == "fp32" else C.ACTIVATION_BYTES),
        one_bucket_without_overlap=scenario.workload.framework in C.ONE_BUCKET_WITHOUT_OVERLAP_FRAMEWORKS,
        scatter_unpermute=scenario.workload.resolved_moe_unpermute == "scatter_add",
        moe_input_tp_replicated=scenario.workload.framework == "pytorch",
        **host_launch_seconds(params, scenario.workload.flash_attention, all(g.async_launch for g in gpus)),
        fsdp_gather=_FSDP_GATHER[scenario.workload.fsdp_gather], **fsdp_gather_counts(m),
    )
    return k


def fsdp_gather_counts(m) -> dict:
    """Linear modules and parameter tensors of one layer, as ZeRO-3 fetches them
    (WorkloadSpec.fsdp_gather): the attention projections (``ModelSpec.attn_gemms``: fused QKV
    and output for GQA) and Megatron's two MLP linears (fc1 with gate and up fused, fc2); a
    GPT-style layer (not gated) carries a bias on each linear and LayerNorm's two tensors on each
    of its 2 norms, a gated (Llama-style) one weights only and RMSNorm's one. GPT-3: 4 linears,
    12 tensors. ``layer_modules``: the linears' parameters in forward order (QKV, output, fc1 with
    gate and up, fc2), and whether TP splits each."""
    bias = 0.0 if m.mlp_matrices == 3 else 1.0
    linears = float(len(m.attn_gemms) + 2)
    modules = tuple((float(K * N), split != "") for K, N, split in m.attn_gemms) + (
        (float(m.hidden * (m.mlp_matrices - 1) * m.ffn_hidden), True), (float(m.ffn_hidden * m.hidden), True))
    return {"layer_linears": linears, "layer_tensors": linears * (1.0 + bias) + 2.0 * (1.0 + bias),
            "layer_modules": modules}


def host_launch_seconds(params: CostParams, flash: bool, async_launch: bool = True) -> dict:
    """Host seconds to issue one layer's forward (``CostParams.host_layer_fwd_us`` for a dense
    layer with fused attention, other parts weighed by their kernel counts,
    ``constants.HOST_KERNELS_*``): dense, MoE, the TP collectives and a CP ring step. All 0 where
    a device runs its work on the calling thread (``HardwareSpec.async_launch`` false: CPU ranks)."""
    per_s = params.host_layer_fwd_us * 1e-6 / C.HOST_KERNELS_DENSE_LAYER_FWD if async_launch else 0.0
    dense = C.HOST_KERNELS_DENSE_LAYER_FWD + (0.0 if flash else C.HOST_KERNELS_UNFUSED_ATTENTION_EXTRA)
    return {"host_s_dense": per_s * dense, "host_s_moe": per_s * (dense + C.HOST_KERNELS_MOE_EXTRA_FWD),
            "host_s_tp": per_s * C.HOST_KERNELS_TP_LAYER_FWD, "host_s_cp_step": per_s * C.HOST_KERNELS_CP_STEP_FWD}


def framework_bucket(framework: str, reduce_bytes: float) -> dict:
    """The framework class's default gradient bucket (dp_bucket_mib = 0) as bytes of the reduced
    gradients (``reduce_bytes`` an element) = max(min, per_rank x dp x cp): Megatron-Core max(40M,
    1M x dp x cp) parameters (one bucket where the gradient reduction does not overlap the
    backward: terms.dp_comm_groups), DeepSpeed 500M elements, torch DDP 25 MiB whatever the dtype
    (nanotron; the pytorch class's DDP flavour: fp32 gradients fill twice the buckets), others 80 MB
    (constants.FRAMEWORK_BUCKET_ELEMS, TORCH_DDP_BUCKET_BYTES, DEFAULT_BUCKET_BYTES)."""
    out = {"bucket_min_bytes": C.DEFAULT_BUCKET_BYTES, "bucket_bytes_per_rank": 0.0, "ddp_bucket_bytes": 0.0}
    if framework == "nanotron":
        out["bucket_min_bytes"] = C.TORCH_DDP_BUCKET_BYTES
    elif framework == "pytorch":
        out["ddp_bucket_bytes"] = C.TORCH_DDP_BUCKET_BYTES
    elif framework in C.FRAMEWORK_BUCKET_ELEMS:
        lo, per = C.FRAMEWORK_BUCKET_ELEMS[framework]
        out.update(bucket_min_bytes=lo * reduce_bytes, bucket_bytes_per_rank=per * reduce_bytes)
    return out


def generation_efficiency(params: CostParams, gpu) -> float:
    """Sustained fraction of a GPU's datasheet compute peak relative to the kernel-measured
    levels (an H100's), by its SM version (CostParams.gpu_generation_efficiency_*): 10 and above
    Blackwell, 9.x Hopper (1.0: the kernels' own generation), above 0 and below 9 Ampere and
    older; a CPU rank (compute capability 0, its peak calibrated by ``autotune calibrate``) 1.0."""
    cc = gpu.compute_capability
    if cc >= 10.0:
        return params.gpu_generation_efficiency_blackwell
    if cc >= 9.0:
        return params.gpu_generation_efficiency_hopper
    if cc > 0.0:
        return params.gpu_generation_efficiency_ampere
    return 1.0


def framework_efficiency(params: CostParams, framework: str) -> float:
    """The framework class's compute speed relative to the isolated kernels (CostParams.framework_efficiency_*)."""
    return getattr(params, f"framework_efficiency_{framework}")

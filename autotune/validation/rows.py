"""One runs-CSV row as a RunCase (a single-building Scenario and a Config), or a Skip naming the
column, the value and the reason (``runs_file`` reads whole files)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

from ..specs.scenario import module_misfit
from ..specs import Config, Scenario
from ..specs.cluster import ClusterSpec, TierSpec
from ..specs.model import ModelSpec
from ..specs.workload import WorkloadSpec
from .columns import (schedule_stated, ALWAYS_RECOMPUTE_SOURCES, ASSUMED_FFN_MULTIPLE, GATED_NAME_RULE, map_activation,
                      map_attention, ASSUMED_INTERLEAVED_CHUNKS, ASSUMED_MICRO_BATCH,
                      ASSUMED_SCALE_OUT_LATENCY_s, ASSUMED_VOCAB, COLUMNS, MAX_SCALE_OUT_PATHS,
                      RECOMPUTE_VALUES, Skip, _cell, _int,
                      _match_flavour, _match_schedule, map_flavour, map_gpu, map_schedule, one_line,
                      source_family)
from .measurement import _check_plausible, _measurement
from .deepspeed_engine import deepspeed_reduces_after_backward, is_deepspeed_zero3
from .row_fields import (RACK_SCALE_DOMAIN_GPUS, _attention_kernel, _shared_experts, _convention, _fsdp_gather, _flag, _flash, _grad_dtype, _grad_reduce_dtype, _moments, _pipeline_layout, _recompute_modules, _offload_modules, _zero1_sync, _ep_dispatcher, _ep_overlap, _float, _framework, _hardware,
                         _post_validation, _tp_overlap)
from .moe_fields import _moe_routing, _moe_unpermute

@dataclass
class RunCase:
    row: int
    model_name: str
    source: str
    notes: str
    metric: str
    measured: float
    scenario: Scenario
    config: Config
    recompute_stated: bool
    micro_batch_stated: bool
    family: str = ""
    gpu: str = ""
    line: int = 0
    assumptions: list = field(default_factory=list)
    """What the row left unstated and the value the code took for it (printed with the row)."""
    flops_convention: str = "model"
    """How the row's TFLOP/s or MFU counts FLOPs: model (no recomputation) or hardware (with it)."""
    peak_memory_gb: float | None = None
    """Measured peak GPU memory of the run (GB), where the source gives it: checks the memory model."""
    schedule_stated: bool = True
    """The row names its pipeline schedule or vpp (``predict.unstated_schedules`` chooses one where not)."""


def _spec_name(name: str, i: int) -> str:
    """The row's model name as a spec name: only letters, digits, space and . _ + - ( ), starting
    alphanumeric (the name is a label here; an odd character never costs a row)."""
    s = re.sub(r"[^A-Za-z0-9 ._+()-]", " ", name)
    s = " ".join(s.split())[:100].lstrip(" ._+()-")
    return s or f"row {i}"


_SPEC_FIELD_COLUMN = {"name": "model_name", "moe_top_k": "moe_topk", "moe_ffn_hidden": "expert_ffn_hidden",
                      "gpus": "n_gpus", "moe_layer_step": "moe_layer_step", "first_k_dense": "first_k_dense"}


def _spec_skip(exc: Exception, row: dict) -> Skip:
    """A spec's validation error, named by the CSV column it came from where it has one."""
    errs = getattr(exc, "errors", None)
    if callable(errs):
        try:
            err = exc.errors()[0]
            loc = [p for p in err.get("loc", ()) if isinstance(p, str)]
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            if loc:
                col = _SPEC_FIELD_COLUMN.get(loc[-1], loc[-1])
                return Skip(one_line(msg, 160), col, _cell(row, col) if col in COLUMNS else str(err.get("input")))
            return Skip("impossible row: " + one_line(msg, 160))
        except Exception:  # noqa: BLE001 - fall through to the plain message
            pass
    return Skip("impossible row: " + one_line(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, 160))


class _Arch(NamedTuple):
    """The row's model: what the rest of the row is checked against, and ModelSpec's fields."""
    name: str
    L: int
    heads: int
    kv: int
    seq: int
    experts: int
    spec: dict


def _architecture(row: dict, i: int, assumed: list) -> _Arch:
    """The model of a row whose n_layers, hidden and n_heads are given: the unstated fields take
    their documented defaults (each appended to ``assumed``); Skip where the architecture is
    impossible (heads, kv heads, top-k) or names an unknown activation or attention."""
    name = _cell(row, "model_name")
    L, h, heads = _int(row, "n_layers"), _int(row, "hidden"), _int(row, "n_heads")

    def stated_or(col, default, why, allow_zero=False):
        if not _cell(row, col):
            assumed.append(f"{col}={default} ({why})")
        return _int(row, col, default, allow_zero=allow_zero)

    kv = _int(row, "n_kv_heads", heads)
    ffn = stated_or("ffn_hidden", ASSUMED_FFN_MULTIPLE * h, f"{ASSUMED_FFN_MULTIPLE} x hidden")
    vocab = stated_or("vocab", ASSUMED_VOCAB, "Megatron GPT's padded vocabulary")
    seq = _int(row, "seq_len")
    experts = _int(row, "moe_experts", 0, allow_zero=True)
    if _cell(row, "moe_topk") and not experts:
        raise Skip("moe_topk on a dense model (moe_experts empty or 0)", "moe_topk", _cell(row, "moe_topk"))
    topk = stated_or("moe_topk", 1, "not stated", allow_zero=True) if experts else 0
    head_dim = _int(row, "head_dim", 0, allow_zero=True)
    if h % heads and not head_dim:
        raise Skip(f"hidden {h} is not divisible by n_heads {heads} (and head_dim is not given)", "hidden",
                   _cell(row, "hidden"))
    if heads % kv:
        raise Skip(f"n_heads {heads} is not divisible by n_kv_heads {kv}", "n_kv_heads", _cell(row, "n_kv_heads"))
    if experts and not 1 <= topk <= experts:
        raise Skip(f"moe_topk must be 1..moe_experts ({experts})", "moe_topk", _cell(row, "moe_topk"))
    act_text = _cell(row, "activation")
    act = map_activation(act_text) if act_text else None
    if act_text and act is None:
        raise Skip("names no known activation (swiglu, geglu, gelu, relu, squared-relu)", "activation", act_text)
    if act is None:
        act = "swiglu" if re.search(GATED_NAME_RULE, name.lower()) else "gelu"
        assumed.append(f"activation={act} (from the model name)")
    attn_text = _cell(row, "attention")
    attention = map_attention(attn_text) if attn_text else "gqa"
    if attention is None:
        raise Skip("names no known attention (mha, gqa, mqa, mla)", "attention", attn_text)
    mla = {c: _int(row, c, 0, allow_zero=True) for c in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim")}
    if attention != "mla" and any(mla.values()):
        attention = "mla"          # MLA ranks stated: the attention is MLA whatever the text says
    v_head = _int(row, "v_head_dim", 0, allow_zero=True)
    window = _int(row, "sliding_window", 0, allow_zero=True)
    n_window = _int(row, "sliding_window_layers", L if window else 0, allow_zero=True) if window else 0
    if window and not _cell(row, "sliding_window_layers"):
        assumed.append(f"sliding_window_layers={L} (every layer)")
    ffn_e = 0
    if experts:
        ffn_e = stated_or("expert_ffn_hidden", ffn, "ffn_hidden")
    shared = _shared_experts(row, ffn_e) if experts else 0
    first_dense = _int(row, "first_k_dense", 0, allow_zero=True) if experts else 0
    layer_step = _int(row, "moe_layer_step", 1) if experts else 1
    spec = dict(name=_spec_name(name, i), n_layers=L, hidden=h, ffn_hidden=ffn, n_heads=heads, n_kv_heads=kv,
                vocab=vocab, seq_len=seq, activation=act, head_dim=head_dim, attention=attention, v_head_dim=v_head,
                sliding_window=window, sliding_window_layers=n_window, moe_experts=experts, moe_top_k=topk,
                moe_ffn_hidden=ffn_e, moe_shared_experts=shared, first_k_dense=first_dense,
                moe_layer_step=layer_step, **mla)
    return _Arch(name, L, heads, kv, seq, experts, spec)


class _Parallel(NamedTuple):
    """The row's parallel layout and the MoE settings that go with it."""
    n: int
    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    etp: int
    vpp: int
    mb: int
    gb: int
    tp_overlap: bool
    ep_overlap: bool
    ep_dedup: bool
    routing: str
    capacity: float
    ep_einsum: bool = False
    unpermute: str | None = None


def _parallelism(row: dict, a: _Arch, assumed: list) -> _Parallel:
    """The degrees (dp derived from n_gpus where unstated), the overlaps and routing, the
    micro-batch and the global batch; Skip where they do not multiply out or the model cannot
    be split so."""
    n = _int(row, "n_gpus")
    assumed += [f"{c}=1 (not stated)" for c in ("tp", "pp") if not _cell(row, c)]
    tp, pp, cp, ep = _int(row, "tp", 1), _int(row, "pp", 1), _int(row, "cp", 1), _int(row, "ep", 1)
    if n % (tp * pp * cp):
        raise Skip(f"n_gpus {n} is not divisible by tp*pp*cp = {tp * pp * cp}", "n_gpus", _cell(row, "n_gpus"))
    dp = _int(row, "dp", n // (tp * pp * cp))
    if tp * pp * cp * dp != n:
        raise Skip(f"tp*pp*cp*dp = {tp * pp * cp * dp} does not match n_gpus {n}", "dp", _cell(row, "dp"))
    if a.heads % tp or a.kv % tp:
        raise Skip(f"tp must divide n_heads ({a.heads}) and n_kv_heads ({a.kv})", "tp", _cell(row, "tp"))
    if pp > a.L:
        raise Skip(f"more pipeline stages than n_layers ({a.L})", "pp", _cell(row, "pp"))
    if (a.seq // 2) % cp:
        raise Skip(f"cp must divide seq_len/2 ({a.seq // 2}): each rank holds two sequence chunks", "cp",
                   _cell(row, "cp"))
    experts = a.experts
    if ep > 1 and not experts:
        raise Skip("expert parallelism on a dense model (moe_experts empty or 0)", "ep", _cell(row, "ep"))
    etp = _int(row, "etp", 0, allow_zero=True)
    if etp and not experts:
        raise Skip("expert tensor parallelism on a dense model (moe_experts empty or 0)", "etp", _cell(row, "etp"))
    if etp and tp % etp:
        raise Skip(f"etp must divide tp ({tp})", "etp", _cell(row, "etp"))
    et = etp or tp
    tp_overlap = _tp_overlap(row, assumed, tp)
    ep_overlap = _ep_overlap(row, assumed, ep if experts else 1)
    ep_dedup, ep_einsum = _ep_dispatcher(row, assumed, ep if experts else 1)
    if ep_einsum and not experts:
        raise Skip("an einsum MoE dispatcher on a dense model (moe_experts empty or 0)", "ep_dispatcher",
                   _cell(row, "ep_dispatcher"))
    routing, capacity = _moe_routing(row, assumed, experts)
    unpermute = _moe_unpermute(row, experts, ep_einsum)
    if ep_overlap and not experts:
        raise Skip("EP overlap on a dense model (moe_experts empty or 0)", "ep_comm_overlap",
                   _cell(row, "ep_comm_overlap"))
    if experts and (experts % ep or (tp * dp * cp) % (et * ep)):
        raise Skip(f"ep must divide moe_experts ({experts}), and etp*ep = {et * ep} must divide tp*dp*cp "
                   f"({tp * dp * cp})", "ep", _cell(row, "ep"))
    vpp = _int(row, "vpp", 0, allow_zero=True)
    mb = _int(row, "micro_batch", ASSUMED_MICRO_BATCH)
    gb = _int(row, "global_batch_seqs")
    if gb % (dp * mb):
        raise Skip(f"global batch {gb} is not a multiple of dp*micro_batch = {dp * mb}", "global_batch_seqs",
                   _cell(row, "global_batch_seqs"))
    return _Parallel(n, tp, pp, cp, ep, dp, etp, vpp, mb, gb, tp_overlap, ep_overlap, ep_dedup, routing, capacity,
                     ep_einsum, unpermute)


def _precision_and_hardware(row: dict, gpu: str, n: int, tp: int, assumed: list):
    """(precision, HardwareSpec) of the row: the GPU preset with what the row states of it
    (``row_fields._hardware``), its NVLink domain cut to the part of a rack-scale domain the job
    fills; Skip where TP leaves one domain or the job fills no whole number of them."""
    precision = _cell(row, "precision").lower() or "bf16"
    if precision not in ("bf16", "fp16", "fp8"):
        raise Skip("not bf16/fp16/fp8", "precision", _cell(row, "precision"))
    hw = _hardware(row, gpu, assumed)
    if precision == "fp8" and not hw.peak_flops_fp8:
        raise Skip(f"the {gpu} preset has no fp8 peak", "precision", _cell(row, "precision"))
    dom = hw.nvlink_domain_gpus
    if n > dom and n % dom and dom > RACK_SCALE_DOMAIN_GPUS:
        # a rack-scale domain (GB200 NVL72) is not filled by a job whose size it does not divide:
        # the job runs on equal parts of several domains, the largest part that divides it
        part = max(d for d in range(1, dom + 1) if n % d == 0)
        if part >= dom // 2:
            hw = hw.model_copy(update={"nvlink_domain_gpus": part})
            assumed.append(f"NVLink domain of {part} GPUs ({n} GPUs over {n // part} domains of {dom})")
            dom = part
    if tp > dom:
        raise Skip(f"tensor parallelism beyond one NVLink domain ({dom} {gpu} GPUs) is not modelled (the cost "
                   "model runs TP on NVLink)", "tp", _cell(row, "tp"))
    if n > dom and n % dom:
        raise Skip(f"more than one {gpu} NVLink domain ({dom} GPUs) but not a whole number of them", "n_gpus",
                   _cell(row, "n_gpus"))
    return precision, hw


def build_case(i: int, row: dict) -> RunCase:
    """Turn one CSV row into a scenario + config, or raise Skip with the reason: the measurement,
    the architecture, the framework and FLOP convention, the parallel layout, precision and
    hardware, then the schedule, DP flavour and recomputation, in that order (the first problem
    found is the one reported; the assumptions are listed in the same order)."""
    metric, measured = _measurement(row)
    empty = [k for k in ("n_layers", "hidden", "n_heads") if not _cell(row, k)]
    if empty:
        raise Skip("model architecture not given (n_layers/hidden/n_heads empty)", empty[0], "")
    if not any(_cell(row, k) for k in ("tp", "pp", "dp")):
        raise Skip("parallel configuration not given (tp/pp/dp empty)", "tp", "")
    if "pcie" in _cell(row, "gpu_type").lower():
        raise Skip("a PCIe card: the presets are the SXM / NVLink parts (PCIe H100 and A100 have lower clocks, "
                   "peak and HBM bandwidth, and no 8-GPU NVLink domain)", "gpu_type", _cell(row, "gpu_type"))
    gpu = map_gpu(row.get("gpu_type") or "")
    if gpu is None:
        raise Skip("matches no hardware preset (A100, H100, H200, H800, B200, GB200)", "gpu_type",
                   _cell(row, "gpu_type"))
    assumed: list[str] = []
    a = _architecture(row, i, assumed)
    name, L = a.name, a.L
    framework = _framework(row, assumed)
    convention = _convention(row, assumed, metric)
    par = _parallelism(row, a, assumed)
    n, tp, pp, cp, ep, dp, etp, vpp, mb, gb = par[:10]
    precision, hw = _precision_and_hardware(row, gpu, n, tp, assumed)
    _check_plausible(metric, measured, precision, hw, gpu)
    sched_text = _cell(row, "pipeline_schedule")
    if pp > 1 and schedule_stated(sched_text) and vpp <= 1 and _match_schedule(sched_text) is None:
        raise Skip("names no known schedule (1F1B, interleaved, ZB-1p, ZB-2p, ZB-V, GPipe, DualPipe)",
                   "pipeline_schedule", sched_text)
    flavour_text = _cell(row, "zero_or_fsdp")
    if flavour_text and _match_flavour(flavour_text) is None:
        raise Skip("names no known data-parallel flavour (none, ddp, zero1, zero2, zero3, fsdp, hsdp)", "zero_or_fsdp",
                   flavour_text)
    if flavour_text and _match_flavour(flavour_text) == "offload":
        raise Skip("CPU offload is not modelled (the cost model keeps every state in HBM)", "zero_or_fsdp",
                   flavour_text)
    rec = _cell(row, "recompute").lower()
    if rec and rec not in RECOMPUTE_VALUES:
        raise Skip("not none/selective/full (empty = not stated)", "recompute", _cell(row, "recompute"))
    modules = _recompute_modules(row, assumed, rec)
    offload = _offload_modules(row)
    moments = _moments(row)
    grad_dtype = _grad_dtype(row)
    reduce_dtype = _grad_reduce_dtype(row)
    fp8_params = _flag(row, assumed, "fp8_param_gather", 2 if precision == "fp8" else 1)
    if modules and not rec:
        rec = "selective"
    sched = map_schedule(sched_text, vpp) if pp > 1 else "1f1b"
    if sched == "interleaved_1f1b" and vpp == 1:
        raise Skip("1 with an interleaved schedule (one chunk per stage is plain 1F1B): vpp > 1, or empty for "
                   f"{ASSUMED_INTERLEAVED_CHUNKS}", "vpp", _cell(row, "vpp"))
    layout = _pipeline_layout(row, assumed, framework, pp)
    post_validation = _post_validation(row, assumed, sched)
    chunks = (vpp or ASSUMED_INTERLEAVED_CHUNKS) if sched == "interleaved_1f1b" else (
        2 if sched in ("zbv", "dualpipev") else 1)
    # only a stated vpp; embedding and head may take a chunk each (Megatron-LM's
    # --account-for-embedding/loss-in-pipeline-split; Qi et al.): up to n_layers + 2 chunks
    if vpp > 1 and pp * vpp > L + 2:
        raise Skip(f"pp*vpp = {pp * vpp} model chunks for {L} layers (at most n_layers + 2: embedding and "
                   "head may take a chunk each)", "vpp", _cell(row, "vpp"))
    try:
        model = ModelSpec(**a.spec)
        misfit = module_misfit(modules.split(","), model) if modules else ""
        if misfit:
            raise Skip(misfit, "recompute_modules", _cell(row, "recompute_modules"))
        cluster = ClusterSpec(name="published-run", buildings=({"gpus": n, "gpu": hw},),
                              scale_out=TierSpec(bandwidth_Bps=hw.nic_bandwidth_Bps,
                                                 n_paths=min(max(n, 1), MAX_SCALE_OUT_PATHS),
                                                 latency_s=ASSUMED_SCALE_OUT_LATENCY_s,
                                                 load_balancing="packet_spray", loss_recovery="sr"))
        flash = _flash(row, assumed)
        attn_kernel = _attention_kernel(row, flash, hw.compute_capability, assumed)
        flavour = map_flavour(flavour_text, framework)
        regather = "every_pass"
        if flavour == "fsdp_noreshard":
            flavour, regather = "fsdp", "forward"
        ds_zero3 = flavour == "fsdp" and is_deepspeed_zero3(flavour_text, _cell(row, "framework"),
                                                            row.get("source") or "")
        ds_after = deepspeed_reduces_after_backward(flavour, flavour_text, _cell(row, "framework"),
                                                    row.get("source") or "")
        gather = _fsdp_gather(row, assumed, ds_zero3) if flavour == "fsdp" and dp * cp > 1 else "unit"
        z1_sync, z1_group = _zero1_sync(row, assumed, flavour, dp * cp) if dp * cp > 1 else ("all_gather", 0)
        zero2 = flavour == "zero2" and dp * cp > 1        # ZeRO-2 shards over data-parallel ranks only
        if flavour == "zero2":
            flavour = "zero1"
        scen = Scenario(model=model, workload=WorkloadSpec(global_batch_seqs=gb, seq_len=a.seq, precision=precision,
                                                           flash_attention=flash, attention_kernel=attn_kernel,
                                                           framework=framework,
                                                           activation_memory="dots" if framework == "jax" else "fused",
                                                           tp_comm_overlap=par.tp_overlap,
                                                           ep_comm_overlap=par.ep_overlap,
                                                           ep_token_dedup=par.ep_dedup,
                                                           moe_einsum_dispatch=par.ep_einsum,
                                                           moe_routing=par.routing, moe_capacity_factor=par.capacity,
                                                           moe_unpermute=par.unpermute,
                                                           optimizer_post_validation=post_validation,
                                                           fsdp_regather=regather, shard_gradients=zero2,
                                                           fsdp_gather=gather, zero1_param_sync=z1_sync,
                                                           zero1_shard_ranks=z1_group,
                                                           pipeline_layout=layout,
                                                           recompute_modules=modules or ("core_attn",),
                                                           offload_modules=offload,
                                                           optimizer_moments=moments, grad_dtype=grad_dtype,
                                                           grad_reduce_dtype=reduce_dtype,
                                                           fp8_param_gather=fp8_params),
                       cluster=cluster)
    except Skip:
        raise
    except Exception as e:  # noqa: BLE001 - any spec error makes this row unusable; say why
        raise _spec_skip(e, row) from None
    if not flavour_text and dp * cp > 1:
        assumed.append(f"zero_or_fsdp={flavour} (not stated; {framework}'s default)")
    if framework == "jax" and rec == "selective":
        assumed.append("activation_memory=dots (the jax class's own: MaxText's remat keeps the matmuls' outputs)")
    if a.experts and not par.ep_einsum and par.unpermute is None and scen.workload.resolved_moe_unpermute != "fused":
        assumed.append(f"moe_unpermute={scen.workload.resolved_moe_unpermute} (the {framework} class's own: "
                       "torchtitan's atomic combine)")
    if dp * cp == 1:
        flavour = "ddp"
    elif reduce_dtype is None and precision != "fp32":
        w = scen.workload
        assumed.append("grad_reduce_dtype="
                       + (w.resolved_fsdp_grad_reduce_dtype if flavour in ("fsdp", "hsdp") else w.resolved_grad_reduce_dtype)
                       + f" (not stated; the {framework} class's own)")
    if not rec and any(k in (row.get("source") or "").lower() for k in ALWAYS_RECOMPUTE_SOURCES):
        rec = "full"
        assumed.append("recompute=full (the source recomputes in every run)")
    overlap = 1
    if ds_zero3:
        overlap = 0
        assumed.append("overlap_dp=0 (DeepSpeed ZeRO-3: gathers and reduce-scatters not overlapped)")
    elif ds_after and dp * cp > 1:
        overlap = 0
        assumed.append("overlap_dp=0 (DeepSpeed's engine without ZeRO-3 or overlap_comm: the gradients are "
                       "reduced after the backward)")
    cfg = Config(tp=tp, cp=cp, ep=ep, etp=etp, pp=pp, dp=dp, placement="dp_out", dp_flavour=flavour,
                 pp_schedule=sched, pp_chunks=chunks, micro_batch=mb, overlap_dp=overlap,
                 recompute=rec if rec in RECOMPUTE_VALUES else "none")
    return RunCase(i, name, row.get("source") or "", row.get("notes") or "", metric, measured, scen, cfg,
                   rec in RECOMPUTE_VALUES, bool(_cell(row, "micro_batch")),
                   family=source_family(row.get("source") or ""), gpu=gpu, assumptions=assumed,
                   flops_convention=convention, peak_memory_gb=_float(row, "peak_memory_gb"),
                   schedule_stated=pp == 1 or vpp >= 1 or schedule_stated(sched_text))

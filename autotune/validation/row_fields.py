"""Per-row readers of the optional columns: framework class, FLOP convention, positive numbers,
and the hardware a row states (HBM size and bandwidth, NIC speed) on top of its GPU preset."""
from __future__ import annotations

import math
import re

from ..specs.presets import load_preset
from ..specs.workload import default_pipeline_layout
from ..costmodel.constants import FA2_SLOW_FROM_COMPUTE_CAPABILITY, hbm_bytes_of_nominal_gb
from .columns import (ALWAYS_RECOMPUTE_SOURCES, ASSUMED_FRAMEWORK, PRE_FLASH_SOURCES, Skip, _cell, gpu_memory_gb,
                      map_attention_kernel, map_convention, map_flash, map_framework, map_grad_dtype, map_grad_reduce_dtype, map_moments, map_pipeline_layout,
                      map_offload_modules, map_recompute_modules)


RACK_SCALE_DOMAIN_GPUS = 8
"""NVLink domains larger than a server (GB200 NVL72) are racks a job may fill in part; a server's
domain (8 GPUs) is filled whole."""


def _stated(row: dict, column: str, mapper, why: str):
    """The column's value read by ``mapper`` (free text -> canonical value), None where the cell is
    empty; a value the mapper cannot read skips the row with ``why``, the column and the value."""
    text = _cell(row, column)
    if not text:
        return None
    value = mapper(text)
    if value is None:
        raise Skip(why, column, text)
    return value


_VERSION = re.compile(r"(?<![\d.])v?(\d+)\.(\d+)")
_FSDP_GATHER_WORDS = [(r"^(unit|module|parameter)(?:$|\s*[(;,:])", None),   # the value alone, or before a note
                      (r"\bper[- ]?(?:param(?:eter)?|tensor)s?\b|\beach (?:param(?:eter)?|tensor)\b", "parameter"),
                      (r"coalesc", "module"),
                      (r"fsdp|fully_shard|wrap|\bunits?\b|\bblocks?\b|\blayers?\b", "unit"),
                      (r"\bmodules?\b", "module"),
                      (r"\bparam(?:eter)?s?\b|\btensors?\b", "parameter")]
"""Spellings of ``fsdp_gather`` (WorkloadSpec.fsdp_gather), tried in this order: the value itself,
alone or before a note in brackets; "per parameter" / "per tensor"; "coalesced" (module); FSDP, fully_shard,
wrap policies, units, blocks, layers (unit); "module"; "parameter" / "tensor". A DeepSpeed version
(the cell names DeepSpeed, or holds nothing but a version such as "v0.5.4") reads by number:
up to 0.5 per parameter, from 0.6 per module (``all_gather_coalesced`` arrived in v0.6.0)."""


def read_fsdp_gather(text: str) -> str | None:
    """The granularity a ``fsdp_gather`` cell names (``_FSDP_GATHER_WORDS``), None if none."""
    t = text.lower().strip()
    first = re.match(_FSDP_GATHER_WORDS[0][0], t)
    if first:
        return first.group(1)
    version = _VERSION.search(t)
    if version and ("deepspeed" in t or re.fullmatch(r"v?\d+\.\d+(?:\.\d+)?", t)):
        return "parameter" if (int(version.group(1)), int(version.group(2))) <= (0, 5) else "module"
    return next((name for pat, name in _FSDP_GATHER_WORDS[1:] if re.search(pat, t)), None)


def _fsdp_gather(row: dict, assumed: list, deepspeed_zero3: bool) -> str:
    """``fsdp_gather`` as stated; empty: ``module`` for a DeepSpeed ZeRO-3 row (named among the
    row's assumptions: what DeepSpeed has done since v0.6), ``unit`` otherwise."""
    stated = _stated(row, "fsdp_gather", read_fsdp_gather, "not one of unit, module or parameter (how FSDP / ZeRO-3 "
                     "issues its collectives; a DeepSpeed version such as 0.5 or 0.7 also reads)")
    if stated is not None:
        return stated
    if deepspeed_zero3:
        assumed.append("fsdp_gather=module (not stated; DeepSpeed ZeRO-3 since v0.6)")
        return "module"
    return "unit"


def _framework(row: dict, assumed: list) -> str:
    fw = _stated(row, "framework", map_framework, "names no known framework (megatron-lm, megatron-core, nemo, "
                 "deepspeed, torchtitan, composer, pytorch-fsdp, nanotron, maxtext, other:<name>)")
    if fw is not None:
        return fw
    fw = map_framework(row.get("source") or "")
    if fw is None:
        fw = ASSUMED_FRAMEWORK
        assumed.append(f"framework={fw} (not stated)")
    else:
        assumed.append(f"framework={fw} (from the source)")
    return fw


def _flash(row: dict, assumed: list) -> bool:
    """Fused attention as the row states it; where it does not, unfused for the sources published
    before FlashAttention (``PRE_FLASH_SOURCES``, printed with the row), else fused."""
    text = _cell(row, "flash_attention")
    unstated = "not stated" in text.lower() and map_flash(text) is None     # "not stated": as if empty
    flash = None if unstated else _stated(row, "flash_attention", map_flash, "names no known attention kernel "
                                          "(yes/FlashAttention/cuDNN/SDPA = fused, no/unfused/math/eager = unfused)")
    if flash is not None:
        return flash
    if any(k in (row.get("source") or "").lower() for k in PRE_FLASH_SOURCES):
        assumed.append("unfused attention (published before FlashAttention)")
        return False
    return True


def _attention_kernel(row: dict, flash: bool, compute_capability: float, assumed: list) -> str:
    """The fused kernel the flash_attention cell names (``map_attention_kernel``); where it names
    none, the GPU's native one, printed with the row on GPUs where FlashAttention-2 would run
    slower (``FA2_SLOW_FROM_COMPUTE_CAPABILITY`` and newer: WorkloadSpec.attention_kernel)."""
    kernel = map_attention_kernel(_cell(row, "flash_attention")) if flash else None
    if kernel is None and flash and compute_capability >= FA2_SLOW_FROM_COMPUTE_CAPABILITY:
        assumed.append("attention kernel native (cuDNN / FlashAttention-3 class; no version stated)")
    return kernel or "native"


_SHARED_WIDTH = re.compile(r"^\s*(?:(\d+)\s*[x*]\s*)?(\d+)\s*(?:wide|width)\s*$|^\s*(?:width\s*[=:]?\s*)(\d+)\s*$")


def read_shared_experts(text: str, expert_ffn: int) -> int | None:
    """``moe_shared_experts``: a count of routed-expert widths ("1", "8"), or the shared experts'
    width ("20480 wide", "width 20480", "2 x 1408 wide"), read as that width over expert_ffn_hidden
    (Qwen2-57B-A14B's one shared expert of 20480 is 8 widths of its 2,560-wide routed experts).
    None where the text is neither, or the width is not a whole number of expert widths."""
    t = (text or "").strip().lower()
    if re.fullmatch(r"\d+", t):
        return int(t)
    m = _SHARED_WIDTH.match(t)
    if not m or expert_ffn <= 0:
        return None
    width = int(m.group(2) or m.group(3)) * int(m.group(1) or 1)
    return width // expert_ffn if width % expert_ffn == 0 else None


def _shared_experts(row: dict, expert_ffn: int) -> int:
    """Shared experts in routed-expert widths (ModelSpec.moe_shared_experts), 0 where empty."""
    shared = _stated(row, "moe_shared_experts", lambda t: read_shared_experts(t, expert_ffn),
                     f"neither a count of expert widths nor a width that is a whole multiple of "
                     f"expert_ffn_hidden {expert_ffn} (e.g. 1, or '20480 wide')")
    return shared or 0


def _pipeline_layout(row: dict, assumed: list, framework: str, pp: int) -> str | None:
    """``pipeline_layout`` as stated (even / ends / balanced, or their spellings); not stated, ends
    for torchtitan (named in ``framework`` or the source), else None: the framework class's default
    (WorkloadSpec.resolved_pipeline_layout). Printed with the row where pp > 1."""
    layout = _stated(row, "pipeline_layout", map_pipeline_layout, "not even, ends (embedding and head count as a "
                     "layer each) or balanced (split by FLOPs)")
    if layout is not None:
        return layout
    if pp <= 1:
        return None
    if "torchtitan" in f"{_cell(row, 'framework')} {row.get('source') or ''}".lower():
        assumed.append("pipeline_layout=ends (not stated; torchtitan's default)")
        return "ends"
    default = default_pipeline_layout(framework)
    assumed.append(f"pipeline_layout={default} (not stated; {framework}'s default)")
    return None


_ZERO1_GROUP = re.compile(r"zero1\s*=\s*(-?\d+)|groups?\s+of\s+(\d+)", re.I)


def _zero1_sync(row: dict, assumed: list, flavour: str, n_dp: int) -> tuple[str, int]:
    """(zero1_param_sync, zero1_shard_ranks) of a zero1 row: InternEvo's HybridZeroOptimizer
    (framework cell naming InternEvo, or an optimizer shard group stated in ``zero_or_fsdp``:
    "zero1=8", "groups of 8 GPUs"; zero1=-1 = all data-parallel ranks) all-reduces gradients and
    broadcasts shards; every other zero1 row reduce-scatters and all-gathers over all of them.
    A group larger than the data-parallel size or not dividing it skips the row."""
    if flavour != "zero1":
        return "all_gather", 0
    text = _cell(row, "zero_or_fsdp")
    m = _ZERO1_GROUP.search(text)
    if not (m or "internevo" in _cell(row, "framework").lower()):
        return "all_gather", 0
    group = int(m.group(1) or m.group(2)) if m else 0
    group = 0 if group < 0 else group
    if group and (group > n_dp or n_dp % group):
        raise Skip(f"an optimizer shard group of {group} ranks does not divide the {n_dp} data-parallel ranks",
                   "zero_or_fsdp", text)
    group = 0 if group == n_dp else group
    assumed.append("zero1_param_sync=broadcast (InternEvo's hybrid ZeRO: gradients all-reduced, each shard "
                   "broadcast after the step" + (f", shards within {group} ranks)" if group else ")"))
    return "broadcast", group


def _offload_modules(row: dict) -> tuple:
    """``offload_modules`` as stated (Megatron-Core's --offload-modules, its names or their short
    forms), () where the cell is empty or says none."""
    mods = _stated(row, "offload_modules", map_offload_modules, "names a module Megatron-Core does not offload "
                   "(attn_norm, qkv_linear, core_attn, attn_proj, mlp_norm, expert_fc1, moe_act, fused_group_mlp)")
    return tuple(mods.split(",")) if mods else ()


def _recompute_modules(row: dict, assumed: list, rec: str) -> str | None:
    """``recompute_modules`` as stated (Megatron-Core's --recompute-modules, WorkloadSpec's names or
    their spellings), None where the cell is empty (selective then means the attention core). It
    needs recompute selective or empty (then selective, printed with the row)."""
    mods = _stated(row, "recompute_modules", map_recompute_modules, "names a module the model does not price "
                   "(core_attn, layernorm, mla_up_proj, mlp, moe_act, shared_experts, moe)")
    if mods is None:
        return None
    if rec and rec != "selective":
        raise Skip(f"recompute modules need recompute selective (the row says {rec})", "recompute_modules",
                   _cell(row, "recompute_modules"))
    if not rec:
        assumed.append("recompute=selective (recompute_modules stated)")
    return mods


def _grad_dtype(row: dict) -> str:
    """``grad_dtype`` as stated (bf16 or fp32, or the frameworks' flags); empty: fp32 (Megatron's
    default under bf16: --accumulate-allreduce-grads-in-fp32)."""
    return _stated(row, "grad_dtype", map_grad_dtype,
                   "not one of bf16 or fp32 (the gradient buffer's dtype: --grad-reduce-in-bf16, "
                   "grad_reduce_in_fp32=False; a cell naming both dtypes is ambiguous)") or "fp32"


def _grad_reduce_dtype(row: dict) -> str | None:
    """``grad_reduce_dtype`` as stated (bf16 or fp32, or the frameworks' spellings); empty: None,
    the framework class's own (WorkloadSpec.resolved_grad_reduce_dtype; ``build_case`` names it
    among the row's assumptions)."""
    return _stated(row, "grad_reduce_dtype", map_grad_reduce_dtype,
                   "not one of bf16 or fp32 (the data-parallel reduction's dtype: Composer's PURE / DEFAULT, "
                   "FSDP's reduce_dtype; a cell naming both dtypes is ambiguous)")


def _moments(row: dict) -> str:
    """``optimizer_moments`` as stated (bf16 or fp32, or their spellings); empty: fp32 (Adam's default)."""
    return _stated(row, "optimizer_moments", map_moments, "not bf16 or fp32 (Adam's moments)") or "fp32"


def _convention(row: dict, assumed: list, metric: str) -> str:
    """FLOP counting of a TFLOP/s or MFU figure: stated, else hardware for the sources known to
    count recomputation (ALWAYS_RECOMPUTE_SOURCES), else model."""
    conv = _stated(row, "flops_convention", map_convention,
                   "not model, model causal or hardware (does the FLOP count include recomputation? "
                   "attention for the causal half only?)")
    if conv is not None:
        return conv
    conv = "hardware" if any(k in (row.get("source") or "").lower() for k in ALWAYS_RECOMPUTE_SOURCES) else "model"
    if metric in ("tflops_per_gpu", "mfu_pct"):
        assumed.append(f"flops_convention={conv} (not stated)")
    return conv


_YES = ("yes", "true", "on", "1", "enabled", "overlap")
_NO = ("no", "false", "off", "0", "disabled", "none")
_NOT_STATED = ("", "n/a", "na", "-", "not stated", "unknown", "?")
_FLAGS = {
    "tp_comm_overlap": (("--tp-comm-overlap", "tp-comm-overlap", "userbuffers", "ub"),
                        "TP communication overlapped with its GEMMs: --tp-comm-overlap"),
    "ep_comm_overlap": (("--overlap-moe-expert-parallel-comm", "overlap-moe-expert-parallel-comm",
                         "overlap_moe_expert_parallel_comm", "ep a2a overlap", "a2a overlap"),
                        "EP all-to-all overlapped with another micro-batch: --overlap-moe-expert-parallel-comm"),
    "optimizer_post_validation": (("--enable-optimizer-post-validation", "enable-optimizer-post-validation",
                                   "post-validation", "post validation"),
                                  "optimizer step validated after the update: --enable-optimizer-post-validation"),
    "fp8_param_gather": (("--fp8-param-gather", "fp8-param-gather", "fp8_param_gather", "fp8_param_gather=true",
                          "fp8_param_gather: true", "fp8 params", "fp8 weights"),
                         "weights kept and gathered in fp8: --fp8-param-gather"),
}


def _flag(row: dict, assumed: list, column: str, degree: int) -> bool:
    """``tp_comm_overlap`` / ``ep_comm_overlap`` / ``optimizer_post_validation`` / ``fp8_param_gather``:
    yes / true / on / 1 / the framework's flag, or no / false / off / 0 (case-insensitive); not
    stated = no, printed with the row where the degree (tp, ep; 2 for the schedules post-validation
    changes, for fp8 rows' parameter gather) is above 1."""
    text = _cell(row, column)
    t = text.lower().strip()
    flags, what = _FLAGS[column]
    if t in _NOT_STATED:
        if degree > 1:
            assumed.append(f"{column}=no (not stated)")
        return False
    kv = re.fullmatch(r"(?:--)?([a-z0-9_-]+)\s*[:=]\s*([a-z0-9]+)", t)     # name=value, name: value
    if kv and kv.group(1).replace("-", "_") == column:
        t = kv.group(2)
    if t in _YES or t in flags:
        return True
    if t in _NO or t in ("--no-" + f.lstrip("-") for f in flags if f.startswith("--")):
        return False
    raise Skip(f"not yes/no ({what})", column, text)


def _tp_overlap(row: dict, assumed: list, tp: int) -> bool:
    return _flag(row, assumed, "tp_comm_overlap", tp)


def _ep_overlap(row: dict, assumed: list, ep: int) -> bool:
    return _flag(row, assumed, "ep_comm_overlap", ep)


def _post_validation(row: dict, assumed: list, sched: str) -> bool:
    """``optimizer_post_validation``, printed as assumed where the schedule is one it changes."""
    return _flag(row, assumed, "optimizer_post_validation", 2 if sched == "zb2p" else 1)


_DEDUP_DISPATCHERS = ("deepep", "hybridep", "hybrid-ep", "hybrid_ep", "flex", "dedup", "deduplicated")
_PLAIN_DISPATCHERS = ("alltoall", "all-to-all", "all_to_all", "a2a", "nccl", "allgather", "all-gather", "none")
_EINSUM_DISPATCHERS = ("einsum", "gshard", "one-hot", "onehot")


def _ep_dispatcher(row: dict, assumed: list, ep: int) -> tuple[bool, bool]:
    """``ep_dispatcher`` -> (de-duplicated, einsum): deepep / hybridep / flex (Megatron-Core's flex
    dispatcher) send each token once per remote node (de-duplicated); alltoall / allgather / nccl
    send one copy per selected expert; einsum / gshard / one-hot gather and scatter the tokens by
    GEMMs over one-hot masks (DeepSpeed-MoE's MOELayer; WorkloadSpec.moe_einsum_dispatch), then one
    all-to-all copy per slot. First word, case-insensitive. Not stated = alltoall, printed where ep > 1."""
    text = _cell(row, "ep_dispatcher")
    t = text.lower().strip().split(" ")[0] if text.strip() else ""
    if not t:
        if ep > 1:
            assumed.append("ep_dispatcher=alltoall (not stated)")
        return False, False
    if t.startswith(_DEDUP_DISPATCHERS):
        return True, False
    if t.startswith(_EINSUM_DISPATCHERS):
        return False, True
    if t.startswith(_PLAIN_DISPATCHERS):
        return False, False
    raise Skip("names no known MoE dispatcher (deepep, hybridep, flex: de-duplicated; alltoall, allgather, nccl; "
               "einsum, gshard)", "ep_dispatcher", text)


def _float(row: dict, key: str) -> float | None:
    raw = _cell(row, key)
    if not raw:
        return None
    try:
        v = float(raw)
    except ValueError:
        raise Skip("not a number", key, raw) from None
    if not math.isfinite(v) or v <= 0:
        raise Skip("not a positive finite number", key, raw)
    return v


def _hardware(row: dict, gpu: str, assumed: list):
    """The GPU preset, with the HBM size, HBM bandwidth and NIC speed the row states (columns
    hbm_gb, hbm_tbps, nic_gbps, or a size inside gpu_type such as "A100-SXM4-40GB")."""
    hw = load_preset("hardware", gpu)
    upd = {}
    hbm_gb = _float(row, "hbm_gb") or gpu_memory_gb(_cell(row, "gpu_type"))
    if hbm_gb:
        upd["hbm_bytes"] = hbm_bytes_of_nominal_gb(hbm_gb)      # nominal GB: usable GiB (constants)
    tbps = _float(row, "hbm_tbps")
    if tbps:
        upd["hbm_bandwidth_Bps"] = tbps * 1e12
    nic = _float(row, "nic_gbps")
    if nic:
        upd["nic_bandwidth_Bps"] = nic * 1e9 / 8
    return hw.model_copy(update=upd) if upd else hw

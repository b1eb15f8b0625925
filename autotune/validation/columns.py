"""The runs CSV's columns, the free-text spellings each accepts, and the named assumptions
for what a row leaves unstated."""
from __future__ import annotations

import math
import re
from importlib import resources
from pathlib import Path

from ..numtext import FLOAT_TEXT

ASSUMED_VOCAB = 51200                 # Megatron GPT experiments' padded vocabulary
ASSUMED_FFN_MULTIPLE = 4              # GPT-style ffn_hidden = 4 h when not stated
ASSUMED_MICRO_BATCH = 1               # micro-batch when not stated
ASSUMED_DP_FLAVOUR = "ddp"            # when zero_or_fsdp is empty (and the framework class has no default)
ASSUMED_SCALE_OUT_LATENCY_s = 5e-6    # one-way NIC + switch latency of an InfiniBand/RoCE fabric
# The published runs' fabrics are non-blocking InfiniBand fat trees (Selene, DGX SuperPOD): one path
# per GPU, adaptive routing (modelled as packet spraying), lossless (credit-based flow control).
MAX_SCALE_OUT_PATHS = 1 << 16         # TierSpec's limit on equal-cost paths (reached only past 65,536 GPUs)
ASSUMED_INTERLEAVED_CHUNKS = 2        # "interleaved" with no vpp stated: the smallest legal v
PRE_FLASH_SOURCES = ("narayanan", "korthikanti")
"""Runs published before FlashAttention (Dao et al., May 2022) used Megatron's unfused attention."""
ALWAYS_RECOMPUTE_SOURCES = ("narayanan",)
"""Narayanan et al. 2021 sec. 5: activation recomputation is used in all runs (unless stated)."""
COLUMNS = ("source", "model_name", "params_b", "n_layers", "hidden", "ffn_hidden", "n_heads", "n_kv_heads",
           "vocab", "seq_len", "moe_experts", "moe_topk", "gpu_type", "n_gpus", "tp", "pp", "dp", "cp", "ep",
           "vpp", "micro_batch", "global_batch_seqs", "recompute", "precision", "zero_or_fsdp",
           "pipeline_schedule", "measured_metric", "measured_value",
           # optional columns (issue 13): what published runs state beyond the layout
           "etp", "tp_comm_overlap", "ep_comm_overlap", "ep_dispatcher",
           "optimizer_post_validation", "expert_ffn_hidden", "moe_shared_experts", "first_k_dense", "moe_layer_step", "head_dim", "attention",
           "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "v_head_dim", "sliding_window",
           "sliding_window_layers", "activation", "framework", "flops_convention", "hbm_gb", "hbm_tbps",
           "nic_gbps", "peak_memory_gb", "pipeline_layout", "recompute_modules", "optimizer_moments",
           "flash_attention", "grad_dtype", "fp8_param_gather", "grad_reduce_dtype", "fsdp_gather", "moe_routing",
           "moe_unpermute", "offload_modules", "notes")
"""The columns of published_runs.csv (docs in ``autotune/data/published_runs.README.md``).
``source``, ``params_b`` and ``notes`` are informational: ``source`` names the row's source
family; none of the three is parsed as a number."""
ASSUMED_FRAMEWORK = "megatron"
"""Framework class when neither ``framework`` nor the source names one: the set's majority."""
FRAMEWORKS = ("megatron", "deepspeed", "pytorch", "nanotron", "jax", "other")
"""Framework classes, each with its own fitted compute-efficiency factor (its step's speed
against the isolated kernels): Megatron-LM/Core, NeMo, Megatron-DeepSpeed (Megatron's fused kernels); DeepSpeed
on Hugging Face models; eager PyTorch (torchtitan, Composer/llm-foundry, FSDP, Lightning,
OLMo-core, InternEvo, Colossal-AI); nanotron; JAX (MaxText)."""
REQUIRED_COLUMNS = ("model_name", "n_layers", "hidden", "n_heads", "seq_len", "gpu_type", "n_gpus",
                    "tp", "pp", "dp", "global_batch_seqs", "measured_metric", "measured_value")
METRICS = ("iteration_time_s", "tokens_per_sec_per_gpu", "tflops_per_gpu", "mfu_pct")
TYPO_CUTOFF = 0.8
"""An unknown column whose name is at least this similar (difflib ratio) to a known column that
the file lacks is taken as a misspelling of it: rows with a value there are skipped."""
RECOMPUTE_VALUES = ("none", "selective", "full")

_GPU_RULES = [(r"gb200", "gb200-nvl72"), (r"b200", "b200"), (r"h200", "h200"), (r"h800", "h800"),
              (r"h100", "h100-sxm"), (r"a100", "a100-80gb")]
_SCHEDULE_RULES = [(r"dualpipe", "dualpipev"), (r"zbv|zb-v", "zbv"), (r"zb-?2p", "zb2p"),
                   (r"zb-?1p|zb-?h1", "zb1p"), (r"interleav", "interleaved_1f1b"), (r"gpipe", "gpipe"),
                   (r"1f1b", "1f1b")]
_FLAVOUR_RULES = [(r"(?<!no )(?:cpu|nvme)[ _-]?(?:optimi[sz]er[ _-]?|param\w*[ _-]?)?offload", "offload"),
                  (r"hsdp|hybrid[ _-]?shard", "hsdp"),
                  (r"no[ _-]?reshard|shard[ _-]?grad[ _-]?op|reshard[ _-]?after[ _-]?forward\s*=?\s*false", "fsdp_noreshard"),
                  (r"zero[ _:=\"'-]*(?:stage[ _:=\"'-]*)?3\b|\bstage[ _:=\"'-]*3\b|fsdp|full[ _-]?shard", "fsdp"),
                  (r"zero[ _:=\"'-]*(?:stage[ _:=\"'-]*)?2\b|\bstage[ _:=\"'-]*2\b", "zero2"),
                  (r"zero[ _:=\"'-]*(?:stage[ _:=\"'-]*)?1\b|\bstage[ _:=\"'-]*1\b|dist(?:ributed)?[ _-]?opt", "zero1"),
                  (r"ddp|^none$|zero[ _:=\"'-]*(?:stage[ _:=\"'-]*)?0\b|no[ _-]?zero|^no$", "ddp")]
"""Data-parallel flavour spellings, first match wins. ZeRO-2 is the zero1 flavour (the same
collectives: reduce-scatter gradients, all-gather parameters) with its gradients sharded as well
(``WorkloadSpec.shard_gradients``); zero1 and Megatron's distributed optimizer keep a full
gradient buffer. FSDP without resharding after forward
(SHARD_GRAD_OP, ZeRO-2-like; Llama 3) maps to fsdp with the ``forward`` regather policy. CPU
offload is not modelled: such a row is skipped."""
_ACTIVATION_RULES = [(r"swi[ _-]?glu|silu[ _-]?glu|swiglu", "swiglu"), (r"ge[ _-]?glu|gelu[ _-]?glu", "geglu"),
                     (r"squared[ _-]?relu|relu\s*(?:\^|\*\*)\s*2|relu2|relu²", "squared_relu"),
                     (r"gelu", "gelu"), (r"relu|silu|swish", "relu")]
"""Activation spellings, first match wins; a non-gated SiLU has two matrices, as ReLU has."""
GATED_NAME_RULE = r"llama|mixtral|mistral|qwen|deepseek|gemma|olmo|internlm|yi\b|baichuan|phi-3|grok|kimi|gpt-oss"
"""Model families whose MLP is gated (SwiGLU/GeGLU): the assumption when ``activation`` is empty."""
_ATTENTION_RULES = [(r"mla|latent", "mla"), (r"gqa|grouped|mqa|multi[ _-]?query|mha|multi[ _-]?head|full|dense|"
                                            r"standard|causal", "gqa")]
_FRAMEWORK_RULES = [(r"megatron|nemo|mcore|mlperf", "megatron"), (r"deepspeed", "deepspeed"),
                    (r"nanotron|picotron", "nanotron"), (r"maxtext|jax|pax|t5x", "jax"),
                    (r"torchtitan|composer|llm-foundry|mosaic|fsdp|lightning|olmo|internevo|colossal|pytorch|fms",
                     "pytorch")]
"""Framework spellings (in ``framework``, else in ``source``), first match wins;
Megatron-DeepSpeed runs Megatron's kernels and matches megatron first."""
_LAYOUT_RULES = [(r"(?<![a-z])balanced\b|(?:by|per)[ _-]?(?:compute|flops?|cost)|block[ _-]?compute|nanotron",
                  "balanced"),
                 (r"\bends?\b|account[ _-]?for|(?:input|output)[ _-]?weight\s*=?\s*[1-9]|(?:first|last)\b.*\b(?:fewer|less)"
                  r"|counts? as (?:a|one) layer|torchtitan", "ends"),
                 (r"\beven\b|uniform|equal|megatron|default", "even")]
_LAYOUT_UNREADABLE = r"\b(?:uneven|unbalanced|imbalanced)\b|\bnot[ _-]+(?:even|balanced)"
"""Pipeline-layout spellings (WorkloadSpec.pipeline_layout), first match wins: a split by block
FLOPs (nanotron) is balanced; embedding and head counted as a layer each, or first and last stages
a layer short (torchtitan, Megatron-Core's --account-for-*-in-pipeline-split) is ends; an equal
split with the head on top of the last stage (Megatron's default) is even. "uneven",
"unbalanced" and the like name no layout the model knows: such a row is skipped."""
_CONVENTION_RULES = [(r"hardware|hfu|recomput", "hardware"), (r"non-?\s?causal|full attention", "model"),
                     (r"causal", "model_causal"), (r"model|mfu|6n|palm", "model")]
"""FLOP conventions of a TFLOP/s or MFU figure: ``hardware`` counts recomputation; ``model`` the
model's FLOPs with full (non-causal) attention (PaLM, Megatron, NeMo, nanotron); ``model_causal``
the model's FLOPs with attention counted for the unmasked half only (MaxText's
``calculate_tflops_training_per_device``: 12 h L d s^2 / 2)."""


def shipped_runs_path() -> Path:
    return Path(str(resources.files("autotune.data").joinpath("published_runs.csv")))


def reserved_runs_path() -> Path:
    """Runs from sources reserved as an independent check (``reserved_runs.csv``): scored, never
    fit on (``autotune validate --runs reserved``)."""
    return Path(str(resources.files("autotune.data").joinpath("reserved_runs.csv")))


def map_gpu(text: str) -> str | None:
    """A GPU name anywhere in the free text (first rule that matches wins)."""
    t = text.lower()
    for pat, name in _GPU_RULES:
        if re.search(pat, t):
            return name
    return None


def _match_schedule(text: str) -> str | None:
    """The schedule named first in the free text, or None when it names none."""
    t = (text or "").lower().strip()
    best, best_pos = None, len(t) + 1
    for pat, name in _SCHEDULE_RULES:
        hit = re.search(pat, t)
        if hit and hit.start() < best_pos:
            best, best_pos = name, hit.start()
    return best


def schedule_stated(text: str) -> bool:
    """The cell names the run's schedule: not empty, and not marked "not stated" where what it
    names is only 1F1B or interleaving ("1F1B/interleaved (not stated)", "1F1B (interleaving not
    stated in table)", a bare "not stated"); "ZB-V (not stated)" and "interleaved (vpp not
    stated)" still name theirs."""
    t = (text or "").lower()
    if not t.strip():
        return False
    if "not stated" not in t or _match_schedule(t) not in (None, "1f1b", "interleaved_1f1b"):
        return True
    return "vpp not stated" in t


def map_schedule(text: str, vpp: int) -> str:
    """Schedule from free text; a stated vpp > 1 means interleaved. Text naming two schedules
    ("1F1B/interleaved (not stated)") takes the first one named."""
    if vpp > 1:
        return "interleaved_1f1b"
    return _match_schedule(text) or "1f1b"


def _match_flavour(text: str) -> str | None:
    t = (text or "").lower().strip()
    for pat, name in _FLAVOUR_RULES:
        if re.search(pat, t):
            return name
    return None


ASSUMED_DP_FLAVOUR_BY_FRAMEWORK = {"megatron": "zero1"}
"""The DP flavour an empty ``zero_or_fsdp`` takes by framework class. Megatron-class runs
(NeMo, Megatron-Bridge, Megatron-LM, MegaScale) shard the optimizer: NeMo's and Megatron-Bridge's
recipes turn Megatron-Core's distributed optimizer on (``use_distributed_optimizer=True``, NeMo's
``distributed_fused_adam``), MegaScale (Jiang et al. 2024, sec. 3.2) describes its ZeRO-2-style
reduce-scatter and all-gather. Every other class: plain data parallelism."""


def map_flavour(text: str, framework: str | None = None) -> str:
    t = (text or "").lower().strip()
    default = ASSUMED_DP_FLAVOUR_BY_FRAMEWORK.get(framework or "", ASSUMED_DP_FLAVOUR)
    if not t:
        return default
    return _match_flavour(t) or default


def _first_rule(rules, text: str) -> str | None:
    t = (text or "").lower().strip()
    for pat, name in rules:
        if re.search(pat, t):
            return name
    return None


def map_activation(text: str) -> str | None:
    return _first_rule(_ACTIVATION_RULES, text)


def map_attention(text: str) -> str | None:
    return _first_rule(_ATTENTION_RULES, text)


def map_framework(text: str) -> str | None:
    """Framework class of a free-text name. ``other:NAME`` is read by NAME first (other:InternEvo is
    eager PyTorch, other:MegaScale (Megatron-LM based) is Megatron); a NAME no rule knows is
    ``other``."""
    t = (text or "").lower().strip()
    if t.startswith("other"):
        return _first_rule(_FRAMEWORK_RULES, t.removeprefix("other").lstrip(":").strip()) or "other"
    return _first_rule(_FRAMEWORK_RULES, t)


def map_pipeline_layout(text: str) -> str | None:
    if re.search(_LAYOUT_UNREADABLE, text.lower()):
        return None
    return _first_rule(_LAYOUT_RULES, text)


_MODULE_SPELLINGS = {"core_attn": "core_attn", "core_attention": "core_attn", "attention": "core_attn",
                     "attn": "core_attn", "layernorm": "layernorm", "norm": "layernorm", "norms": "layernorm",
                     "mlp": "mlp", "moe_act": "moe_act", "act": "moe_act", "shared_experts": "shared_experts",
                     "shared_expert": "shared_experts", "shared": "shared_experts", "moe": "moe",
                     "mla_up_proj": "mla_up_proj", "up_proj": "mla_up_proj", "moe_layer": "moe"}
"""Spellings of Megatron-Core's --recompute-modules (WorkloadSpec.recompute_modules): its own names,
and the short forms of Megatron-MoE-ModelZoo's tables ('norm, act')."""


def map_recompute_modules(text: str) -> str | None:
    """A comma-, space- or plus-separated module list ("--recompute-modules moe_act layernorm",
    "norm, act", "mlp up_proj") as WorkloadSpec's comma-separated names; None where a name is not
    one the model prices."""
    t = re.sub(r"--recompute-(?:modules|granularity)|selective|[\'\"()\[\]]", " ", (text or "").lower())
    return _module_names(re.sub(r"(?<=[a-z])-(?=[a-z])", "_", t), _MODULE_SPELLINGS)


def _module_names(text: str, spellings: dict) -> str | None:
    """A cleaned module list (separated by commas, semicolons, plus, slash, spaces or "and") as the
    canonical names, comma-separated, first mention first; None where a name has no spelling."""
    names = [x for x in re.split(r"[,;+/\s]+|\band\b", text) if x]
    mods = [spellings.get(x) for x in names]
    if not mods or None in mods:
        return None
    return ",".join(dict.fromkeys(mods))


_OFFLOAD_SPELLINGS = {"attn_norm": "attn_norm", "input_norm": "attn_norm", "qkv_linear": "qkv_linear",
                      "qkv": "qkv_linear", "core_attn": "core_attn", "core_attention": "core_attn",
                      "attn_proj": "attn_proj", "proj": "attn_proj", "mlp_norm": "mlp_norm",
                      "pre_mlp_norm": "mlp_norm", "expert_fc1": "expert_fc1", "fc1": "expert_fc1",
                      "moe_act": "moe_act", "act": "moe_act", "fused_group_mlp": "fused_group_mlp"}
"""Spellings of Megatron-Core's --offload-modules (WorkloadSpec.offload_modules): its own names and
short forms ('fc1', 'act', 'qkv')."""


def map_offload_modules(text: str) -> str | None:
    """An offload module list ("--fine-grained-activation-offloading --offload-modules expert_fc1
    moe_act", "fine-grained activation offloading of expert_fc1 and moe_act", "fc1+act") as
    WorkloadSpec's comma-separated names; "none" / "no" as the empty list (""); None where a name is
    not one Megatron-Core offloads."""
    t = (text or "").lower().strip()
    if re.fullmatch(r"(?:none|no|off|false|0|-)", t):
        return ""
    t = re.sub(r"--fine-grained-activation-offloading|--offload-modules|fine[- ]grained|activation|"
               r"offload(?:ing|ed)?|\bof\b|\(required\)|[\'\"()\[\]]", " ", t)
    return _module_names(re.sub(r"(?<=[a-z0-9])-(?=[a-z])", "_", t), _OFFLOAD_SPELLINGS)


_FLASH_RULES = [(r"^(?:no|false|off|0|none)\b|\b(?:non|un|not)[ _-]?fused\b|\bno[ _-]?flash|"
                 r"flash[ _-]?attn\s*[:=]\s*(?:0|false|no)\b|fused[ _-]?softmax|sdpa\W*math|\bmath\b|\beager\b|"
                 r"\bnaive\b", False),
                (r"flash|\bfa-?[1-4]\b|^(?:yes|true|on|1)\b|fused|cudnn|sdpa|splash|\bte\b|transformer[ _-]?engine|"
                 r"xformers|mem(?:ory)?[ _-]?efficient", True)]
"""flash_attention spellings; the match earliest in the cell wins, unfused on a tie: "no", "false",
"unfused", "non-fused", "no flash", "use_flash_attn: 0", Megatron's "fused softmax" (its
scaled-masked softmax still streams the scores), "SDPA math", "math", "eager" -> unfused (the
s x s scores written to and read from HBM); "yes", "FlashAttention-2", "FA3", "cuDNN fused
attention", "SDPA", "splash" (JAX), "TE", "Transformer Engine", "xformers", "memory-efficient" ->
fused. "FlashAttention (no sliding window)" is fused: the kernel is named first."""


def map_flash(text: str) -> bool | None:
    """True (fused attention), False (unfused) or None (no known spelling)."""
    t = (text or "").lower().strip()
    hits = [(m.start(), i, value) for i, (pat, value) in enumerate(_FLASH_RULES) for m in [re.search(pat, t)] if m]
    return min(hits)[2] if hits else None


# a version group per spelling (the last, PyTorch SDPA's flash backend, names none: it is FA2)
_VERSIONED = re.compile(r"flash[ _-]?att(?:n|ention)[\s_\-(]*(?:v|version\s?)?([2-4])(?!\d|x\b)|\bfa[ -]?([2-4])\b|"
                        r"flash[ _-]?attn\s*(?:>=|==|~=)\s*([2-4])\.|sdpa[^;,]{0,12}\bflash\b(?![ _-]?att)()")
_NATIVE_BACKEND = re.compile(r"cudnn|\bte\b|transformer[ _-]?engine|splash")
_NEGATED_BEFORE = re.compile(r"(?:\bnot|\bno|\bwithout|\bw/o|\bdisabled?)\W+$")
_NEGATED_AFTER = re.compile(r"^\W*(?:disabled|off)\b")


def map_attention_kernel(text: str) -> str | None:
    """The fused attention kernel a flash_attention cell names (WorkloadSpec.attention_kernel).
    A version named wins over a backend named, the earliest version on a tie, a negated one
    ("not FA2", "FA2 disabled", "without FlashAttention-2") not counting: "FlashAttention-2",
    "FlashAttention2", "flash attention (v2)", "flash-attn 2.5.8", "flash_attn==2.6.3", "FA2",
    "FA 2", "SDPA FlashAttention-2", "SDPA (flash backend)" (PyTorch's flash backend is FA2),
    "TE with FlashAttention-2" -> fa2; "FlashAttention-3", "FA3", "FA4" and, naming no version,
    "cuDNN", "TE", "Transformer Engine", "splash" -> native; None where it names neither
    ("FlashAttention", "yes", "SDPA", "xformers", "FlashAttention-1": the caller's default)."""
    t = (text or "").lower()
    for m in _VERSIONED.finditer(t):
        if _NEGATED_BEFORE.search(t[max(0, m.start() - 24):m.start()]) or _NEGATED_AFTER.search(t[m.end():]):
            continue
        version = next((g for g in m.groups() if g is not None), None)
        return "fa2" if version in ("2", "") else "native"
    return "native" if _NATIVE_BACKEND.search(t) else None


def map_moments(text: str) -> str | None:
    """Adam moments' dtype (WorkloadSpec.optimizer_moments): "bf16", "BF16 optimizer states",
    "--exp-avg-dtype bf16" -> bf16; "fp32", "float32" -> fp32."""
    return _first_rule([(r"bf16|bfloat16", "bf16"), (r"fp32|float32", "fp32")], text)


from .dtype_columns import map_grad_dtype, map_grad_reduce_dtype  # noqa: E402,F401 - public here


def map_convention(text: str) -> str | None:
    return _first_rule(_CONVENTION_RULES, text)


_GPU_MEMORY = re.compile(r"(?<![\d.])(\d{2,3})\s*gi?b\b", re.I)


def gpu_memory_gb(text: str) -> float | None:
    """HBM size stated inside a GPU string ("A100-SXM4-40GB", "H100 80 GB"), in GB."""
    hit = _GPU_MEMORY.search(text or "")
    return float(hit.group(1)) if hit else None


_GITHUB_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+")
_PAPER_CUT = re.compile(r"\s+(?:arXiv\b|Tables?\b|Fig(?:ure)?s?\b|Sec(?:tion)?s?\b|\()")
NO_SOURCE_FAMILY = "(no source)"


def source_family(source: str) -> str:
    """The source family of a row: the paper or repository its numbers come from.

    Rule (applied to the ``source`` text with whitespace collapsed, up to its first ';'; at most
    80 characters):
    if it starts with a GitHub ``owner/repo`` the family is that ``owner/repo``
    (every document of one repository is one family: its README, its docs pages); otherwise it
    is a paper citation and the family is the text before the first ``arXiv``, ``Table(s)``,
    ``Fig(ure)``, ``Sec(tion)`` or ``(`` (authors and venue: every table of one paper is one
    family). Families compare case-insensitively. An empty source is its own family.
    """
    head = one_line(source or "", 100_000).split(";")[0].strip()
    if not head:
        return NO_SOURCE_FAMILY
    first = head.split(" ")[0]
    if _GITHUB_REPO.fullmatch(first):
        return first[:80]
    return (_PAPER_CUT.split(head, maxsplit=1)[0].strip(" ,:") or head)[:80]


def one_line(text, limit: int = 80) -> str:
    """Printable, single-line, bounded: what a reason or a name may show of a cell."""
    s = "".join(ch if ch.isprintable() else " " for ch in str(text))
    s = " ".join(s.split())
    return s if len(s) <= limit else s[:limit - 3] + "..."


def _show(value: str) -> str:
    """A cell's value as a reason quotes it: repr (escapes control characters), bounded."""
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


class Skip(Exception):
    """A row that cannot be scored; the message names the column and the value."""

    def __init__(self, reason: str, column: str | None = None, value: str | None = None):
        self.column, self.value = column, value
        super().__init__(f"{column}={_show(value)}: {reason}" if column is not None else reason)


def _cell(row: dict, key: str) -> str:
    return (row.get(key) or "").strip()


def _int(row, key, default=None, allow_zero: bool = False):
    raw = _cell(row, key)
    if raw == "":
        if default is None:
            raise Skip("empty, and it has no default", key, raw)
        return default
    try:
        if not FLOAT_TEXT.fullmatch(raw):      # float() takes '1_000' and non-ASCII digits
            raise ValueError(raw)
        val = float(raw)
    except ValueError:
        raise Skip("not a number (the digits 0-9)", key, raw) from None
    lo_ok = val >= 0 if allow_zero else val > 0
    if not math.isfinite(val) or not lo_ok or val != int(val):
        raise Skip("not a " + ("non-negative" if allow_zero else "positive") + " integer", key, raw)
    return int(val)

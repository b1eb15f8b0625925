"""The runs file's dtype columns: the gradient buffer (grad_dtype) and the data-parallel
reduction (grad_reduce_dtype), read from the frameworks' own spellings."""
from __future__ import annotations

import re

_GRAD_FLAGS = [(r"grad[-_]reduce[-_]in[-_]fp32\s*[:=]\s*(?:false|0|no)\b", "bf16"),
               (r"grad[-_]reduce[-_]in[-_]fp32\s*[:=]\s*(?:true|1|yes)\b", "fp32"),
               (r"grad[-_]reduce[-_]in[-_]bf16\s*[:=]\s*(?:false|0|no)\b", "fp32"),
               (r"--no-grad[-_]reduce[-_]in[-_]bf16", "fp32"),
               (r"grad[-_]reduce[-_]in[-_]bf16", "bf16"),
               (r"accumulate[-_]allreduce[-_]grads[-_]in[-_]fp32", "fp32")]


def map_grad_dtype(text: str) -> str | None:
    """The gradient buffer's dtype (WorkloadSpec.grad_dtype). The frameworks' flags first:
    "--grad-reduce-in-bf16", "grad_reduce_in_fp32=False" (or 0, no) -> bf16; "grad_reduce_in_fp32:
    True" (or 1, yes), "--no-grad-reduce-in-bf16", "--accumulate-allreduce-grads-in-fp32" -> fp32.
    Else a dtype word: "bf16"/"bfloat16" -> bf16, "fp32"/"float32" -> fp32; a cell naming both
    ("fp32 accumulation, bf16 reduce", "bf16 params, fp32 grads") is ambiguous: None (the row is
    skipped with the reason)."""
    t = (text or "").lower().strip()
    flag = _grad_flag(t)
    if flag:
        return flag
    bf16, fp32 = re.search(r"bf16|bfloat16", t), re.search(r"fp32|float32", t)
    return None if bf16 and fp32 else "bf16" if bf16 else "fp32" if fp32 else None


def _grad_flag(t: str) -> str | None:
    """The dtype a framework flag in ``t`` names (``_GRAD_FLAGS``, first match), else None."""
    return next((name for pat, name in _GRAD_FLAGS if re.search(pat, t)), None)


_REDUCE_DTYPE = re.compile(r"reduce_dtype\s*[:=]\s*(?:torch\.)?(bfloat16|bf16|float16|fp16|float32|fp32)\b")
_COMPOSER = re.compile(r"^(?:(?:fsdp_config\.)?mixed_precision\s*[:=]?\s*)?(pure|default|full)\b")


def map_grad_reduce_dtype(text: str) -> str | None:
    """The data-parallel reduction's dtype (WorkloadSpec.grad_reduce_dtype), first rule that
    reads the cell: FSDP's "reduce_dtype=torch.bfloat16" (or float32); Megatron's flags as for
    grad_dtype ("--grad-reduce-in-bf16", "grad_reduce_in_fp32=False"); a cell naming both a 16-bit
    and an fp32 dtype otherwise is ambiguous (None); Composer's FSDP mixed_precision at the start
    of the cell ("PURE" -> bf16, "DEFAULT" or "FULL" -> fp32; "mixed_precision: PURE"), None where
    the cell also names the other dtype ("PURE (reduce fp32)"); FSDP1's
    "bfSixteen" -> bf16; else a dtype word (fp16 reads as the 16-bit bf16)."""
    t = (text or "").lower().strip()
    m = _REDUCE_DTYPE.search(t)
    if m:
        return "fp32" if m.group(1) in ("float32", "fp32") else "bf16"
    if _grad_flag(t):
        return _grad_flag(t)
    half, full = re.search(r"bf16|bfloat16|fp16|float16", t), re.search(r"fp32|float32", t)
    if half and full:
        return None
    m = _COMPOSER.search(t)
    if m:
        name = "bf16" if m.group(1) == "pure" else "fp32"
        return None if (full if name == "bf16" else half) else name      # "PURE (reduce fp32)": which?
    if "bfsixteen" in t or half:
        return "bf16"
    return "fp32" if full else None

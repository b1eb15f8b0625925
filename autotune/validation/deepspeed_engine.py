"""How a runs-file row on DeepSpeed's engine reduces its gradients: ZeRO-3 as DeepSpeed runs it, and
stages 0-2 without ``overlap_comm`` (both charged without overlap, overlap_dp=0, in ``rows``)."""
from __future__ import annotations

import re

DEEPSPEED_ZERO3 = (r"zero[ _-]?(?:stage[ _-]?)?3|\bstage[ _-]?3", r"deepspeed|narayanan")
"""(flavour text, framework or source text) of a run on DeepSpeed's ZeRO-3 (Narayanan et al.
2021 sec. 5.2 compare with ZeRO-3 as DeepSpeed implements it). Its parameter gathers and
gradient reduce-scatters are charged without overlap (overlap_dp=0): in the DeepSpeed-on-Azure
runs the time the compute model leaves unexplained is the same at 1 and at 32 sequences per
micro-batch, i.e. exposed, and about the collectives' bytes at the nodes' NIC rate; PyTorch
FSDP ("fsdp", "FULL_SHARD") prefetches and keeps the overlap."""
DEEPSPEED_OVERLAP_COMM = re.compile(r"(\bno[ _-]+)?overlap[ _-]?comm(?:\s*[=:]\s*|\s+)?(true|false|yes|no|on|off|1|0)?")
"""A flavour cell's mention of DeepSpeed's ``overlap_comm``: "overlap_comm", "overlap_comm: true"
turn it on; "overlap_comm false", "no overlap-comm" keep it off."""


def is_deepspeed_zero3(flavour_text: str, framework_text: str, source: str) -> bool:
    """The row ran DeepSpeed's ZeRO-3 (``DEEPSPEED_ZERO3``)."""
    zero3, who = DEEPSPEED_ZERO3
    return bool(re.search(zero3, (flavour_text or "").lower())
                and re.search(who, f"{framework_text} {source}".lower()))


def deepspeed_reduces_after_backward(flavour: str, flavour_text: str, framework_text: str, source: str) -> bool:
    """The row ran DeepSpeed's engine with plain data parallelism or ZeRO stage 1 or 2 (``flavour``
    as mapped: ddp, zero1, zero2) without ``overlap_comm``, so its gradients are reduced after the
    backward: ``overlap_comm`` defaults to false below stage 3 (runtime/zero/config.py: on for
    stage 3 only); without it stage 1 registers no gradient hooks and reduces at the accumulation
    boundary (stage_1_and_2.py; bf16 with stage 0 or 1 runs BF16_Optimizer, which also reduces
    there), stage 2 reduces its buckets from the hooks on the compute stream, and without ZeRO the
    engine's allreduce_gradients runs at the boundary. DeepSpeed's pipeline engine reduces after its
    flush in any case. The framework cell decides (the source where that cell is empty)."""
    if flavour not in ("ddp", "zero1", "zero2"):
        return False
    who = framework_text if (framework_text or "").strip() else source
    if "deepspeed" not in (who or "").lower():
        return False
    m = DEEPSPEED_OVERLAP_COMM.search((flavour_text or "").lower())
    overlapped = bool(m) and not m.group(1) and (m.group(2) or "true") in ("true", "yes", "on", "1")
    return not overlapped

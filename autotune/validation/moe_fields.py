"""Per-row readers of the MoE layer's optional columns: how the router loads the experts
(``moe_routing``) and how the experts' outputs return to token order (``moe_unpermute``)."""
from __future__ import annotations

import re

from .columns import Skip, _cell
from .row_fields import _stated


_CAPACITY = re.compile(r"(?:capacity[ _-]?factor|\bcf)\s*[=:]?\s*(-?\d+(?:\.\d+)?)")
_NOT = r"\b(?:no|not|without|non)\b[ _-]*"


def read_moe_routing(text: str) -> tuple[str, float] | None:
    """``moe_routing`` (WorkloadSpec.moe_routing, moe_capacity_factor), tried in this order:
    "force balance", "forced balance", "--moe-router-force-load-balancing" (dropless or not: the
    loads are even), a cell that starts with "balanced" -> balanced ("no force balance" is not);
    "dropless", "no token drop", "without token dropping", "token dropping disabled", "drop tokens:
    no", a capacity factor of 0 or below (Megatron's -1) -> dropless; "capacity factor 1.25",
    "cf=1", "token drop" (factor 1 where none is given) -> capacity. None if none of these ("load
    balanced", "aux-loss balanced" name a loss, not a routing)."""
    t = (text or "").lower().strip()
    if (re.search(r"\bforced?\b|force[ _-]?load|force[ _-]?balanc", t) and not re.search(_NOT + r"forced?\b", t)) \
            or re.match(r"balanced\b", t):
        return "balanced", 1.0
    m = _CAPACITY.search(t)
    if ("dropless" in t or re.search(_NOT + r"(?:token[ _-]?)?drop", t) or (m and float(m.group(1)) <= 0)
            or re.search(r"drop(?:ping)?(?:\s+tokens?)?\W+(?:disabled|off|no|false)\b", t)):
        return "dropless", 1.0
    if m:
        return "capacity", float(m.group(1))
    if re.search(r"capacity|token[ _-]?drop|\bdrop(?:ping)?\b", t):
        return "capacity", 1.0
    return None


def _moe_routing(row: dict, assumed: list, experts: int) -> tuple[str, float]:
    """``moe_routing`` as stated; not stated, dropless (printed for MoE rows)."""
    stated = _stated(row, "moe_routing", read_moe_routing, "names no routing (dropless; capacity factor X / token "
                     "drop; force balance)")
    if stated is not None:
        return stated
    if experts:
        assumed.append("moe_routing=dropless (not stated)")
    return "dropless", 1.0


_ATOMIC = r"(?:scatter[ _-]?add|index[ _-]?add|atomic)"
_FUSED = (r"(?:fused|moe[ _-]?unpermute|permute[ _-]?fusion|\bte\b|transformer[ _-]?engine|deep[ _-]?ep|"
          r"mega[ _-]?blocks|(?<!all)(?<!all[ _-])gather)")
_NEGATED = r"(?:\b(?:no|not|without)\b[ _-]*(?:\w+[ _-]+){0,2}?|\bnon[ _-]?)"   # up to two words before
_SWITCHED_OFF = r"\w*\W{0,3}(?:free|disabled|off|false|no|0)\b"          # "...-free", "fusion=false", "fused: no"


def read_moe_unpermute(text: str) -> str | None:
    """``moe_unpermute`` (WorkloadSpec.moe_unpermute): "scatter_add", "scatter-add", "index_add_",
    "atomic" (eager PyTorch's atomic scatter-add: torchtitan's ``out.scatter_add``, Megatron-Core's
    unfused ``unpermute`` since 0.11) -> scatter_add; "fused", Megatron-Core's "moe_unpermute" or
    "--moe-permute-fusion", "TE", DeepEP (its combine), MegaBlocks, a "gather" combine (not an
    all-gather) -> fused. A negated atomic ("no scatter_add", "non-atomic", "atomic-free") reads
    fused. A fusion switched off ("unfused", "--moe-permute-fusion false", "no permute fusion") does
    not say which kernel ran (Megatron-Core 0.9 un-permuted by a plain scatter and a sum, 0.11 on
    by ``scatter_add_``) and skips the row, as does a cell naming both kernels; None if neither."""
    t = (text or "").lower().strip()
    neg_atomic = bool(re.search(_NEGATED + _ATOMIC, t) or re.search(_ATOMIC + _SWITCHED_OFF, t))
    neg_fused = bool(re.search(r"\b(?:un|non)[ _-]?fused|" + _NEGATED + _FUSED, t)
                     or re.search(r"(?:fused|fusion)\W{0,3}(?:disabled|off|false|no|0)\b", t))
    atomic = bool(re.search(_ATOMIC, t)) and not neg_atomic
    fused = bool(re.search(_FUSED, t)) and not neg_fused
    if atomic and fused:
        raise Skip("names both un-permutations (state one: scatter_add or fused)", "moe_unpermute", text)
    if neg_fused and not atomic:
        raise Skip("a fusion switched off does not say which kernel ran (Megatron-Core 0.11+: scatter_add; "
                   "0.9: a scatter and a sum, fused): state scatter_add or fused", "moe_unpermute", text)
    if atomic:
        return "scatter_add"
    return "fused" if fused or neg_atomic else None


def _moe_unpermute(row: dict, experts: int, einsum: bool) -> str | None:
    """``moe_unpermute`` as stated (None where the cell is empty: the framework class's own, which
    ``read_row`` prints); stated on a dense model or with an einsum dispatch (no permutation) skips
    the row."""
    stated = _stated(row, "moe_unpermute", read_moe_unpermute, "names no un-permutation (scatter_add / index_add_ / "
                     "atomic; fused / moe_unpermute / TE / DeepEP / MegaBlocks)")
    if stated is not None and (not experts or einsum):
        why = "a dense model (moe_experts empty or 0)" if not experts else "an einsum dispatch (ep_dispatcher)"
        raise Skip(f"an MoE un-permutation on {why}", "moe_unpermute", _cell(row, "moe_unpermute"))
    return stated

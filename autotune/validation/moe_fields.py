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


_SCATTER_ADD = re.compile(r"scatter[ _-]?add|index[ _-]?add|atomic")
_FUSED = re.compile(r"fused|moe[ _-]?unpermute|permute[ _-]?fusion|\bte\b|transformer[ _-]?engine|deepep|combine|"
                    r"megablocks|gather")


def read_moe_unpermute(text: str) -> str | None:
    """``moe_unpermute`` (WorkloadSpec.moe_unpermute): "scatter_add", "scatter-add", "index_add_",
    "atomic" (eager PyTorch's atomic scatter-add, torchtitan's ``out.scatter_add``) -> scatter_add;
    "fused", Megatron-Core's "moe_unpermute" or "--moe-permute-fusion", "TE", DeepEP's "combine",
    MegaBlocks, a "gather" combine -> fused. A negated atomic ("no scatter_add",
    "non-atomic", "without index_add") reads fused; None if neither is named."""
    t = (text or "").lower().strip()
    if _SCATTER_ADD.search(t):
        return "fused" if re.search(_NOT + r"(?:scatter[ _-]?add|index[ _-]?add|atomic)", t) else "scatter_add"
    return "fused" if _FUSED.search(t) else None


def _moe_unpermute(row: dict, experts: int) -> str | None:
    """``moe_unpermute`` as stated (None where the cell is empty: the framework class's own, which
    ``read_row`` prints); stated on a dense model skips the row."""
    stated = _stated(row, "moe_unpermute", read_moe_unpermute, "names no un-permutation (scatter_add / index_add_ / "
                     "atomic; fused / moe_unpermute / TE / DeepEP combine)")
    if stated is not None and not experts:
        raise Skip("an MoE un-permutation on a dense model (moe_experts empty or 0)", "moe_unpermute",
                   _cell(row, "moe_unpermute"))
    return stated

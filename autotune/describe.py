"""What a user asks before a search: a preset's numbers (``autotune show``) and each knob's legal
values in a scenario (``autotune space --knobs``)."""
from __future__ import annotations

import numpy as np

from .errors import UserInputError
from .space import TRANSPORT, SearchSpace
from .specs.config import CATEGORICAL, FIELDS

RULE_OF_KNOB = {"dp": "product", "tp": "tp", "cp": "cp", "ep": "ep", "etp": "etp", "pp": "pp", "micro_batch": "batch",
                "pp_chunks": "chunks", "placement": "placement", "dp_flavour": "flavour",
                "xb_queue_pairs": "spray_qps", "nccl_protocol": "ll128", "nccl_channels": "channels",
                "dp_bucket_mib": "bucket"}
"""The legality rule (``SearchSpace.rules``) that restricts each knob, where one does."""


def knob_values(space: SearchSpace) -> dict[str, dict]:
    """Per knob: the values that occur in at least one legal configuration (names for categorical
    knobs), how many, and the rule that restricts it. Core knobs come from the legal core rows,
    transport knobs from the transport grid (every legal core row takes every transport row)."""
    core, grid = space.legal_core, space.transport_grid
    rules = space.rules()
    out = {}
    for f in FIELDS:
        col = grid[f] if f in TRANSPORT else core[f]
        vals = np.unique(np.asarray(col)).tolist()
        if f in CATEGORICAL:
            vals = [CATEGORICAL[f][int(v)] for v in vals]
        rule = rules.get(RULE_OF_KNOB.get(f, ""))
        out[f] = {"values": vals, "count": len(vals), "rule": rule.allowed if rule else None}
    return out


def preset_report(name: str) -> dict:
    """A preset by name (model, cluster or GPU), validated, with the numbers derived from it."""
    from .specs.presets import load_preset, preset_names
    kinds = [k for k in ("models", "clusters", "hardware") if name in preset_names(k)]
    if not kinds:
        allowed = "; ".join(f"{k}: {', '.join(preset_names(k))}" for k in ("models", "clusters", "hardware"))
        raise UserInputError("PRESET", name, allowed)
    kind = kinds[0]
    spec = load_preset(kind, name)
    out = {"kind": kind.rstrip("s") if kind != "hardware" else "gpu", "name": name, "spec": spec.model_dump(mode="json")}
    if kind == "models":
        out["derived"] = {"total_params": spec.total_params, "active_params": spec.active_params,
                          "is_moe": spec.is_moe}
    elif kind == "clusters":
        out["derived"] = {"n_gpus": spec.n_gpus, "n_buildings": spec.n_buildings, "network": spec.network_lines()}
    return out

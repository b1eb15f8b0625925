"""Named presets (YAML files shipped in ``autotune/presets``) and scenario assembly with
dotted command-line overrides (``--set cluster.cross_building.loss_rate=1e-5``)."""
from __future__ import annotations

import copy
import re
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import ValidationError

from ..errors import UserInputError, from_pydantic
from ..numtext import INT_TEXT, MAX_INT_DIGITS, int_or_none
from ..yamlsafe import load_file, load_text

from .preset_tables import KINDS, _KIND_ALIASES, preset_dict, preset_names  # noqa: F401 - public here too


@lru_cache(maxsize=None)
def load_preset(kind: str, name: str):
    """A validated spec object for a preset name."""
    from .cluster import ClusterSpec
    from .hardware import HardwareSpec
    from .model import ModelSpec
    cls = {"models": ModelSpec, "hardware": HardwareSpec, "clusters": ClusterSpec}[_KIND_ALIASES.get(kind, kind)]
    try:
        return cls.model_validate(preset_dict(kind, name))
    except ValidationError as e:  # a broken shipped preset is a bug, but say where
        raise from_pydantic(e, prefix=f"{kind}.{name}") from None


_YAML11_NUMBER = re.compile(r"[+-]?(0[0-7]+|0[xob][0-9a-fA-F_]+|[0-9][0-9_]*_[0-9_]*(\.[0-9_]*)?|[0-9]+(:[0-5]?[0-9])+)")
"""What YAML 1.1 reads as a number and a person would not: octal (010 is 8), hex/binary, digits with
underscores (1_6 is 16), sexagesimal (1:30 is 90)."""


def _parse_scalar(text: str, key: str = ""):
    """One --set value: a decimal integer as written (010 is 10, as in --config), else YAML."""
    if INT_TEXT.fullmatch(text):
        n = int_or_none(text)
        if n is None:                      # int() refuses past 4,300 digits with a ValueError
            raise UserInputError(f"--set {key}".strip(), text, f"an integer of at most {MAX_INT_DIGITS} digits")
        return n
    if _YAML11_NUMBER.fullmatch(text):
        raise UserInputError(f"--set {key}".strip(), text, "a number written with the digits 0-9 (no "
                                                           "_ separators, 0x or : forms)")
    if not text:
        raise UserInputError(f"--set {key}".strip(), text, "a value (null to unset an optional field)")
    try:
        return load_text(text, "--set", text)
    except yaml.YAMLError:
        return text


def deep_merge(base: dict, over: dict) -> dict:
    """``over`` merged into a copy of ``base``: mappings merge key by key at every depth; lists and
    scalars are replaced whole (a building list is one value)."""
    out = copy.deepcopy(base)
    for key, val in over.items():
        if isinstance(val, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], val)
        else:
            out[key] = copy.deepcopy(val)
    return out


def apply_override(tree: dict, dotted: str, value, created: list | None = None) -> None:
    """Set ``tree[a][b][c] = value`` for ``dotted='a.b.c'``; list indices are integers. A section
    the tree lacks is created, and its dotted path appended to ``created``; a mapping value merges
    into an existing mapping (``--set 'cluster.scale_out={latency_s: 1e-5}'`` keeps the other
    fields)."""
    parts = dotted.split(".")
    node = tree
    for i, key in enumerate(parts[:-1]):
        nxt = parts[i + 1]
        if isinstance(node, list):
            key = _index(key, len(node), ".".join(parts[: i + 1]))
        elif key not in node or node[key] is None:
            node[key] = {}
            if created is not None:
                created.append(".".join(parts[: i + 1]))
        node = node[key]
        if not isinstance(node, (dict, list)):
            raise UserInputError(".".join(parts[: i + 1]), node, f"a section that has a key {nxt!r}")
    last = parts[-1]
    if isinstance(node, list):
        last = _index(last, len(node), dotted)
    if isinstance(value, dict) and isinstance(node, dict) and isinstance(node.get(last), dict):
        value = deep_merge(node[last], value)
    node[last] = value


def _index(text: str, n: int, field: str) -> int:
    """A list index in a dotted key: 0 to n - 1 in the ASCII digits (str.isdigit takes '²', int() '١')."""
    i = int_or_none(text) if text.isascii() and text.isdecimal() else None
    if i is None or i >= n:
        raise UserInputError(field, text, f"an index from 0 to {n - 1}" if n else "no index (the list is empty)")
    return i


def parse_overrides(items) -> list[tuple[str, object]]:
    out = []
    for item in items or ():
        if "=" not in item:
            raise UserInputError("--set", item, "key=value with a dotted key, e.g. cluster.cross_building.loss_rate=1e-5")
        key, _, val = item.partition("=")
        if not key.strip():
            raise UserInputError("--set", item, "a non-empty dotted key")
        out.append((key.strip(), _parse_scalar(val.strip(), key.strip())))
    return out


def _current(tree, dotted: str):
    """The value at ``dotted`` in the tree, None where the path does not exist (yet)."""
    node = tree
    for part in dotted.split("."):
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isascii() and part.isdecimal() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _section(value, kind: str) -> dict:
    if isinstance(value, str):
        return preset_dict(kind, value)
    if isinstance(value, dict):
        value = copy.deepcopy(value)
        base = value.pop("preset", None)
        if base is not None:
            return deep_merge(preset_dict(kind, str(base)), value)
        return value
    raise UserInputError(kind, value, "a preset name or a mapping of fields")


TIER_NAMES = ("scale_out", "cross_zone", "cross_building", "cross_region")


def _missing_section(exc: ValidationError, created: list[str], tree: dict) -> UserInputError | None:
    """A --set into a section the preset does not have (``cluster.cross_building.loss_rate`` on a
    cluster whose buildings are joined by ``cross_region``) fails on the section's required fields;
    say which section is missing and which ones the preset has instead."""
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        hit = next((c for c in created if loc.startswith(c + ".")), None)
        if err.get("type") == "missing" and hit is not None:
            if hit.startswith("cluster.") and hit.split(".")[1] in TIER_NAMES:
                have = [t for t in TIER_NAMES if isinstance(tree["cluster"].get(t), dict) and f"cluster.{t}" != hit]
                return UserInputError("--set", hit, f"a tier cluster {tree['cluster'].get('name', 'custom')!r} has "
                                      f"({', '.join(have)}), or a whole new tier as a mapping with bandwidth_Bps")
            return UserInputError("--set", hit, f"a section the scenario has, or a whole new one (missing {loc})")
    return None


def read_scenario_file(path: str | Path) -> dict:
    data = load_file(path, "--scenario")
    if not isinstance(data, dict):
        raise UserInputError("--scenario", str(path), "a YAML mapping with keys model, workload, cluster")
    return data


def build_scenario(model=None, cluster=None, gpus=None, global_batch=None, seq_len=None,
                   precision=None, scenario_file=None, overrides=()):
    """Assemble and validate a Scenario from presets, an optional file and overrides.

    Precedence (later wins): scenario file < named presets given here < explicit options < --set.
    """
    from .scenario import Scenario
    data = read_scenario_file(scenario_file) if scenario_file else {}
    unknown = set(data) - {"model", "workload", "cluster"}
    if unknown:
        key = sorted(unknown)[0]
        raise UserInputError(key, data[key], "scenario keys are model, workload, cluster")
    for key, val in (("model", model), ("cluster", cluster)):
        if val is None:
            continue
        if key in data and data[key] != val:   # documented precedence, said aloud: a file's section is dropped
            import sys
            print(f"note: --{key} {val} replaces the {key} section of {scenario_file}", file=sys.stderr)
        data[key] = val
    if "model" not in data:
        raise UserInputError("model", None, "a preset name (" + ", ".join(preset_names("models")) + ") or --scenario FILE")
    if "cluster" not in data:
        raise UserInputError("cluster", None, "a preset name (" + ", ".join(preset_names("clusters")) + ") or --scenario FILE")
    if not isinstance(data.get("workload") or {}, dict):
        raise UserInputError("workload", data.get("workload"), "a mapping of workload fields")
    tree = {"model": _section(data["model"], "model"), "cluster": _section(data["cluster"], "cluster"),
            "workload": dict(data.get("workload") or {})}
    for key, val in (("global_batch_seqs", global_batch), ("seq_len", seq_len), ("precision", precision)):
        if val is not None:
            tree["workload"][key] = val
    created: list[str] = []
    for key, val in parse_overrides(overrides):
        if key.split(".")[0] not in ("model", "workload", "cluster"):
            raise UserInputError("--set", key, "a key starting with model., workload. or cluster.")
        if key in ("model", "cluster", "workload") and not isinstance(val, dict):
            raise UserInputError(f"--set {key}", val, f"a mapping of {key} fields, e.g. {key}={{...}}"
                                 + (f" (a preset: --{key} {val})" if key != "workload" else ""))
        cur = _current(tree, key)
        if isinstance(val, bool) and isinstance(cur, (int, float)) and not isinstance(cur, bool):
            raise UserInputError(f"--set {key}", val, f"a number (it is {cur}); true/false are not numbers")
        apply_override(tree, key, val, created)
    try:
        scen = Scenario.model_validate(tree)
    except ValidationError as e:
        raise _missing_section(e, created, tree) or from_pydantic(e) from None
    if gpus is not None:
        scen = scen.model_copy(update={"cluster": scen.cluster.with_total_gpus(int(gpus))})
    return scen

"""The preset tables shipped in ``autotune/presets`` (YAML), read as plain dicts: no spec class is
imported here, so the specs can resolve a preset name without a cycle."""
from __future__ import annotations

import copy
from functools import lru_cache
from importlib import resources

import yaml

from ..errors import UserInputError

KINDS = ("models", "hardware", "clusters")
_KIND_ALIASES = {"model": "models", "hardware": "hardware", "gpu": "hardware", "cluster": "clusters"}


@lru_cache(maxsize=None)
def _preset_table(kind: str) -> dict:
    text = resources.files("autotune.presets").joinpath(f"{kind}.yaml").read_text()
    return yaml.safe_load(text)


def preset_names(kind: str) -> list[str]:
    return sorted(_preset_table(_KIND_ALIASES.get(kind, kind)))


def preset_dict(kind: str, name: str) -> dict:
    """The raw preset as a fresh dict (with its name filled in)."""
    table_kind = _KIND_ALIASES.get(kind, kind)
    table = _preset_table(table_kind)
    if name not in table:
        raise UserInputError(kind, name, "one of " + ", ".join(sorted(table)))
    d = copy.deepcopy(table[name])
    d.setdefault("name", name)
    return d

"""Parse a configuration from the command line ("tp=8,pp=16,placement=dp_out") or a YAML file."""
from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from .errors import UserInputError, from_pydantic
from .numtext import int_or_none
from .specs.config import CATEGORICAL, FIELDS, INTEGER, MAX_DEGREE, Config
from .yamlsafe import load_text, read_file

FLAGS = ("overlap_dp",)
"""Integer fields that are switches (0 off, 1 on): their error says so."""


def _int_rule(key: str) -> str:
    return "0 (off) or 1 (on)" if key in FLAGS else "an integer written with the digits 0-9"


def parse_config_text(text: str) -> dict:
    text = (text or "").strip()
    if not text:
        raise UserInputError("--config", text, "key=value pairs separated by commas, e.g. tp=8,pp=16,placement=dp_out")
    p = Path(text)
    if text.endswith((".yaml", ".yml", ".json")):
        try:
            data = load_text(read_file(p, "--config"), "--config", text)
        except yaml.YAMLError:
            raise UserInputError("--config", text, "a UTF-8 YAML mapping of configuration fields") from None
        if isinstance(data, dict) and isinstance(data.get("best_config"), dict):
            data = data["best_config"]
        if not isinstance(data, dict):
            raise UserInputError("--config", text, "a YAML mapping of configuration fields")
        return data
    out = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise UserInputError("--config", text, "key=value pairs separated by single commas, none empty "
                                                   "(e.g. tp=8,pp=16)")
        if "=" not in part:
            raise UserInputError("--config", part, "key=value (e.g. tp=8)")
        key, _, val = part.partition("=")
        key, val = key.strip(), val.strip()
        if key in out:
            raise UserInputError(f"config.{key}", val, f"each field once (already {key}={out[key]})")
        if key not in FIELDS:
            raise UserInputError(f"config.{key}", val, "a field among " + ", ".join(FIELDS))
        if key in INTEGER:
            n = int_or_none(val)        # int() would take '1_000' and non-ASCII digits
            if n is None:
                raise UserInputError(f"config.{key}", val, _int_rule(key))
            out[key] = n
        else:
            if val not in CATEGORICAL[key]:
                raise UserInputError(f"config.{key}", val, "one of " + ", ".join(CATEGORICAL[key]))
            out[key] = val
    return out


def make_config(fields: dict, n_gpus: int) -> Config:
    """Config from fields; dp defaults to the GPUs left after tp, cp and pp."""
    fields = dict(fields)
    unknown = [k for k in fields if k not in FIELDS]
    if unknown:
        raise UserInputError(f"config.{unknown[0]}", fields[unknown[0]], "a field among " + ", ".join(FIELDS))
    for k in INTEGER:          # a file's quoted number: pydantic would take '1_000' and non-ASCII digits
        v = fields.get(k)
        if isinstance(v, bool) or isinstance(v, float) or (isinstance(v, str) and int_or_none(v) is None):
            raise UserInputError(f"config.{k}", v, _int_rule(k))
    if "dp" not in fields:
        denom = 1
        for k in ("tp", "cp", "pp"):
            v = fields.get(k, 1)
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_DEGREE:
                raise UserInputError(f"config.{k}", v, f"an integer from 1 to {MAX_DEGREE}")
            denom *= v
        if n_gpus % denom:
            raise UserInputError("config.tp*cp*pp", denom, f"a divisor of the {n_gpus} GPUs (dp is the rest)")
        fields["dp"] = n_gpus // denom
    try:
        return Config(**fields)
    except ValidationError as e:
        raise from_pydantic(e, prefix="config") from None

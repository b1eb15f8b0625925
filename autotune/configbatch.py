"""Batches of configurations as the vectorised cost model reads them: a dict of equal-length
arrays (integers, and int8 codes for categorical knobs), and the conversions to and from Config."""
from __future__ import annotations

import numpy as np

from .errors import UserInputError
from .specs.config import CATEGORICAL, FIELDS, Config

ConfigBatch = dict  # field name -> np.ndarray

CODES = {f: {name: i for i, name in enumerate(vals)} for f, vals in CATEGORICAL.items()}
"""Categorical knob -> value name -> its code."""
_INTEGER_FIELDS = tuple(f for f in FIELDS if f not in CATEGORICAL)


def scalar_row(config: Config) -> dict:
    """One Config as the cost model's scalar path reads it: integers, and the codes of the
    categorical knobs (a one-row ConfigBatch of Python numbers)."""
    row = {f: getattr(config, f) for f in _INTEGER_FIELDS}
    for f, lut in CODES.items():
        row[f] = lut[getattr(config, f)]
    return row


def batch_from_configs(configs) -> ConfigBatch:
    """Configs (objects or flat dicts with names) -> ConfigBatch of codes."""
    rows = [c.model_dump() if isinstance(c, Config) else Config(**c).model_dump() for c in configs]
    out = {}
    for f in FIELDS:
        vals = [r[f] for r in rows]
        if f in CATEGORICAL:
            out[f] = np.array([CODES[f][x] for x in vals], dtype=np.int8)
        else:
            out[f] = np.array(vals, dtype=np.int64)
    return out


def config_at(batch: ConfigBatch, i: int) -> Config:
    """Row ``i`` of a batch as a Config."""
    d = {}
    for f in FIELDS:
        if f == "etp" and f not in batch:      # optional column: absent = 0 (the experts' TP is tp)
            continue
        x = int(batch[f][i])
        d[f] = CATEGORICAL[f][x] if f in CATEGORICAL else x
    return Config(**d)


def take(batch: ConfigBatch, idx) -> ConfigBatch:
    return {k: v[idx] for k, v in batch.items()}


def concat(batches) -> ConfigBatch:
    batches = list(batches)
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def _check_ranges(b: ConfigBatch, n: int) -> None:
    """Every integer field within Config's bounds and every categorical code a valid index (a
    batch built by hand skips Config's validation; the legality rules assume both)."""
    where = (lambda i: f" (row {i} of {n})" if n > 1 else "")
    for f in FIELDS:
        if f == "etp" and f not in b:          # optional column: absent = 0 (the experts' TP is tp)
            continue
        col = np.asarray(b[f])
        if f in CATEGORICAL:
            lo, hi = 0, len(CATEGORICAL[f]) - 1
            allowed = f"a code 0..{hi} ({', '.join(CATEGORICAL[f])})"
        else:
            meta = Config.model_fields[f].metadata
            lo = next(m.ge for m in meta if hasattr(m, "ge"))
            hi = next(m.le for m in meta if hasattr(m, "le"))
            allowed = f"an integer from {lo} to {hi}"
        bad = np.flatnonzero((col < lo) | (col > hi) | (col != np.floor(col)))
        if len(bad):
            i = int(bad[0])
            raise UserInputError(f"config.{f}{where(i)}", col[i].item(), allowed)

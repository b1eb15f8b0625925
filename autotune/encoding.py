"""A flat, static encoding of a SearchSpace for black-box samplers and RL agents.

Every knob is an integer index into its own value list, always sampled (no conditional,
define-by-run parameters, so Optuna's multivariate TPE stays multivariate). Degrees are indices
into the scenario's candidate values; ``pp_rank`` indexes the pipeline depths that are legal for
the chosen (tp, cp, ep), so the divisor constraint is encoded, not rejected (docs/search.md).

``decode`` maps any index vector to a legal configuration: the exact one when it is legal, else
the nearest legal one (fewest knobs changed, ordered knobs moved the least). The legality
mask of ``SearchSpace`` is the only judge of legality.
"""
from __future__ import annotations

import numpy as np

from .space import TRANSPORT, SearchSpace, config_at, take
from .specs.config import CATEGORICAL, Config

CORE = ("placement", "dp_flavour", "pp_schedule", "pp_chunks", "micro_batch", "recompute", "hetero_split")
"""Core knobs decoded in this order; a knob an index vector omits (the PPO agent's fixed action
space has no hetero_split) takes its first legal value."""


class FlatEncoding:
    def __init__(self, space: SearchSpace):
        self.space = space
        core = space.legal_core
        self.values: dict[str, list] = {
            "tp": sorted(set(core["tp"].tolist())), "cp": sorted(set(core["cp"].tolist())),
            "ep": sorted(set(core["ep"].tolist())),
            "pp_rank": [0],   # sized below, once the legal depths per (tp, cp, ep) are known
            "placement": sorted(set(core["placement"].tolist())),
            "dp_flavour": sorted(set(core["dp_flavour"].tolist())),
            "pp_schedule": sorted(set(core["pp_schedule"].tolist())),
            "pp_chunks": sorted(set(core["pp_chunks"].tolist())),
            "micro_batch": sorted(set(core["micro_batch"].tolist())),
            "recompute": sorted(set(core["recompute"].tolist())),
            "hetero_split": sorted(set(core["hetero_split"].tolist())),
        }
        t = space.transport_grid
        for k in TRANSPORT:
            self.values[k] = sorted(set(t[k].tolist()))
        self.names = list(self.values)
        self.sizes = [len(self.values[k]) for k in self.names]
        # legal_core rows are grouped by degree tuple (enumeration order): remember each block
        deg = np.stack([core[k] for k in ("tp", "cp", "ep", "pp")], axis=1)
        change = np.ones(len(deg), dtype=bool)
        change[1:] = np.any(deg[1:] != deg[:-1], axis=1)
        starts = np.flatnonzero(change)
        self._block_start = starts
        self._block_end = np.append(starts[1:], len(deg))
        self._block_deg = deg[starts]
        self._pp_lists: dict[tuple, list] = {}
        for (tp, cp, ep, pp) in self._block_deg.tolist():
            self._pp_lists.setdefault((tp, cp, ep), []).append(pp)
        self._transport = t
        self.pp_ranks = max(len(set(v)) for v in self._pp_lists.values())
        self.values["pp_rank"] = list(range(self.pp_ranks))
        self.sizes = [len(self.values[k]) for k in self.names]

    # -------------------------------------------------------------- encode / decode
    # Sequential, "index into what is left" (docs/search.md): each knob's index selects, by scaling,
    # among the values still legal given the knobs decoded before it. Every index vector decodes
    # to a legal configuration and neighbouring indices stay neighbours.
    @staticmethod
    def _pick(idx: int, size: int, legal: list):
        i = int(np.clip(idx, 0, size - 1))
        return legal[min(len(legal) - 1, i * len(legal) // size)]

    @staticmethod
    def _index_of(value, size: int, legal: list) -> int:
        pos = legal.index(value)
        return min(size - 1, -(-pos * size // len(legal)))      # ceil: _pick floors back to pos

    def decode(self, idx: dict) -> Config:
        deg = self._block_deg
        keep = np.ones(len(deg), dtype=bool)
        chosen = {}
        for j, k in enumerate(("tp", "cp", "ep")):
            legal = sorted(set(deg[keep, j].tolist()))
            chosen[k] = self._pick(idx[k], len(self.values[k]), legal)
            keep &= deg[:, j] == chosen[k]
        pps = sorted(set(deg[keep, 3].tolist()))
        chosen["pp"] = self._pick(idx["pp_rank"], self.pp_ranks, pps)
        b = int(np.flatnonzero(keep & (deg[:, 3] == chosen["pp"]))[0])
        block = take(self.space.legal_core, slice(self._block_start[b], self._block_end[b]))
        rows = np.ones(len(block["tp"]), dtype=bool)
        for k in CORE:
            legal = sorted(set(block[k][rows].tolist()))
            v = self._pick(idx.get(k, 0), len(self.values[k]), legal)
            rows &= block[k] == v
        row = take(block, np.flatnonzero(rows)[:1])
        t = self._transport
        trows = np.ones(len(t["collective"]), dtype=bool)
        for k in TRANSPORT:
            legal = sorted(set(t[k][trows].tolist()))
            v = self._pick(idx.get(k, 0), len(self.values[k]), legal)
            trows &= t[k] == v
            row[k] = np.array([v], dtype=t[k].dtype)
        return config_at(row, 0)

    def encode(self, config: Config) -> dict:
        row = {f: getattr(config, f) for f in ("tp", "cp", "ep", "pp", "pp_chunks", "micro_batch", "xb_queue_pairs",
                                                "nccl_channels", "nccl_buffer_mib", "dp_bucket_mib")}
        for f, vals in CATEGORICAL.items():
            row[f] = vals.index(getattr(config, f))
        out = {}
        deg = self._block_deg
        keep = np.ones(len(deg), dtype=bool)
        for j, k in enumerate(("tp", "cp", "ep")):
            legal = sorted(set(deg[keep, j].tolist()))
            out[k] = self._index_of(row[k], len(self.values[k]), legal)
            keep &= deg[:, j] == row[k]
        pps = sorted(set(deg[keep, 3].tolist()))
        out["pp_rank"] = self._index_of(row["pp"], self.pp_ranks, pps)
        b = int(np.flatnonzero(keep & (deg[:, 3] == row["pp"]))[0])
        block = take(self.space.legal_core, slice(self._block_start[b], self._block_end[b]))
        rows = np.ones(len(block["tp"]), dtype=bool)
        for k in CORE:
            legal = sorted(set(block[k][rows].tolist()))
            out[k] = self._index_of(row[k], len(self.values[k]), legal)
            rows &= block[k] == row[k]
        t = self._transport
        trows = np.ones(len(t["collective"]), dtype=bool)
        for k in TRANSPORT:
            legal = sorted(set(t[k][trows].tolist()))
            out[k] = self._index_of(row[k], len(self.values[k]), legal)
            trows &= t[k] == row[k]
        return out

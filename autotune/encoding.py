"""A flat, static encoding of a SearchSpace for black-box samplers and RL agents.

Every knob is an integer index into its own value list, always sampled (no conditional,
define-by-run parameters, so Optuna's multivariate TPE stays multivariate). Degrees are indices
into the scenario's candidate values; ``pp_rank`` indexes the pipeline depths that are legal for
the chosen (tp, cp, ep), so the divisor constraint is encoded, not rejected (SEARCH.md).

``decode`` maps any index vector to a legal configuration: the exact one when it is legal, else
the nearest legal one (fewest knobs changed, ordered knobs moved the least). The legality
mask of ``SearchSpace`` is the only judge of legality.
"""
from __future__ import annotations

import numpy as np

from .space import SearchSpace, config_at, take
from .specs.config import CATEGORICAL, Config

DEGREES = ("tp", "cp", "ep")
CORE = ("placement", "dp_flavour", "pp_schedule", "pp_chunks", "micro_batch", "recompute")
TRANSPORT = ("xb_load_balancing", "xb_queue_pairs", "xb_loss_recovery", "collective")


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
    def encode(self, config: Config) -> dict:
        row = {f: getattr(config, f) for f in ("tp", "cp", "ep", "pp", "pp_chunks", "micro_batch", "xb_queue_pairs")}
        for f, vals in CATEGORICAL.items():
            row[f] = vals.index(getattr(config, f))
        out = {}
        for k in self.names:
            if k == "pp_rank":
                pps = sorted(set(self._pp_lists.get((config.tp, config.cp, config.ep), [config.pp])))
                i = pps.index(config.pp) if config.pp in pps else 0
                out[k] = min(self.pp_ranks - 1, -(-i * self.pp_ranks // len(pps)))   # ceil: decode is floor
            else:
                vals = self.values[k]
                out[k] = vals.index(row[k]) if row[k] in vals else 0
        return out

    def _nearest_block(self, tp, cp, ep, pp_rank) -> int:
        """Nearest legal degree tuple: log2 distance on tp, cp, ep; pp by rank among legal depths."""
        d = self._block_deg.astype(np.float64)
        dist = (np.abs(np.log2(d[:, 0]) - np.log2(tp)) + np.abs(np.log2(d[:, 1]) - np.log2(cp))
                + np.abs(np.log2(d[:, 2]) - np.log2(ep)))
        exact = np.flatnonzero(dist == dist.min())
        cands = self._block_deg[exact]
        key = tuple(cands[0, :3].tolist())
        pps = sorted(set(self._pp_lists[key]))
        want = pps[min(len(pps) - 1, pp_rank * len(pps) // self.pp_ranks)]
        same = [i for i in exact if tuple(self._block_deg[i, :3].tolist()) == key]
        return min(same, key=lambda i: abs(np.log2(self._block_deg[i, 3]) - np.log2(want)))

    def decode(self, idx: dict) -> Config:
        v = {k: self.values[k][int(np.clip(idx[k], 0, len(self.values[k]) - 1))] for k in self.names}
        b = self._nearest_block(v["tp"], v["cp"], v["ep"], v["pp_rank"])
        lo, hi = self._block_start[b], self._block_end[b]
        block = take(self.space.legal_core, slice(lo, hi))
        cost = np.zeros(hi - lo)
        for k in ("placement", "dp_flavour", "pp_schedule", "recompute"):
            cost += 2.0 * (block[k] != v[k])
        cost += np.abs(np.log2(block["pp_chunks"]) - np.log2(v["pp_chunks"]))
        cost += np.abs(np.log2(block["micro_batch"]) - np.log2(v["micro_batch"]))
        row = take(block, [int(np.argmin(cost))])
        t = self._transport
        match = np.ones(len(t["collective"]), dtype=bool)
        for k in TRANSPORT:
            match &= t[k] == v[k]
        ti = int(np.flatnonzero(match)[0]) if match.any() else 0
        for k in TRANSPORT:
            row[k] = t[k][[ti]]
        return config_at(row, 0)

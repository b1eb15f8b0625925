"""Why one configuration beats another: the best configuration per group of a knob.

``best_by(scenario, group=("placement",), where={"dp_flavour": ("hsdp",)})`` runs the exhaustive
search over the legal rows that satisfy ``where`` and returns, for every value of the ``group``
knobs, the fastest feasible configuration with its breakdown. "Best DP-out vs best PP-out" is
``best_by(s, ("placement",), where={"placement": ("dp_out", "pp_out")})``. The experiments and
the findings tests read the model only through this function.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .costmodel.iteration import BREAKDOWN_KEYS, evaluate_batch
from .costmodel.params import CostParams
from .errors import UserInputError
from .space import TRANSPORT as _TRANSPORT, SearchSpace, config_at, take
from .strategies.exhaustive import core_fits_and_bounds
from .specs.config import CATEGORICAL, FIELDS
from .specs.scenario import Scenario



@dataclass(frozen=True)
class GroupBest:
    key: tuple
    iteration_time_s: float
    config: object
    breakdown: dict
    xb_bytes_per_step: float

    @property
    def feasible(self) -> bool:
        return math.isfinite(self.iteration_time_s)

    def to_dict(self) -> dict:
        return {"key": list(self.key), "iteration_time_s": self.iteration_time_s if self.feasible else None,
                "config": self.config.model_dump() if self.config is not None else None,
                "breakdown": self.breakdown, "xb_bytes_per_step": self.xb_bytes_per_step}


def _codes(field: str, values) -> np.ndarray:
    if field not in FIELDS:
        raise UserInputError("where", field, "a configuration field: " + ", ".join(FIELDS))
    if field in CATEGORICAL:
        out = []
        for v in values:
            if v not in CATEGORICAL[field]:
                raise UserInputError(f"where.{field}", v, ", ".join(CATEGORICAL[field]))
            out.append(CATEGORICAL[field].index(v))
        return np.array(out)
    return np.array([int(v) for v in values])


def _filter(batch: dict, where: dict) -> dict:
    keep = np.ones(len(next(iter(batch.values()))), dtype=bool)
    for f, values in where.items():
        if f in batch:
            keep &= np.isin(batch[f], _codes(f, values))
    return take(batch, keep)


def _name(field: str, code: int):
    return CATEGORICAL[field][code] if field in CATEGORICAL else int(code)


def best_by(scenario: Scenario, group: tuple[str, ...], where: dict | None = None,
            params: CostParams | None = None, space: SearchSpace | None = None,
            chunk_rows: int = 1 << 18) -> dict[tuple, GroupBest]:
    """Exact search restricted to ``where`` (field -> allowed values), best per ``group`` value.

    Every legal core row passing the filter that can still win its group is crossed with every
    transport row passing it, so the result per group is exact, not sampled. Core rows that do
    not fit in memory are dropped first (no transport changes memory); the rest are visited in the
    order of their transport-free lower bound (``costmodel.bounds``) and skipped once the bound
    exceeds their group's incumbent. Groups with no feasible row map to an infinite time and
    no config.
    """
    where = dict(where or {})
    for f in group:
        if f not in FIELDS:
            raise UserInputError("group", f, "a configuration field: " + ", ".join(FIELDS))
    space = space or SearchSpace(scenario)
    core = _filter(space.legal_core, {k: v for k, v in where.items() if k not in _TRANSPORT})
    transport = _filter(space.transport_grid, {k: v for k, v in where.items() if k in _TRANSPORT})
    nt = len(transport["collective"])
    best: dict[tuple, GroupBest] = {}
    n_core = len(core["tp"])
    if nt == 0 or n_core == 0:
        return best
    fits, lb = core_fits_and_bounds(scenario, core, params, chunk_rows)
    # per-group pruning needs every row's group from its core knobs alone: legal_core holds the
    # transport knobs at their first value only, so a group naming one is scanned in full
    core_keys = (np.stack([core[f].astype(np.int64) for f in group], axis=1) if group else
                 np.zeros((n_core, 0), np.int64)) if not any(f in _TRANSPORT for f in group) else None
    if group and core_keys is not None and not fits.all():
        # groups whose every row is out of memory still appear, with an infinite time
        for row in np.unique(core_keys[~fits], axis=0):
            key = tuple(_name(f, int(c)) for f, c in zip(group, row))
            best.setdefault(key, GroupBest(key, math.inf, None, {}, math.nan))
    # Branch-and-bound per group: rows in lower-bound order; a row is evaluated only while its
    # bound can still reach its group's incumbent (ties kept: the first in enumeration order wins,
    # as in a brute-force scan). Groups that name a transport knob are scanned in full.
    rows_left = np.flatnonzero(fits)
    rows_left = rows_left[np.argsort(lb[rows_left], kind="stable")]
    if core_keys is not None:
        uniq, gid = np.unique(core_keys, axis=0, return_inverse=True)
        gid = gid.reshape(-1)
        gnames = [tuple(_name(f, int(c)) for f, c in zip(group, row)) for row in uniq]
        incumbent = np.full(len(uniq), np.inf)
        present = np.unique(gid[rows_left])
    best_g: dict[tuple, int] = {}
    step = max(1, chunk_rows // nt)
    for start in range(0, len(rows_left), step):
        rows = rows_left[start:start + step]
        if core_keys is not None:
            if lb[rows[0]] > incumbent[present].max():
                break                              # no group's incumbent is reachable any more
            rows = rows[lb[rows] <= incumbent[gid[rows]]]
            if len(rows) == 0:
                continue
        c = take(core, rows)
        k = len(rows)
        b = {f: np.repeat(v, nt) for f, v in c.items() if f not in _TRANSPORT}
        b.update({f: np.tile(v, k) for f, v in transport.items()})
        out = evaluate_batch(scenario, b, params, check=False)
        times = np.where(out["feasible"], out["iteration_time_s"], np.inf)
        gidx = np.repeat(rows, nt) * nt + np.tile(np.arange(nt), k)   # enumeration order
        keys = np.stack([b[f].astype(np.int64) for f in group], axis=1) if group else np.zeros((len(times), 0), int)
        uniq_b, inv = np.unique(keys, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        order = np.lexsort((gidx, times, inv))     # by group, then time, then enumeration order
        first = order[np.r_[0, np.flatnonzero(np.diff(inv[order])) + 1]]
        for gi, row in zip(inv[first], first):
            key = tuple(_name(f, int(code)) for f, code in zip(group, uniq_b[gi]))
            t, g = float(times[row]), int(gidx[row])
            prev = best.get(key)
            if prev is None or (t, g) < (prev.iteration_time_s, best_g.get(key, -1)):
                cfg = config_at(b, int(row)) if math.isfinite(t) else None
                best[key] = GroupBest(key, t, cfg, {kk: float(out[kk][row]) for kk in BREAKDOWN_KEYS},
                                      float(out["xb_bytes_per_step"][row]))
                best_g[key] = g
        if core_keys is not None:
            for j, name in enumerate(gnames):
                if name in best:
                    incumbent[j] = best[name].iteration_time_s
    return best


def winner(best: dict[tuple, GroupBest]):
    """The key of the fastest group and its margin over the runner-up (runner-up time / best - 1)."""
    ranked = sorted(best.values(), key=lambda g: g.iteration_time_s)
    if not ranked or not ranked[0].feasible:
        return None, math.nan
    margin = ranked[1].iteration_time_s / ranked[0].iteration_time_s - 1 if len(ranked) > 1 else math.inf
    return ranked[0].key, margin


def fastest_buildings_only(scenario: Scenario) -> Scenario | None:
    """The scenario on its fastest GPU type's buildings alone, at the same global batch (the
    default batch is rounded per building count); None where the buildings all have one GPU."""
    from .space import mixed_speeds
    if not mixed_speeds(scenario):
        return None
    c = scenario.cluster
    speed = {b.gpu: (b.gpu.peak_flops(scenario.precision) or b.gpu.peak_flops_bf16, b.gpu.hbm_bandwidth_Bps)
             for b in c.buildings}
    top = max(speed.values())
    return buildings_only(scenario, [j for j, b in enumerate(c.buildings) if speed[b.gpu] == top])


def buildings_only(scenario: Scenario, keep) -> Scenario:
    """The scenario on the buildings numbered in ``keep`` alone, at the same global batch (the
    default batch is rounded per building count)."""
    c = scenario.cluster
    kept = tuple(b for j, b in enumerate(c.buildings) if j in set(keep))
    return scenario.model_copy(update={
        "cluster": c.model_copy(update={"buildings": kept}),
        "workload": scenario.workload.model_copy(update={"global_batch_seqs": scenario.global_batch_seqs})})


def leave_slow_out(scenario: Scenario, best_s: float, params: CostParams | None = None, space_options=None) -> dict | None:
    """On a cluster of mixed GPUs: the exact optimum of the fastest buildings alone, beside the
    optimum using every building (``best_s``). None on one GPU type."""
    from .strategies.exhaustive import exhaustive_search
    fast = fastest_buildings_only(scenario)
    if fast is None:
        return None
    try:
        space = SearchSpace(fast, **(space_options or {})).require_legal()
    except UserInputError as e:
        return {"buildings": len(fast.cluster.buildings), "gpus": fast.n_gpus, "iteration_time_s": None,
                "config": None, "why_none": e.allowed}
    r = exhaustive_search(space, params)
    t = r.best_iteration_time_s if r.best_config is not None else None
    return {"buildings": len(fast.cluster.buildings), "gpus": fast.n_gpus, "iteration_time_s": t,
            "config": r.best_config.model_dump() if r.best_config else None,
            "every_building_gain_pct": 100 * (t / best_s - 1) if t and math.isfinite(best_s) else None}

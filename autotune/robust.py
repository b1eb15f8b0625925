"""Robust configurations: the configuration with the best expected (or worst-case) iteration time
when a link's loss, bandwidth or latency varies over a run, found exactly over a seeded sample of
the variation, beside the nominal optimum's regret under the same sample.

A range ``cluster.<tier>.<field>=LOW..HIGH`` (or a YAML file of ``{path: [LOW, HIGH]}``) is sampled
by a Latin hypercube of ``samples`` points with a seed: log-uniform where LOW > 0 and HIGH / LOW
>= 10, uniform otherwise. The objective is the mean or the maximum over those points.

Exact over the samples, by a certificate: each sample's exact top K (``exhaustive_search``) is
taken and every configuration in their union is evaluated in every sample. A configuration outside
the union is outside every sample's top K, so in each sample s it takes at least that sample's
K-th best time t_K(s); its mean is at least mean_s t_K(s) and its maximum at least max_s t_K(s).
When the best candidate's objective is at most that bound, no configuration outside can beat it;
otherwise K grows fourfold and the search repeats. The link's fields change neither legality nor
memory, so every sample has the same feasible set.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import UserInputError, rule_of

TIERS = ("scale_out", "cross_zone", "cross_building", "cross_region")
FIELDS = ("loss_rate", "bandwidth_Bps", "latency_s", "distance_km", "oversubscription")
"""What may vary: a network tier's loss, bandwidth, base latency, distance, oversubscription."""
OBJECTIVES = ("mean", "worst")
MAX_TOP_K = 1 << 14
"""Largest per-sample top K tried before the search gives up proving exactness (and says so)."""


@dataclass(frozen=True)
class Range:
    path: str          # cluster.<tier>.<field>
    low: float
    high: float

    @property
    def log(self) -> bool:
        return self.low > 0 and self.high / self.low >= 10.0


def parse_ranges(items: tuple[str, ...] | list[str], scenario) -> list[Range]:
    """``--robust`` values: ``cluster.<tier>.<field>=LOW..HIGH`` or a YAML file mapping such paths to
    [LOW, HIGH]. Each is checked against the scenario (the tier exists, both ends are values the
    field accepts) before any work; a bad one is a one-line UserInputError."""
    out: list[Range] = []
    for item in items:
        if "=" in item:
            path, _, text = item.partition("=")
            lo_hi = text.split("..")
            if len(lo_hi) != 2:
                raise UserInputError("--robust", item, "cluster.<tier>.<field>=LOW..HIGH (e.g. "
                                     "cluster.cross_building.loss_rate=1e-6..1e-3) or a YAML file")
            out.append(_range(path.strip(), lo_hi[0], lo_hi[1], item))
        else:
            out += _ranges_from_file(item)
    if not out:
        raise UserInputError("--robust", "", "at least one range")
    paths = [r.path for r in out]
    if len(set(paths)) != len(paths):
        raise UserInputError("--robust", ",".join(paths), "each field at most once")
    used = _tiers_the_model_reads(scenario)
    for r in out:
        tier = r.path.split(".")[1]
        if tier not in used:
            raise UserInputError("--robust", f"{r.path}={r.low:g}..{r.high:g}",
                                 f"a tier the model reads for this cluster ({', '.join(used)})")
        for v in (r.low, r.high):
            with_values(scenario, {r.path: v}, option_value=f"{r.path}={r.low:g}..{r.high:g}")
    return out


def _tiers_the_model_reads(scenario) -> list[str]:
    """scale_out, cross_zone where set, and the crossing tier of a multi-building cluster
    (cross_region where its buildings span regions, else cross_building)."""
    c = scenario.cluster
    used = ["scale_out"] + (["cross_zone"] if c.cross_zone is not None else [])
    if c.n_buildings > 1:
        used.append("cross_region" if len({b.region for b in c.buildings}) > 1 else "cross_building")
    return used


def _ranges_from_file(path: str) -> list[Range]:
    import yaml

    from .yamlsafe import load_text, read_file
    p = Path(path)
    if not p.is_file():
        raise UserInputError("--robust", path, "cluster.<tier>.<field>=LOW..HIGH or an existing YAML file")
    try:
        data = load_text(read_file(p, "--robust"), "--robust", path)
    except yaml.YAMLError:
        raise UserInputError("--robust", path, "a well-formed YAML file") from None
    if not isinstance(data, dict) or not data:
        raise UserInputError("--robust", path, "a YAML mapping of cluster.<tier>.<field> to [LOW, HIGH]")
    out = []
    for k, v in data.items():
        if not (isinstance(v, (list, tuple)) and len(v) == 2):
            raise UserInputError("--robust", f"{path}: {k}", "[LOW, HIGH]")
        out.append(_range(str(k), v[0], v[1], f"{path}: {k}"))
    return out


def _range(path: str, lo, hi, shown: str) -> Range:
    parts = path.split(".")
    if len(parts) != 3 or parts[0] != "cluster" or parts[1] not in TIERS or parts[2] not in FIELDS:
        raise UserInputError("--robust", shown, f"cluster.<tier>.<field> with tier one of {', '.join(TIERS)} and "
                             f"field one of {', '.join(FIELDS)}")
    try:
        low, high = float(lo), float(hi)
    except (TypeError, ValueError):
        raise UserInputError("--robust", shown, "LOW..HIGH as two numbers") from None
    if not (math.isfinite(low) and math.isfinite(high)) or not low < high:
        raise UserInputError("--robust", shown, "a non-empty range LOW..HIGH with LOW < HIGH")
    return Range(path, low, high)


def with_values(scenario, values: dict, option_value: str | None = None):
    """The scenario with ``{cluster.<tier>.<field>: value}`` set (each tier re-validated)."""
    c = scenario.cluster
    tiers: dict = {}
    for path, v in values.items():
        _, tier, field = path.split(".")
        t = tiers.get(tier) or getattr(c, tier)
        if t is None:
            raise UserInputError("--robust", option_value or path, f"a tier this cluster has ({tier} is not set)")
        try:
            tiers[tier] = type(t).model_validate({**t.model_dump(), field: v})
        except Exception as e:  # noqa: BLE001 - pydantic names the bound
            raise UserInputError("--robust", option_value or f"{path}={v:g}",
                                 f"values {tier}.{field} accepts: {rule_of(e)}") from None
    return scenario.model_copy(update={"cluster": c.model_copy(update=tiers)})


def latin_hypercube(ranges: list[Range], n: int, seed: int) -> list[dict]:
    """n points, one per stratum of every range (in log space where ``Range.log``), seeded."""
    rng = np.random.default_rng(seed)
    cols = []
    for r in ranges:
        u = (rng.permutation(n) + rng.random(n)) / n
        if r.log:
            a, b = math.log(r.low), math.log(r.high)
            cols.append(np.exp(a + u * (b - a)))
        else:
            cols.append(r.low + u * (r.high - r.low))
    return [{r.path: float(c[i]) for r, c in zip(ranges, cols)} for i in range(n)]


def _key(cfg) -> tuple:
    return tuple(cfg.model_dump().values())


def robust_search(scenario, ranges: list[Range], samples: int = 16, objective: str = "mean", seed: int = 0,
                  params=None, top_k: int = 64, space_options: dict | None = None) -> dict:
    """The robust optimum over ``samples`` seeded points of ``ranges`` (module docstring), the
    nominal optimum's objective under the same points, and the certificate's K.
    ``space_options``: SearchSpace's value lists, where not its defaults."""
    from .costmodel import evaluate_batch
    from .space import SearchSpace, batch_from_configs
    from .strategies.exhaustive import exhaustive_search
    if objective not in OBJECTIVES:
        raise UserInputError("--robust-objective", objective, " or ".join(OBJECTIVES))
    if samples < 2:
        raise UserInputError("--robust-samples", samples, "an integer >= 2")
    agg = np.mean if objective == "mean" else np.max
    points = latin_hypercube(ranges, samples, seed)
    scens = [with_values(scenario, p) for p in points]
    opts = space_options or {}
    nominal = exhaustive_search(SearchSpace(scenario, **opts).require_legal(), params)
    if nominal.best_config is None:
        raise UserInputError("--model", scenario.model.name, "a scenario where some legal configuration fits in "
                                                           "memory (none does: more GPUs or a smaller model)")
    k = top_k
    while True:
        tops = [exhaustive_search(SearchSpace(s, **opts).require_legal(), params, top_k=k) for s in scens]
        cands: dict = {_key(nominal.best_config): nominal.best_config}
        for r in tops:
            for cfg, _ in r.top:
                cands.setdefault(_key(cfg), cfg)
        cfgs = list(cands.values())
        batch = batch_from_configs(cfgs)
        times = np.array([evaluate_batch(s, batch, params, check=False)["iteration_time_s"] for s in scens])
        score = agg(times, axis=0)
        best = int(np.argmin(score))
        kth = [r.top[-1][1] if len(r.top) == k else math.inf for r in tops]
        bound = float(agg(np.array(kth)))
        proved = score[best] <= bound
        if proved or k >= MAX_TOP_K:
            break
        k *= 4
    nom = 0                                          # the nominal optimum is the first candidate
    return {"objective": objective, "samples": points, "seed": seed,
            "ranges": [{"path": r.path, "low": r.low, "high": r.high, "log": r.log} for r in ranges],
            "robust_config": cfgs[best].model_dump(), "robust_s": float(score[best]),
            "robust_mean_s": float(times[:, best].mean()), "robust_worst_s": float(times[:, best].max()),
            "nominal_config": nominal.best_config.model_dump(), "nominal_s": float(score[nom]),
            "nominal_mean_s": float(times[:, nom].mean()), "nominal_worst_s": float(times[:, nom].max()),
            "nominal_at_spec_s": nominal.best_iteration_time_s,
            "nominal_regret_s": float(score[nom] - score[best]),
            "nominal_regret_pct": float(100.0 * (score[nom] / score[best] - 1.0)),
            "same_config": best == nom, "exact": bool(proved), "top_k": k, "candidates": len(cfgs),
            "bound_s": bound}

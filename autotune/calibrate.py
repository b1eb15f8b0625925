"""Calibrate the cost model to a cluster from real measurements (``autotune calibrate``).

1. A designed set of configurations: every (placement, DP flavour, PP schedule) group of the
   legal space that the backend's workload can run, one configuration per group (seeded), so the
   set spans DP-out and PP-out, the DP flavours and the PP schedules.
2. Each is measured at every cross-building bandwidth asked for (``--xb-mbit 50,200``: the
   backend shapes the link to it and the scenario's cross-building tier is set to it).
3. The fit: five named parameters, by least squares on log time over the fitting
   configurations (scipy.optimize.least_squares; log-parameters, so every value stays positive):
   compute speed (the hardware's peak FLOP/s), the in-building tier's bandwidth and latency,
   the cross-building tier's latency, and the realised fraction of the shaped cross-building rate.
4. Fit quality on configurations held out of the fit (whole configurations, every bandwidth):
   Spearman rank correlation and median absolute percentage error.
5. The result is a scenario file (model, workload, cluster with the fitted values inline) that
   ``--scenario`` accepts.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np
import yaml

from .costmodel import evaluate
from .errors import UserInputError
from .space import SearchSpace, config_at, take
from .specs import Scenario
from .specs.codes import Placement, Recompute

FITTED = ("peak_flops", "so_bandwidth", "so_latency", "xb_latency", "xb_rate_fraction")


@dataclass
class CalibrationResult:
    params: dict
    fit_rows: list = field(default_factory=list)
    holdout_rows: list = field(default_factory=list)
    failed_rows: list = field(default_factory=list)
    spearman_holdout: float = math.nan
    mape_holdout_pct: float = math.nan
    mape_fit_pct: float = math.nan
    scenario_file: str | None = None

    def to_dict(self) -> dict:
        return {"params": self.params, "spearman_holdout": self.spearman_holdout,
                "mape_holdout_pct": self.mape_holdout_pct, "mape_fit_pct": self.mape_fit_pct,
                "n_fit": len(self.fit_rows), "n_holdout": len(self.holdout_rows),
                "fit_rows": self.fit_rows, "holdout_rows": self.holdout_rows, "failed_rows": self.failed_rows,
                "scenario_file": self.scenario_file}


def design(scenario: Scenario, runnable, n_configs: int = 14, seed: int = 0) -> list:
    """One runnable configuration per (placement, flavour, schedule, micro-batch) group, up to
    n_configs, in a seeded random order (so a small cluster still yields enough distinct runs)."""
    space = SearchSpace(scenario, cp_values=(1,), micro_batches=(1, 2, 4), chunks=(2,), queue_pairs=(1,), overlap=(0, 1))
    core = space.legal_core
    keep = (core["tp"] == 1) & (core["ep"] == 1) & (core["recompute"] == Recompute.NONE) & \
        np.isin(core["placement"], (Placement.DP_OUT, Placement.PP_OUT))
    rows = take(core, keep)
    rng = np.random.default_rng(seed)
    groups: dict = {}
    for i in rng.permutation(len(rows["tp"])):
        cfg = config_at(rows, int(i))
        key = (cfg.placement, cfg.dp_flavour if cfg.dp > 1 else "-", cfg.pp_schedule if cfg.pp > 1 else "-",
               cfg.micro_batch)
        if key in groups or not runnable(cfg):
            continue
        groups[key] = cfg
    chosen = [groups[k] for k in sorted(groups)]
    rng.shuffle(chosen)
    if len(chosen) < 4:
        raise UserInputError("--model/--cluster", scenario.summary(),
                             "a scenario with at least 4 runnable configuration groups to calibrate on")
    return chosen[:n_configs]


def with_params(scenario: Scenario, p: dict, xb_Bps: float) -> Scenario:
    c = scenario.cluster
    peak_field = "peak_flops_fp32" if scenario.precision == "fp32" else "peak_flops_bf16"   # the one in use
    buildings = tuple(b.model_copy(update={"gpu": b.gpu.model_copy(update={peak_field: p["peak_flops"]})})
                      for b in c.buildings)
    so = c.scale_out.model_copy(update={"bandwidth_Bps": p["so_bandwidth"], "latency_s": p["so_latency"]})
    upd = {"buildings": buildings, "scale_out": so}
    if c.cross_building is not None:
        upd["cross_building"] = c.cross_building.model_copy(update={
            "bandwidth_Bps": xb_Bps * p["xb_rate_fraction"], "latency_s": p["xb_latency"], "distance_km": 0.0})
    return scenario.model_copy(update={"cluster": c.model_copy(update=upd)})


def predict(scenario: Scenario, p: dict, rows: list) -> np.ndarray:
    cache = {}
    out = []
    for r in rows:
        s = cache.get(r["xb_Bps"]) or cache.setdefault(r["xb_Bps"], with_params(scenario, p, r["xb_Bps"]))
        out.append(evaluate(s, r["config"], check=False).iteration_time_s)
    return np.array(out)


def spearman(a, b) -> float:
    from scipy.stats import spearmanr
    return float(spearmanr(a, b).statistic)


def start_params(scenario: Scenario) -> dict:
    """The fit's starting point: the scenario's own hardware and network values."""
    c = scenario.cluster
    return {"peak_flops": c.buildings[0].gpu.peak_flops(scenario.precision), "so_bandwidth": c.scale_out.bandwidth_Bps,
            "so_latency": max(c.scale_out.latency_s, 1e-6),
            "xb_latency": max(c.cross_building.latency_s if c.cross_building else 1e-5, 1e-6), "xb_rate_fraction": 0.8}


def fit(scenario: Scenario, rows: list, start: dict, prior_weight: float = 0.0) -> dict:
    """The FITTED parameters that best explain ``rows`` (least squares on log time, log-parameters).
    ``prior_weight`` > 0 adds a ridge towards ``start`` in log space (one residual per parameter:
    weight x log(value / start)), so a handful of runs moves only the parameters they inform
    (``strategies.guided`` refits after every small batch)."""
    from scipy.optimize import least_squares
    names = list(FITTED)
    x0 = np.log([start[n] for n in names])
    lo = x0 - np.log(1e4)
    hi = x0 + np.log(1e4)
    lo[names.index("xb_rate_fraction")], hi[names.index("xb_rate_fraction")] = math.log(0.05), math.log(2.0)
    y = np.log([r["measured_s"] for r in rows])

    def resid(x):
        p = dict(zip(names, np.exp(x)))
        t = predict(scenario, p, rows)
        r = np.log(np.maximum(t, 1e-12)) - y
        return np.concatenate([r, prior_weight * (x - x0)]) if prior_weight > 0 else r
    sol = least_squares(resid, np.clip(x0, lo, hi), bounds=(lo, hi), x_scale="jac", max_nfev=400)
    return dict(zip(names, map(float, np.exp(sol.x))))


def calibrate(scenario: Scenario, backend_factory, xb_mbit: list[float], n_configs: int = 14,
              holdout_fraction: float = 0.33, seed: int = 0, runnable=None, progress=None) -> CalibrationResult:
    """Measure, fit, score. ``backend_factory(rate_mbit)`` returns the backend shaping to that rate."""
    configs = design(scenario, runnable or (lambda c: True), n_configs, seed)
    n_hold = max(1, int(round(len(configs) * holdout_fraction)))
    hold = {id(c) for c in configs[:n_hold]}
    rows = []
    for rate in xb_mbit:
        backend = backend_factory(rate)
        for cfg in configs:
            m = backend.measure(scenario, cfg)
            rows.append({"config": cfg, "xb_Bps": rate * 1e6 / 8, "xb_mbit": rate, "holdout": id(cfg) in hold,
                         "measured_s": m.iteration_time_s if not m.failed else None, "reason": m.reason,
                         "xb_bytes_measured": (m.extra or {}).get("xb_bytes_per_step")})
            if progress:
                progress()
    ok = [r for r in rows if r["measured_s"]]
    fit_rows = [r for r in ok if not r["holdout"]]
    hold_rows = [r for r in ok if r["holdout"]]
    if len(fit_rows) < len(FITTED) or len(hold_rows) < 3:
        failed = "; ".join(sorted({r["reason"][:120] for r in rows if not r["measured_s"]}))
        raise UserInputError("--backend", "measurements", f"enough successful runs to fit and score ({failed})")
    p = fit(scenario, fit_rows, start_params(scenario))
    res = CalibrationResult(params=p, failed_rows=[{"config": r["config"].model_dump(), "xb_mbit": r["xb_mbit"],
                                                    "holdout": r["holdout"], "reason": r["reason"]}
                                                   for r in rows if not r["measured_s"]])
    for group, out in ((fit_rows, res.fit_rows), (hold_rows, res.holdout_rows)):
        pred = predict(scenario, p, group)
        for r, t in zip(group, pred):
            out.append({"config": r["config"].model_dump(), "xb_mbit": r["xb_mbit"], "measured_s": r["measured_s"],
                        "predicted_s": float(t), "ape_pct": 100 * abs(t / r["measured_s"] - 1),
                        "xb_bytes_measured": r["xb_bytes_measured"],
                        "xb_bytes_predicted": evaluate(scenario, r["config"], check=False).traffic["xb_bytes_per_step"]})
    res.spearman_holdout = spearman([r["measured_s"] for r in res.holdout_rows],
                                    [r["predicted_s"] for r in res.holdout_rows])
    res.mape_holdout_pct = statistics.median(r["ape_pct"] for r in res.holdout_rows)
    res.mape_fit_pct = statistics.median(r["ape_pct"] for r in res.fit_rows)
    return res


def write_scenario(scenario: Scenario, p: dict, xb_mbit: float, path: str) -> str:
    """The calibrated scenario as a file ``--scenario`` accepts (cluster values inline)."""
    s = with_params(scenario, p, xb_mbit * 1e6 / 8)
    data = {"model": scenario.model.model_dump(mode="json"), "workload": scenario.workload.model_dump(mode="json"),
            "cluster": s.cluster.model_dump(mode="json")}
    data["cluster"]["source"] = (f"autotune calibrate: fitted {', '.join(f'{k}={v:.4g}' for k, v in p.items())} "
                                 f"(cross-building tier at {xb_mbit:g} Mbit/s shaped)")
    with open(path, "w") as fh:
        yaml.safe_dump(data, fh, sort_keys=False)
    return path

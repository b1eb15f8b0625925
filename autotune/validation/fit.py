"""In-sample scoring, the parameter fit, and leave-one-source-family-out validation."""
from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from ..costmodel.params import CostParams
from ..errors import UserInputError
from .columns import FRAMEWORKS, source_family
from .predict import _summary, resolve_unstated, score
from .rank import rank_correlations
from .rows import RunCase
from .held import HOST_LAYER_START_US, KERNEL_LEVELS, KERNEL_SHAPES, LINK_EFFICIENCIES, STRAGGLER  # noqa: F401
from .runs_file import load_runs, read_runs

def validate(path=None, params: CostParams | None = None) -> dict:
    from ..costmodel.params import default_params
    params = params or default_params()
    runs = load_runs(path)
    rows = score(runs.cases, params)
    s = _summary(r["ape"] for r in rows)
    rank = rank_correlations(runs.cases, {r["row"]: r["predicted"] for r in rows})
    mem = [r["memory_ape"] for r in rows if "memory_ape" in r]
    oom = [r["row"] for r in rows if not r["feasible"]]
    return {"memory": {"n": len(mem), **_summary(mem),
                       "what": "predicted memory per GPU vs the measured peak (rows with peak_memory_gb)",
                       "out_of_memory_rows": oom,
                       "out_of_memory_what": "rows that ran as published but exceed their GPU's HBM in the model "
                                             "(the memory model is conservative there; scored all the same)"},
            "mode": "in_sample", "rows": rows, "skipped": runs.skipped, "n": len(rows),
            "median_ape": s["median_ape"], "p90_ape": s["p90_ape"], "mean_ape": s["mean_ape"],
            "params": params.to_dict(), "ignored_columns": runs.ignored_columns,
            "families": _family_table(runs.cases, rows), "subsets": subset_table(runs.cases, rows),
            "rank_correlation": rank,
            "min_spearman": rank["min_spearman"]}


SUBSETS = {
    "fine-grained MoE (>= 64 experts, expert FFN <= 2,048)":
        lambda c: c.scenario.model.moe_experts >= 64 and 0 < c.scenario.model.moe_ffn_hidden <= 2048,
}
"""Named row subsets whose figures issue 13 sets targets for, reported by both modes."""


def subset_table(cases, rows) -> list[dict]:
    """Each subset's row count and APE summary (``rows``: scored rows, by row number)."""
    by_row = {r["row"]: r for r in rows}
    out = []
    for name, member in SUBSETS.items():
        apes = [by_row[c.row]["ape"] for c in cases if member(c) and c.row in by_row]
        out.append({"subset": name, "rows": len(apes), **_summary(apes)})
    return out


def _family_table(cases, rows, compare_rows=None) -> list[dict]:
    by_row = {r["row"]: r for r in rows}
    cmp_row = {r["row"]: r for r in compare_rows} if compare_rows else None
    fams: dict[str, list[RunCase]] = {}
    for c in cases:
        fams.setdefault(c.family, []).append(c)
    out = []
    for fam, cs in fams.items():
        entry = {"family": fam, "rows": len(cs), **_summary(by_row[c.row]["ape"] for c in cs)}
        if cmp_row is not None:
            entry["in_sample_median_ape"] = _summary(cmp_row[c.row]["ape"] for c in cs)["median_ape"]
        out.append(entry)
    return out


FIT_BOUNDS = {
    "gpu_generation_efficiency_ampere": (0.6, 1.6),
    "gpu_generation_efficiency_blackwell": (0.5, 1.2),
    "framework_efficiency_megatron": (0.3, 1.5),
    "framework_efficiency_deepspeed": (0.3, 1.5),
    "framework_efficiency_pytorch": (0.3, 1.5),
    "framework_efficiency_nanotron": (0.3, 1.5),
    "framework_efficiency_jax": (0.3, 1.5),
    "host_layer_fwd_us": (0.0, 10000.0),
}
"""The fitted parameters and their bounds. A framework class with no rows in a fit has no
gradient there and takes the unseen-framework prior (:func:`with_framework_prior`)."""


def with_framework_prior(params: CostParams, fitted: list[str]) -> CostParams:
    """Framework classes the fit could not see, and ``other`` always, take the geometric mean of
    the fitted non-Megatron classes' factors.

    A framework with no measured run is predicted to run at the typical measured non-Megatron
    framework's speed, not at Megatron's, which is the fastest class measured: that default
    made a held-out nanotron or JAX family 50% too fast. The geometric mean because the factors
    multiply a time (a log-scale average). With no non-Megatron class fitted, every other class
    takes Megatron's fitted factor; with Megatron unfitted, it takes the fastest fitted class's
    (1.0 would be the kernels' own speed, which no training step reaches)."""
    mega = "framework_efficiency_megatron"
    seen = [n for n in fitted if n.startswith("framework_efficiency_") and n != mega]
    if not seen:
        if mega not in fitted:
            return params
        # only Megatron measured: an unmeasured class runs at its speed
        return params.with_values(**{f"framework_efficiency_{c}": params.framework_efficiency_megatron
                                     for c in FRAMEWORKS if c != "megatron"})
    prior = float(np.exp(np.mean([math.log(getattr(params, n)) for n in seen])))
    unseen = [f"framework_efficiency_{c}" for c in FRAMEWORKS if c != "megatron"
              and f"framework_efficiency_{c}" not in seen]
    out = params.with_values(**{n: prior for n in unseen})
    if mega not in fitted:     # Megatron unmeasured: no faster than the fastest measured class
        out = out.with_values(**{mega: max(getattr(params, n) for n in seen)})
    return out


IMBALANCE_BOUNDS = (1.0, 2.0)
"""Range of ``CostParams.dropless_expert_imbalance`` (``fit_imbalance``)."""


def routing_twins(cases) -> list[tuple]:
    """(forced-balance, dropless) pairs: two rows of one family that differ in ``moe_routing``
    alone, the same FLOP convention and the same knobs stated (the Megatron-MoE-ModelZoo lists
    its long-context Qwen3-235B runs and Mixtral-8x22B both ways). A row pairs once."""
    def key(c):
        w = c.scenario.workload.model_copy(update={"moe_routing": "dropless", "moe_capacity_factor": 1.0})
        return (c.family, c.metric, c.flops_convention, c.recompute_stated, c.micro_batch_stated,
                c.scenario.model_copy(update={"workload": w}).key, c.config.model_dump_json())
    balanced: dict = {}
    for c in cases:
        if c.scenario.workload.moe_routing == "balanced":
            balanced.setdefault(key(c), c)
    pairs = []
    for c in cases:
        if c.scenario.workload.moe_routing == "dropless" and key(c) in balanced:
            pairs.append((balanced.pop(key(c)), c))
    return pairs


def fit_imbalance(pairs, params: CostParams) -> float:
    """``dropless_expert_imbalance`` from routing twins alone: the value whose predicted
    dropless-over-balanced ratio best matches each pair's measured one (least squares in log),
    every other parameter held, both rows of a pair at the balanced row's resolved knobs. Within a
    pair every error the two rows share cancels, so the joint fit's level errors move it little
    (fitted jointly, it went to its bound of 1.0 when the long-context rows of both halves were
    too slow). Pairs whose prediction does not depend on it keep ``params``' value."""
    from scipy.optimize import minimize_scalar
    rows = [c for pair in pairs for c in pair]
    configs = {}
    for b, d in pairs:
        configs[b.row] = configs[d.row] = resolve_unstated(b, params)
    measured = [math.log(d.measured / b.measured) for b, d in pairs]

    def loss(v):
        pred = {r["row"]: r["predicted"] for r in score(rows, params.with_values(dropless_expert_imbalance=v), configs)}
        return sum((math.log(pred[d.row] / pred[b.row]) - m) ** 2 for (b, d), m in zip(pairs, measured))
    if abs(loss(IMBALANCE_BOUNDS[0]) - loss(IMBALANCE_BOUNDS[1])) < 1e-12:
        return params.dropless_expert_imbalance
    return float(minimize_scalar(loss, bounds=IMBALANCE_BOUNDS, method="bounded", options={"xatol": 1e-3}).x)


def fit_start() -> CostParams:
    """Where every fit starts: neutral parameters plus the kernel-measured shapes and GEMM level
    and the nccl-tests link efficiencies (all held fixed by the fit)."""
    return CostParams().with_values(**KERNEL_SHAPES, **KERNEL_LEVELS, **LINK_EFFICIENCIES, **STRAGGLER,
                                    host_layer_fwd_us=HOST_LAYER_START_US)


def fit_params(path=None, start: CostParams | None = None, cases=None) -> tuple[CostParams, dict]:
    """Least-squares fit of the named efficiency parameters on every scored row (of ``path``,
    or the given ``cases``).

    Residual per row: log(predicted / measured) (scale-free across metrics), soft-L1 loss so a
    few rows with unstated settings cannot dominate. Returns the parameters and a fit report.
    """
    from scipy.optimize import least_squares
    start = start or fit_start()
    if cases is None:
        cases, _ = read_runs(path)
    present = {c.scenario.workload.framework for c in cases}
    # a framework class with no rows here has no gradient: it keeps its start value
    names = [n for n in FIT_BOUNDS if not n.startswith("framework_efficiency_")
             or n.removeprefix("framework_efficiency_") in present]

    lo = np.array([FIT_BOUNDS[n][0] for n in names])
    hi = np.array([FIT_BOUNDS[n][1] for n in names])
    x = np.clip(np.array([getattr(start, n) for n in names]), lo, hi)
    nfev, configs = 0, None
    twins = routing_twins(cases)         # no twins: the imbalance keeps its start value
    for _round in range(FIT_ROUNDS):
        # the imbalance from the twins under the current levels, then the levels under it: a round
        # ends the fit only where neither the imbalance nor a resolved knob moved
        imbalance = start.dropless_expert_imbalance
        if twins:
            imbalance = fit_imbalance(twins, with_framework_prior(start.with_values(**dict(zip(names, x.tolist()))), names))
        moved = abs(imbalance - start.dropless_expert_imbalance) > 1e-3
        start = start.with_values(dropless_expert_imbalance=imbalance)
        # unstated knobs (recompute, micro-batch) resolved once per round, then held fixed: the
        # residuals stay smooth in the parameters (a knob flipping inside a finite difference
        # would not be), and each evaluation runs one configuration per row, not up to twelve
        params = with_framework_prior(start.with_values(**dict(zip(names, x.tolist()))), names)
        resolved = {c.row: resolve_unstated(c, params) for c in cases}
        if resolved == configs and not moved:
            break
        configs = resolved

        def residuals(xv, configs=configs):
            p = with_framework_prior(start.with_values(**dict(zip(names, xv))), names)
            return np.array([math.log(r["predicted"] / r["measured"]) for r in score(cases, p, configs)])

        res = least_squares(residuals, x, bounds=(lo, hi), loss="soft_l1", f_scale=0.1, diff_step=1e-3,
                            max_nfev=200)
        x, nfev = res.x, nfev + int(res.nfev)
    fitted = with_framework_prior(start.with_values(**dict(zip(names, x.tolist()))), names)
    return fitted, {"n_rows": len(cases), "cost": float(res.cost), "nfev": nfev, "rounds": _round + 1,
                    "success": bool(res.success), "routing_twins": len(twins)}


FIT_ROUNDS = 3
"""Fit rounds at most: resolve the unstated knobs under the current parameters, fit with them
fixed; stop early when a round resolves every row as the previous one did."""


def write_params(params: CostParams, path: str | Path, report: dict) -> None:
    import yaml
    doc = {"params": {k: round(v, 6) for k, v in params.to_dict().items()},
           "fit": report,
           "note": f"Fit by `autotune validate --fit --write` on {report['n_rows']} scored rows of a runs file "
                   "(the shipped published_runs.csv unless --runs names another; never on reserved_runs.csv): "
                   "one set of parameters for all rows, no per-row constants, within validation.fit.FIT_BOUNDS. "
                   "The GEMM and attention shapes and levels are held at the H100 kernel measurements "
                   "(validation.held.KERNEL_SHAPES, KERNEL_LEVELS); the dropless MoE imbalance comes from the runs "
                   "listed both ways, forced-balance and dropless (validation.fit.fit_imbalance); framework classes "
                   "no row measured take the unseen-framework prior (validation.fit.with_framework_prior)."}
    Path(path).write_text(yaml.safe_dump(doc, sort_keys=False))


# ---------------------------------------------------------------------------------- leave one family out

_WORKER_CASES: list = []


def _init_worker(cases) -> None:
    """A fit process receives the cases once: the cost model's per-scenario caches then stay warm
    across the folds it runs (sending the cases with every fold re-warms them each time)."""
    _WORKER_CASES[:] = cases


def _fit_without(args):
    """Fit on every case whose family is not ``held_out`` (None: on all cases)."""
    held_out, start, cases = args
    cases = cases if cases is not None else _WORKER_CASES
    return fit_params(cases=[c for c in cases if held_out is None or c.family.lower() != held_out], start=start)


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def loso(path=None, start: CostParams | None = None, jobs: int = 1, progress: bool = False) -> dict:
    """Leave-one-source-family-out validation.

    For every source family F: fit the FIT_BOUNDS parameters (:func:`fit_params`, the same fit
    as ``--fit``, from the same start) on the rows of all other families, and score F's rows
    with them. Every row is scored exactly once, by the fit that did not see its family. Beside
    it: the in-sample figure (the same fit on all rows, every row scored with it) and the shipped
    calibration's figure. ``jobs`` > 1 runs the fits in that many processes (same numbers).
    """
    from ..costmodel.params import default_params
    t0 = time.perf_counter()
    start = start or fit_start()
    runs = load_runs(path)
    cases = runs.cases
    fams: dict[str, list[RunCase]] = {}
    for c in cases:
        fams.setdefault(c.family.lower(), []).append(c)
    if len(fams) < 2:
        only = next(iter(fams.values()))[0].family
        raise UserInputError("--loso", runs.path, f"runs from at least 2 source families (all scoreable rows are "
                                                  f"from {only!r}: nothing is left to fit on)")
    keys = list(fams)
    # the all-rows fit (the largest) first, so that it never runs alone at the end of a pool
    held = [None] + keys
    jobs = max(1, min(jobs, len(held)))
    if progress:
        print(f"autotune validate --loso: {len(held)} fits ({len(keys)} held-out families + all rows) "
              f"on {jobs} process(es)", file=sys.stderr, flush=True)
    if jobs > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=_init_worker, initargs=(cases,)) as ex:
            fits = list(ex.map(_fit_without, [(k, start, None) for k in held]))
    else:
        fits = []
        for j, k in enumerate(held):
            if progress:
                name = fams[k][0].family if k is not None else "(none: all rows)"
                print(f"  fit {j + 1}/{len(held)}, held out: {name}", file=sys.stderr, flush=True)
            fits.append(_fit_without((k, start, cases)))
    all_params, all_report = fits[0]
    in_rows = score(cases, all_params)
    in_by_row = {r["row"]: r for r in in_rows}
    shipped = default_params()
    shipped_rows = score(cases, shipped)
    shipped_by_row = {r["row"]: r for r in shipped_rows}
    held_rows, families = [], []
    for k, (params, report) in zip(keys, fits[1:]):
        fam_cases = fams[k]
        rows = score(fam_cases, params)
        for r in rows:
            r["held_out_of_fit"] = fam_cases[0].family
            r["in_sample_predicted"] = in_by_row[r["row"]]["predicted"]
            r["in_sample_ape"] = in_by_row[r["row"]]["ape"]
            r["shipped_predicted"] = shipped_by_row[r["row"]]["predicted"]
            r["shipped_ape"] = shipped_by_row[r["row"]]["ape"]
        held_rows += rows
        families.append({"family": fam_cases[0].family, "rows": len(rows), **_summary(r["ape"] for r in rows),
                         "in_sample_median_ape": _summary(r["in_sample_ape"] for r in rows)["median_ape"],
                         "shipped_median_ape": _summary(r["shipped_ape"] for r in rows)["median_ape"],
                         "fit_rows": report["n_rows"], "fit": report, "params": params.to_dict()})
    held_rows.sort(key=lambda r: r["row"])
    overall = _summary(r["ape"] for r in held_rows)
    rank = rank_correlations(cases, {r["row"]: r["predicted"] for r in held_rows},
                             compare={r["row"]: r["predicted"] for r in in_rows})
    return {"mode": "loso", "family_rule": source_family.__doc__.split("\n\n")[1].strip().replace("\n    ", " "),
            "rows": held_rows, "skipped": runs.skipped, "ignored_columns": runs.ignored_columns,
            "n": len(held_rows), "n_families": len(keys),
            "median_ape": overall["median_ape"], "p90_ape": overall["p90_ape"], "mean_ape": overall["mean_ape"],
            "families": families, "subsets": subset_table(cases, held_rows),
            "in_sample": {**_summary(r["ape"] for r in in_rows), "fit": all_report, "params": all_params.to_dict(),
                          "what": "the same fit on all rows, every row scored with it"},
            "shipped": {**_summary(r["ape"] for r in shipped_rows), "params": shipped.to_dict(),
                        "what": "the shipped calibration (autotune/data/calibration.yaml), "
                                "as plain `autotune validate` scores"},
            "rank_correlation": rank, "min_spearman": rank["min_spearman"],
            "jobs": jobs, "seconds": round(time.perf_counter() - t0, 2)}

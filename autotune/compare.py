"""Strategy comparison the way the architecture-search literature learned to do it: equal
budgets, several seeds, best-so-far curves, every strategy judged against the exhaustive optimum
of the same space (docs/search.md)."""
from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from .errors import UserInputError
from .report import best_so_far
from .space import SearchSpace
from .specs import Scenario
from .strategies.exhaustive import exhaustive_search


def exhaustive_optimum(scenario: Scenario, cache_dir: Path | None = None, params=None) -> dict:
    """The exact optimum under ``params`` (default: the shipped calibration), cached per scenario
    and parameter values."""
    tag = "" if params is None else "-" + params.key()
    f = cache_dir / f"optimum-{scenario.key}{tag}.json" if cache_dir else None
    if f is not None and f.is_dir():
        raise UserInputError("--out", str(f), "a folder where the optimum's cache file can be written (that name "
                                              "is a folder)")
    if f is not None and f.exists():
        try:
            cached = json.loads(f.read_text())
            if isinstance(cached, dict) and isinstance(cached.get("optimum_s"), (int, float)) and \
                    isinstance(cached.get("best_config"), dict):
                return cached
        except (OSError, UnicodeDecodeError, ValueError):
            pass
        print(f"note: {f} is not a cache autotune wrote (truncated or edited): computing the optimum again",
              file=sys.stderr)
    res = exhaustive_search(SearchSpace(scenario).require_legal(), params)
    out = {"optimum_s": res.best_iteration_time_s, "legal_count": res.legal_count,
           "best_config": res.best_config.model_dump(), "elapsed_s": res.elapsed_s}
    if f is not None:                      # atomically: a kill mid-write leaves the old file or none
        fd, tmp = tempfile.mkstemp(prefix=f".{f.name}.", dir=f.parent)
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps(out))
            os.replace(tmp, f)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return out


def _trials_to(curve, target):
    for i, v in enumerate(curve):
        if v <= target:
            return i + 1
    return math.inf


def _median_or_none(xs):
    m = float(np.median(xs))
    return None if math.isinf(m) else m


def baselines_of(scenario: Scenario, names=("production", "sota"), params=None) -> dict:
    """Baseline configurations and their cost-model times (under ``params``), computed once per comparison."""
    from .backends import CostModelBackend
    from .baselines import measure_baselines
    backend = CostModelBackend(params)
    return measure_baselines(scenario, SearchSpace(scenario), names, lambda cfg: backend.measure(scenario, cfg))


def run_strategy_curves(scenario: Scenario, strategy: str, budget: int, seeds: int, optimum: float,
                        progress=None, strategy_options=None, infeasible: str = "fail",
                        seed_baselines: bool = False, known_baselines: dict | None = None,
                        **runner_options) -> dict:
    """Each seed is a fresh in-memory study started from the production configuration (and, with
    ``seed_baselines``, the sota configuration too, as ``autotune study`` does by default)."""
    from .study import StudyRunner
    curves, gaps, t1, t5, elapsed = [], [], [], [], []
    for seed in range(seeds):
        runner = StudyRunner(scenario, strategy=strategy, trials=budget, storage="memory",
                             study_name=f"compare-{strategy}-{seed}", seed=seed, track=False,
                             seed_baselines=seed_baselines, strategy_options=strategy_options,
                             infeasible=infeasible, known_baselines=known_baselines, **runner_options)
        r = runner.run()
        vals = runner.last_values
        curve = best_so_far(vals)
        curve += [curve[-1] if curve else math.inf] * (budget - len(curve))
        curves.append(curve)
        best = curve[budget - 1] if curve else math.inf
        gaps.append(100.0 * (best / optimum - 1.0))
        t1.append(_trials_to(curve, optimum * 1.01))
        t5.append(_trials_to(curve, optimum * 1.05))
        elapsed.append(r["elapsed_s"])
        if progress:
            progress(1)
    return {"median_gap_pct": float(np.median(gaps)), "gaps_pct": gaps,
            "median_trials_to_1pct": _median_or_none(t1), "median_trials_to_5pct": _median_or_none(t5),
            "median_elapsed_s": float(np.median(elapsed)), "curves": curves}


def ppo_first_proposal_gap(scenario: Scenario, params, optimum: float, policy=None, rank_draws=None) -> float | None:
    """Gap (%) of the PPO agent's one-shot proposal to the optimum (``ppo.ranked_proposal``, as a
    study's first PPO trial proposes it: ranked by the shipped calibration), or None where it does
    not fit in memory. A study measures production first, so its curve after one trial is
    production's time, not the agent's."""
    from .agents.ppo import DEFAULT_POLICY, load, ranked_proposal
    from .agents.ppo_strategy import PPOStrategy
    from .costmodel import evaluate
    from .envs.design_points import make_point
    draws = PPOStrategy(policy, rank_draws).rank_draws          # the study's own option, checked the same way
    cfg, _ = ranked_proposal(load(policy or DEFAULT_POLICY), make_point(scenario), draws)
    e = evaluate(scenario, cfg, params, check=False)
    return 100.0 * (e.iteration_time_s / optimum - 1.0) if e.feasible else None


def plot_curves(results: dict, optimum: float, path: Path, title: str):
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, r in results.items():
        c = np.array(r["curves"], dtype=float)
        gap = 100.0 * (c / optimum - 1.0)
        gap[~np.isfinite(gap)] = np.nan
        x = np.arange(1, gap.shape[1] + 1)
        med = np.nanmedian(gap, axis=0)
        ax.plot(x, np.maximum(med, 1e-3), label=name)
        if gap.shape[0] > 1:
            lo, hi = np.nanpercentile(gap, 25, axis=0), np.nanpercentile(gap, 75, axis=0)
            ax.fill_between(x, np.maximum(lo, 1e-3), np.maximum(hi, 1e-3), alpha=0.2)
    ax.set_yscale("log")
    ax.axhline(5, ls="--", lw=0.8, color="grey")
    ax.axhline(1, ls=":", lw=0.8, color="grey")
    ax.set_xlabel("trials")
    ax.set_ylabel("gap to exhaustive optimum (%), median and IQR")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def run_compare(scenario: Scenario, strategies, budget: int, seeds: int, out_dir: str | Path,
                tracking_uri: str | None = None, track: bool = True, progress: bool = False,
                strategy_options: dict | None = None, seed_baselines: bool = False,
                params_file: str | None = None) -> dict:
    """``params_file``: a cost-model parameter file; the optimum, the baselines' times and every
    trial use it (else the shipped calibration)."""
    from .strategies.registry import make_strategy
    for s in strategies:
        make_strategy(s) if s != "ppo" else None     # unknown names fail before any work
    SearchSpace(scenario).require_legal()           # before anything is written
    if track:
        from .extras import require
        require("tracking", "--tracking-uri", tracking_uri or "(default)", "--no-tracking")
    params, runner_options = None, {}
    if params_file is not None:
        from .costmodel.params import load_params_file
        params = load_params_file(params_file)
        runner_options["backend_options"] = {"params": params_file}
    from .launch import check_out_dir
    check_out_dir(str(out_dir))
    # one folder (and one MLflow run) per invocation: the scenario's key and the comparison's own
    # options are in the name, so a compare with other overrides or strategies never overwrites another
    stem = (f"compare-{scenario.model.name}-{scenario.cluster.name}-{scenario.key[:8]}-{'+'.join(strategies)}"
            f"-b{budget}-s{seeds}" + ("-warm" if seed_baselines else "") + (f"-p{params.key()}" if params else ""))
    out = Path(out_dir) / stem
    check_out_dir(str(out))
    say = (lambda text: print(f"compare: {text}", file=sys.stderr, flush=True)) if progress else (lambda text: None)
    say("exhaustive optimum of the space (the reference every strategy is judged against) ...")
    opt = exhaustive_optimum(scenario, Path(out_dir), params)
    say("measuring the baselines ...")
    base = baselines_of(scenario, ("production", "sota") if seed_baselines else ("production",), params)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(strategies) * seeds, desc="compare", unit="run")
    # compare judges samplers against the objective's optimum: TPE starts up uniformly unless told
    # otherwise (the model's start-up would start it at or near the optimum it is judged against)
    options = {s: ({"startup": "legal"} if s == "tpe" else {}) | ((strategy_options or {}).get(s) or {})
               for s in strategies}
    results = {s: run_strategy_curves(scenario, s, budget, seeds, opt["optimum_s"],
                                      bar.update if bar else None, options[s] or None,
                                      seed_baselines=seed_baselines, known_baselines=base, **runner_options)
               for s in strategies}
    if bar:
        bar.close()
    if "ppo" in results:     # the agent's own answer, not the study's best after production went first
        ppo_options = (strategy_options or {}).get("ppo") or {}
        results["ppo"]["first_proposal_gap_pct"] = ppo_first_proposal_gap(
            scenario, params, opt["optimum_s"], ppo_options.get("policy"), ppo_options.get("rank_draws"))
    plot = out / f"{stem}.png"
    plot_curves(results, opt["optimum_s"], plot, f"{scenario.model.name} x {scenario.cluster.name}, {seeds} seeds")
    table = out / f"{stem}.md"
    lines = [f"| strategy | median gap at {budget} trials (%) | median trials to 1% | median trials to 5% |",
             "|---|---|---|---|"]
    for name, r in results.items():
        f = (lambda x: "-" if x is None else f"{x:.0f}")
        lines.append(f"| {name} | {r['median_gap_pct']:.2f} | {f(r['median_trials_to_1pct'])} | {f(r['median_trials_to_5pct'])} |")
    if "ppo" in results:
        g = results["ppo"]["first_proposal_gap_pct"]
        lines.append(f"\nppo's own first (one-shot) proposal: gap {g:.2f}%" if g is not None
                     else "\nppo's own first (one-shot) proposal does not fit in memory")
    table.write_text("\n".join(lines) + "\n")
    data = {"scenario": scenario.summary(), "optimum_s": opt["optimum_s"], "legal_count": opt["legal_count"],
            "seed_baselines": seed_baselines,
            "baseline_gaps_pct": {k: 100 * (v["iteration_time_s"] / opt["optimum_s"] - 1) for k, v in base.items()
                                  if v.get("config")},
            "budget": budget, "seeds": seeds, "plot": str(plot), "table": str(table),
            "strategies": {k: {kk: vv for kk, vv in v.items() if kk != "curves"} for k, v in results.items()}}
    from .costmodel import evaluate
    from .launch import write_launch_dir
    from .specs.config import Config
    best = Config(**opt["best_config"])
    data["launch_files"] = write_launch_dir(str(out), scenario, [(best, evaluate(scenario, best, params, check=False))],
                                            "autotune compare (the exhaustive optimum)")
    (out / f"{stem}.json").write_text(json.dumps(data, indent=2))
    if track:
        from .tracking import Tracker
        from .study import default_tracking_uri
        tr = Tracker(tracking_uri or default_tracking_uri(), stem, "memory",
                     tags={"autotune.kind": "compare"})
        metrics = {f"{k}.median_gap_pct": v["median_gap_pct"] for k, v in results.items()}
        tr.log_study(params={"strategies": ",".join(strategies), "budget": budget, "seeds": seeds},
                     metrics=metrics | {"optimum_s": opt["optimum_s"]})
        tr.log_artifact(str(plot))
        tr.log_artifact(str(table))
        tr.flush()
        data["mlflow_run_id"] = tr.parent_id
    return data

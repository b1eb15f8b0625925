"""What a study found, read from its stored trials: the best, the top K, the Pareto front and the
summary ``autotune study --json`` prints (Optuna's ``study/_multi_objective.py`` concern)."""
from __future__ import annotations

import math

import optuna

from ..masking import mask_uri
from ..trials import best_trial, feasible_trials, trial_config
from .measure import failure_kinds


def top(study, k: int = 10) -> list[dict]:
    """The k fastest distinct feasible configurations (first objective), fastest first."""
    seen, out = set(), []
    for t in sorted(feasible_trials(study), key=lambda t: t.values[0]):
        cfg = trial_config(t)
        key = tuple(sorted(cfg.items()))
        if key not in seen:
            seen.add(key)
            out.append({"config": cfg, "iteration_time_s": t.values[0], "trial": t.number})
        if len(out) == k:
            break
    return out


def pareto(study, objectives) -> list[dict]:
    """Non-dominated feasible trials over all objectives (minimised)."""
    ok = feasible_trials(study)
    front = [t for t in ok if not any(all(a <= b for a, b in zip(o.values, t.values)) and o.values != t.values
                                      for o in ok)]
    seen, out = set(), []
    for t in sorted(front, key=lambda t: t.values):
        key = tuple(t.values)
        if key not in seen:
            seen.add(key)
            out.append({"config": trial_config(t), "objectives": dict(zip(objectives, t.values))})
    return out


def summarise(study, base: dict, tracker, run, elapsed_s: float, ran: int) -> dict:
    """The summary of ``autotune study --json``; ``run``: the StudyRunner (names, options);
    ``ran``: trials this run finished."""
    best = best_trial(study)
    states = [t.state for t in study.get_trials(deepcopy=False)]
    prod, sota = base["production"]["iteration_time_s"], base["sota"]["iteration_time_s"]
    bt = best.values[0] if best else math.nan

    def speedup(b):
        return b / bt - 1.0 if best and b and math.isfinite(b) else None
    return {
        "best_config": trial_config(best) if best else None,
        "best_iteration_time_s": bt if best else None,
        "best_breakdown": best.user_attrs.get("breakdown") if best else None,
        "top": top(study),
        "production_iteration_time_s": prod if math.isfinite(prod) else None,
        "sota_iteration_time_s": sota if math.isfinite(sota) else None,
        "speedup_vs_production": speedup(prod), "speedup_vs_sota": speedup(sota),
        "n_trials": sum(s.is_finished() for s in states), "n_trials_this_run": ran,
        "n_failed": sum(s == optuna.trial.TrialState.FAIL for s in states),
        "n_infeasible": sum(1 for t in study.get_trials(deepcopy=False)
                            if t.user_attrs.get("feasible") is False and not t.user_attrs.get("failed")),
        "failures_by_kind": failure_kinds(study.get_trials(deepcopy=False)),
        "mlflow_run_id": tracker.parent_id if tracker else None,
        "tracking_errors": tracker.errors if tracker else [],
        "study_name": run.study_name, "storage": mask_uri(run.storage_url),
        "strategy": run.strategy.name, "elapsed_s": elapsed_s, "objectives": list(run.objectives),
        **({"note": run.note} if run.note else {}),
        **({"pareto_front": pareto(study, run.objectives)} if len(run.objectives) > 1 else {}),
    }

"""Reading a study's stored trials: the one place that knows which user attributes a trial carries.

Written by ``autotune.study`` (each finished trial) and read by the study, the strategies (their
progress is the study's) and the MLflow callback, none of which import each other for it.

A trial carries its decoded configuration in the user attribute ``config``, keyed by the knob names
(``config: {tp: 4, pp: 16, dp: 512, placement: dp_out, ...}``), so Optuna's own views
(``optuna best-trial``, optuna-dashboard) show the configuration beside the sampler's encoded
indices (its params). One attribute, not one per knob: each attribute is its own storage write
(~1.8 ms on SQLite), and 21 more writes per trial doubled a 1,000-trial study's time.
"""
from __future__ import annotations

import optuna

from .specs import Config

INTERRUPTED = "interrupted"
"""Reason prefix of a trial whose process died mid-trial: failed, and never counted as done."""
SOURCE = "source"
"""User attribute naming who proposed a trial (a strategy's name, or a baseline's); absent when the
study's Optuna sampler chose it."""

COMPLETE, FAIL, RUNNING = optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL, \
    optuna.trial.TrialState.RUNNING


def config_attrs(config: Config) -> dict:
    """The user attribute that stores a configuration (every knob, ``dp`` included)."""
    return {"config": config.model_dump()}


def trial_config(t) -> dict | None:
    """A stored trial's configuration as a dict of knob values (None before it was decoded)."""
    c = t.user_attrs.get("config")
    return c if isinstance(c, dict) else None


def is_interrupted(t) -> bool:
    """A failed trial its process never finished: failed as orphaned (our reason), or failed
    without a reason by Optuna's heartbeat check (every failure autotune tells carries its reason)."""
    if t.state != FAIL:
        return False
    reason = str(t.user_attrs.get("reason", ""))
    return reason.startswith(INTERRUPTED) or not reason


def proposed_by(study, source: str) -> list:
    """Trials the study holds that ``source`` proposed, interrupted ones left out (they are
    proposed again)."""
    return [t for t in study.get_trials(deepcopy=False, states=(COMPLETE, FAIL, RUNNING))
            if t.user_attrs.get(SOURCE) == source and not is_interrupted(t)]


def feasible_trials(study) -> list:
    """Completed trials whose configuration fits in memory, with their values."""
    return [t for t in study.get_trials(deepcopy=False, states=(COMPLETE,))
            if t.user_attrs.get("feasible") and t.values]


def best_trial(study):
    """The fastest feasible trial (first objective), or None."""
    ok = feasible_trials(study)
    return min(ok, key=lambda t: t.values[0]) if ok else None


def feasible_values(trials) -> list:
    """First-objective value per trial in order, None where it failed or did not fit (convergence)."""
    return [t.values[0] if t.state == COMPLETE and t.user_attrs.get("feasible") else None for t in trials]

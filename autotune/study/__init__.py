"""Tuning studies: durable (Optuna storage is the source of truth), resumable by name, shared by
many workers, every trial tracked in MLflow. One job per module, as Optuna splits its own:

- ``spec``: what defines a study (StudySpec), stored with it and read back by workers and resumes;
- ``options``: a run's options resolved against the stored spec (conflicts refused in one line);
- ``storage``: opening the storage, retrying lost connections, creating a proposed trial;
- ``liveness``: Optuna's heartbeat and owner processes: trials of dead workers failed as interrupted;
- ``measure``: one measurement with a deadline, failures by kind;
- ``tell``: recording a measurement and telling the study;
- ``optimize``: the ask / measure / tell loop and its budget;
- ``summary``: best, top K, Pareto front, the summary;
- ``session`` and ``runner``: one run from start to summary.

MLflow logging is a callback (``autotune.tracking_callback``); strategies read the study
(``autotune.strategies.base``).
"""
from __future__ import annotations

from ..tracking import DEFAULT_TRACKING_URI, default_tracking_uri
from ..trials import INTERRUPTED
from .distributions import distributions_for
from .liveness import fail_orphaned_trials
from .measure import failure_kinds
from .runner import DEFAULT_TRIALS, StudyRunner
from .spec import (INFEASIBLE_MODES, OBJECTIVES, SPEC_ATTR, StudyConflict, StudySpec, check_objectives,
                   stored_scenario)
from .storage import DEFAULT_STORAGE, open_storage
from .tell import TRIAL_FIGURES

__all__ = ["DEFAULT_STORAGE", "DEFAULT_TRACKING_URI", "DEFAULT_TRIALS", "INFEASIBLE_MODES", "INTERRUPTED",
           "OBJECTIVES", "SPEC_ATTR", "StudyConflict", "StudyRunner", "StudySpec", "TRIAL_FIGURES",
           "check_objectives", "default_tracking_uri", "distributions_for", "fail_orphaned_trials",
           "failure_kinds", "load_study_scenario", "open_storage", "run_study"]


def run_study(model=None, cluster=None, scenario=None, strategy: str | None = None, trials: int | None = None,
              storage: str | None = None, study_name: str | None = None, tracking_uri: str | None = None,
              seed: int = 0, backend: str | None = None, **kw) -> dict:
    """Run (or resume) a tuning study; returns the summary dict of ``autotune study --json``. An
    option left out (None) is the stored study's when it resumes one (StudyRunner), else the
    default (strategy tpe, backend costmodel); with neither a scenario nor a model, the stored one."""
    scenario_kw = {k: kw.pop(k) for k in list(kw)
                   if k in ("gpus", "global_batch", "seq_len", "precision", "scenario_file", "overrides")}
    if scenario is None and (model is not None or cluster is not None or any(scenario_kw.values()) or not study_name):
        from ..specs.presets import build_scenario
        scenario = build_scenario(model=model, cluster=cluster, **scenario_kw)
    return StudyRunner(scenario, strategy=strategy, trials=trials, storage=storage, study_name=study_name,
                       tracking_uri=tracking_uri, seed=seed, backend=backend, **kw).run()


def load_study_scenario(storage: str, study_name: str):
    """Scenario and attributes of an existing study (for workers joining it)."""
    from ..errors import UserInputError
    from ..masking import mask_uri
    from ..sqlitecheck import sqlite_path
    from .storage import stored_attrs
    path = sqlite_path(storage)
    if path is not None and not path.exists():       # opening it would create an empty database
        raise UserInputError("--storage", mask_uri(storage), "the URL of a storage holding a study (no such file)")
    attrs = stored_attrs(open_storage(storage), study_name)
    if attrs is None:
        raise UserInputError("--study-name", study_name, "the name of an existing study in that storage")
    return stored_scenario(attrs, study_name), attrs

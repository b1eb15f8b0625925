"""One study run from start to summary: the tracker before anything is written (an unreachable
tracking store leaves no study behind), the study opened, trials of dead workers failed as
interrupted, the baselines, the loop with the MLflow callback, the parent run finished, the summary."""
from __future__ import annotations

import time

from ..errors import ServiceUnavailable
from ..tracking import Tracker, mask_uri
from .liveness import fail_orphaned_trials, owner_may_still_log
from .optimize import Budget, Loop
from .summary import summarise


def run_session(run) -> dict:
    t0 = time.perf_counter()
    tracker = None
    if run.track:
        run._say(f"connecting to MLflow at {mask_uri(run.tracking_uri)}")
        tracker = Tracker(run.tracking_uri, run.study_name, run.storage_url,
                          tags={"autotune.strategy": run.strategy.name, "autotune.scenario_key": run.scenario.key},
                          experiment=run.experiment)
    run._say(f"opening the study in {mask_uri(run.storage_url)}")
    try:
        study = run._open_study()
    except BaseException:
        if tracker is not None:
            tracker.flush("FAILED")
        raise
    # a trial this worker fails as orphaned is this worker's to log: its runner, if it was in fact
    # alive but slow to record its owner, finds it told by another and logs nothing
    orphaned = set(fail_orphaned_trials(study))
    base = run._baselines(study)
    budget = Budget(run.budget.trials, run.budget.until)       # each run counts its own trials
    stored = len(study.get_trials(deepcopy=False))
    if budget.until is not None and stored and budget.spent(Loop(run, study, budget).finished()):
        run.note = f"the study already holds {budget.until} or more finished trials (--until {budget.until}): " \
                   "nothing to run; give --trials N to add N more"
        run._say(run.note)
    run._say(f"starting {run.strategy.name}: {stored} trials stored, "
             + (f"{budget.trials} more wanted" if budget.trials is not None else f"until {budget.until}"))
    run.strategy.bind(run.space, run.encoding, run.seed)
    from ..strategies.optuna_samplers import STARTUP_TRIALS
    if getattr(run.strategy, "startup", None) == "model" and stored < STARTUP_TRIALS:
        run._say(f"TPE's start-up: ranking the model's fastest of {run.space.legal_count():,} configurations "
                 "(the first trial waits for it)")
    callbacks, cb = [], None
    if tracker is not None:
        from ..tracking_callback import MLflowCallback
        cb = MLflowCallback(tracker, run.scenario, base, run.study_name)
        callbacks += [cb, lambda _study, _trial: run.raise_if_tracking_gone(tracker)]
        tracker.log_study(params={"model": run.scenario.model.name, "cluster": run.scenario.cluster.name,
                                  "gpus": run.scenario.n_gpus, "strategy": run.strategy.name, "seed": run.seed,
                                  "backend": run.backend_name, "global_batch_seqs": run.scenario.global_batch_seqs,
                                  "scenario_key": run.scenario.key, "network": " | ".join(run.scenario.network_lines())})
        for t in study.get_trials(deepcopy=False):   # trials finished before a crash but never logged
            if t.number in orphaned or (t.state.is_finished() and not owner_may_still_log(t)):
                cb(study, t)
    bar = None
    if run.progress:
        from tqdm import tqdm
        bar = tqdm(total=budget.trials if budget.trials is not None else budget.until, desc=run.study_name,
                   unit="trial")
    status = "FINISHED"
    try:
        ran = Loop(run, study, budget, run.first_configs(study, base), callbacks, bar)()
        run.raise_if_tracking_gone(tracker)
    except KeyboardInterrupt:
        status = "KILLED"
        raise
    except ServiceUnavailable:
        status = "FAILED"
        raise
    finally:
        if bar is not None:
            bar.close()
        if cb is not None:
            cb.finish(study, status)
    run.raise_if_tracking_gone(tracker)
    from ..trials import feasible_values
    run.last_values = feasible_values(study.get_trials(deepcopy=False))
    return summarise(study, base, tracker, run, time.perf_counter() - t0, ran)


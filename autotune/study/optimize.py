"""The ask / measure / tell loop of one study run (Optuna's ``study/_optimize.py`` concern).

Each turn: a trial a user enqueued with Optuna is popped first; then the baselines a new study
starts from; then the strategy's proposal (``Strategy.propose(study)``): a configuration is created
as a running trial in one write, ``SAMPLER`` asks the study's Optuna sampler, ``EXHAUSTED`` stops.
The trial is measured under a heartbeat, recorded and told, and every callback is called with
(study, frozen_trial). The run stops after ``trials`` finished trials of its own (Optuna's
``n_trials``: they add), or once the study holds ``until`` finished trials, interrupted ones not
counted.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import optuna

from ..strategies.base import EXHAUSTED, SAMPLER
from ..trials import SOURCE, config_attrs, is_interrupted, proposed_by
from .liveness import OWNER, fail_orphaned_trials, heartbeat, wait_out_ownerless_trials
from .measure import measure
from .storage import create_running_trial

DONE_STATES = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED)


@dataclass
class Budget:
    """When a run stops: ``trials`` of its own finished (they add to the study's), or the study
    holding ``until`` finished trials. At least one of the two is set."""
    trials: int | None = None
    until: int | None = None
    ran: int = 0

    def spent(self, finished_in_study: int) -> bool:
        return (self.trials is not None and self.ran >= self.trials) or \
            (self.until is not None and finished_in_study >= self.until)


@dataclass
class Loop:
    """One run's loop over a study. ``run``: the StudyRunner (its strategy, encoding, backend,
    scenario and recorder); ``first``: baseline configurations (name, Config) to measure first."""
    run: object
    study: optuna.Study
    budget: Budget
    first: list = field(default_factory=list)
    callbacks: list = field(default_factory=list)
    bar: object = None

    def finished(self, trials: list | None = None) -> int:
        """Finished trials the study holds, interrupted ones not counted (recounted each turn:
        another worker may fail a dead worker's trial while this one runs). ``trials``: the
        study's trials read this turn, where the caller has them."""
        if trials is None:
            trials = self.run.calls(self.study.get_trials, deepcopy=False)
        n = sum(1 for t in trials if t.state in DONE_STATES)
        if self.budget.until is not None:
            n -= sum(map(is_interrupted, trials))
        return n

    def __call__(self) -> int:
        while True:
            trials = self.run.calls(self.study.get_trials, deepcopy=False)   # one read per turn
            done = self.finished(trials)
            if self.bar is not None:
                self.bar.n = min(self.budget.ran if self.budget.trials is not None else done,
                                 self.bar.total)
                self.bar.refresh()
            if self.budget.spent(done):
                break
            trial, recorded = self._next_trial(any(t.state == optuna.trial.TrialState.WAITING for t in trials))
            if trial is None:
                break
            self._run_trial(trial, recorded)
        # a trial killed before it recorded its owner: wait until it is past its grace period,
        # then fail it (a live worker's trial has its owner by then)
        wait_out_ownerless_trials(self.study)
        for n in fail_orphaned_trials(self.study):
            self._callbacks(self.study.get_trials(deepcopy=False)[n])
        return self.budget.ran

    def _next_trial(self, waiting: bool):
        """``waiting``: the study holds a trial a user enqueued (Optuna's enqueue_trial)."""
        r, calls = self.run, self.run.calls
        if waiting:                                   # enqueued by a user: popped first
            return calls(self.study.ask, r.distributions), False
        while self.first:
            name, cfg = self.first.pop(0)
            if not proposed_by(self.study, name):
                return self._create(r.encoding.encode(cfg), name), True
        proposal = r.strategy.propose(self.study)
        if proposal is EXHAUSTED:
            return None, False
        if proposal is SAMPLER:
            return self._sampled(), False
        return self._create(proposal, r.strategy.name), True

    def _sampled(self):
        """A trial the study's sampler fills: created with its owner in one write (so no other
        worker can take it for a dead one's while the sampler works), then sampled through the
        public suggest API, as ``study.ask(distributions)`` does."""
        r = self.run
        trial = r.calls(create_running_trial, self.study, {}, {}, {"owner": OWNER})
        for name, d in r.distributions.items():
            if isinstance(d, optuna.distributions.CategoricalDistribution):
                r.calls(trial.suggest_categorical, name, d.choices)
            else:
                r.calls(trial.suggest_int, name, d.low, d.high)
        return trial

    def _create(self, params: dict, source: str):
        r = self.run
        cfg = r.encoding.decode(params)
        attrs = {SOURCE: source, "owner": OWNER, **config_attrs(cfg)}
        return r.calls(create_running_trial, self.study, params, r.distributions, attrs)

    def _run_trial(self, trial, recorded: bool) -> None:
        """``recorded``: its owner and configuration were written when it was created."""
        r = self.run
        cfg = r.encoding.decode(trial.params)
        if not recorded:                              # sampled: its configuration recorded now
            r.recorder.start(trial, cfg, None if "owner" in trial.user_attrs else OWNER)
        with heartbeat(self.study, trial._trial_id):
            m = measure(r.backend, r.scenario, cfg, r.trial_timeout_s)
            frozen = r.recorder.tell(self.study, trial, m)
        if frozen is None:
            return                                    # told by another worker, who logs it
        self.budget.ran += 1
        self._callbacks(frozen)

    def _callbacks(self, frozen) -> None:
        for cb in self.callbacks:
            cb(self.study, frozen)

"""Optuna samplers as strategies: the study's sampler proposes; we only choose and configure it."""
from __future__ import annotations

from dataclasses import dataclass

import optuna

from .base import Strategy

CONSTRAINT_KEY = "memory_deficit"
"""Trial constraint (Optuna 5 ``Trial.set_constraint``): memory deficit over HBM capacity; > 0 is
infeasible, and its size tells the sampler how far off it is (docs/search.md: infeasible is information)."""

SUPPORTS_CONSTRAINTS = {"tpe", "gp", "nsga2"}


def make_sampler(name: str, seed: int, n_objectives: int = 1):
    if name == "tpe":
        # multivariate over a flat, always-sampled space (docs/search.md); startup trials sized to it
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=STARTUP_TRIALS,
                                          n_ei_candidates=48)
    if name == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, with_margin=True, n_startup_trials=10)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=10, deterministic_objective=True)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=40)
    return optuna.samplers.RandomSampler(seed=seed)


STARTUP_TRIALS = 20


@dataclass
class OptunaStrategy(Strategy):
    """The study's Optuna sampler proposes. For TPE the start-up trials are drawn uniformly from
    the legal space (index vectors drawn uniformly are not uniform over legal configurations
    once decoded), then TPE models them.

    The start-up phase is the study's, not this process's: its length is the number of start-up
    trials the study holds (trials this strategy enqueued, ``source`` = its name, in any state but
    interrupted), so a resumed study or a worker continues it where it is, as one process would,
    and several workers share one start-up (two may both draw the last ones). The study is read
    once per proposal while the start-up lasts (at most STARTUP_TRIALS times per process, on a
    study that small), then never again."""
    name: str = "tpe"
    legal_startup: bool = True

    def __post_init__(self):
        self.sampler_name = self.name

    def bind(self, space, encoding, seed):
        super().bind(space, encoding, seed)
        import numpy as np
        self._rng = np.random.default_rng(seed)
        self._proposed = 0             # used only without a study
        self._startup_over = False

    def startup_trials_done(self) -> int:
        """Start-up trials the study holds (this process's proposals when there is no study)."""
        if self.study is None:
            return self._proposed
        from ..study import INTERRUPTED
        n = 0
        for t in self.study.get_trials(deepcopy=False):
            if t.user_attrs.get("source") == self.name and \
                    not str(t.user_attrs.get("reason", "")).startswith(INTERRUPTED):
                n += 1
        return n

    def propose(self):
        if self.name != "tpe" or not self.legal_startup or self._startup_over:
            return None
        if self.startup_trials_done() >= STARTUP_TRIALS:
            self._startup_over = True    # the study has its start-up: no need to look again
            return None
        from ..space import config_at
        self._proposed += 1
        b = self.space.sample(1, seed=int(self._rng.integers(0, 2**63 - 1)))
        return self.encoding.encode(config_at(b, 0))

"""Optuna samplers as strategies: the study's sampler proposes; we only choose and configure it."""
from __future__ import annotations

import optuna

from ..space import config_at
from ..trials import proposed_by
from .base import SAMPLER, Strategy

CONSTRAINT_KEY = "memory_deficit"
"""Trial constraint (Optuna 5 ``Trial.set_constraint``): memory deficit over HBM capacity; > 0 is
infeasible, and its size tells the sampler how far off it is (docs/search.md: infeasible is information)."""

SUPPORTS_CONSTRAINTS = {"tpe", "gp", "nsga2"}
STARTUP_TRIALS = 20


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


class OptunaStrategy(Strategy):
    """The study's Optuna sampler proposes. For TPE the start-up trials are drawn uniformly from
    the legal space (index vectors drawn uniformly are not uniform over legal configurations
    once decoded), then TPE models them.

    The start-up phase is the study's: its length is the number of start-up trials the study holds
    (trials this strategy proposed, interrupted ones left out), so a resumed study or a worker
    continues it where it is, as one process would, and several workers share one start-up (two
    may both draw the last ones)."""

    def __init__(self, name: str = "tpe", legal_startup: bool = True):
        self.name = self.sampler_name = name
        self.legal_startup = bool(legal_startup)

    def bind(self, space, encoding, seed):
        super().bind(space, encoding, seed)
        self._startup_over = self.name != "tpe" or not self.legal_startup

    def propose(self, study):
        # once the study holds its start-up it always will: that fact is cached, never counted again
        if self._startup_over or len(proposed_by(study, self.name)) >= STARTUP_TRIALS:
            self._startup_over = True
            return SAMPLER
        b = self.space.sample(1, seed=int(self.rng(study).integers(0, 2**63 - 1)))
        return self.encoding.encode(config_at(b, 0))

"""The Optuna samplers a study runs with, configured for the flat encoding (docs/search.md)."""
from __future__ import annotations

import optuna

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

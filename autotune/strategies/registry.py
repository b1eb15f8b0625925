"""Strategy names -> strategies."""
from __future__ import annotations

from ..errors import UserInputError
from .optuna_samplers import OptunaStrategy
from .simple import ExhaustiveStrategy, FixedStrategy, RandomStrategy

OPTUNA = ("tpe", "cmaes", "gp", "nsga2")
NAMES = ("random", "exhaustive", "production", "sota", "ppo") + OPTUNA


def make_strategy(name: str, **options):
    from ..extras import require
    if name == "gp":                 # Optuna's GPSampler runs on torch and scipy
        require("gp", "--strategy", name)
    if name == "ppo":
        require("rl", "--strategy", name)
    if name in OPTUNA:
        return OptunaStrategy(name=name, **options)
    if name == "random":
        return RandomStrategy()
    if name == "exhaustive":
        return ExhaustiveStrategy()
    if name in ("production", "sota"):
        return FixedStrategy(name)
    if name == "ppo":
        from ..agents.ppo_strategy import PPOStrategy
        return PPOStrategy(**options)
    raise UserInputError("--strategy", name, "one of " + ", ".join(NAMES))

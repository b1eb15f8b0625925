"""Strategy names -> strategies."""
from __future__ import annotations

from ..errors import UserInputError
from .optuna_samplers import OptunaStrategy
from .simple import ExhaustiveStrategy, FixedStrategy, RandomStrategy

OPTUNA = ("tpe", "cmaes", "gp", "nsga2")
NAMES = ("random", "exhaustive", "guided", "production", "sota", "ppo") + OPTUNA


def make_strategy(name: str, **options):
    """The strategy ``name`` with ``options``; an option it does not take is a one-line error
    naming the ones it does."""
    try:
        return _make(name, **options)
    except TypeError as e:
        if "unexpected keyword argument" not in str(e):
            raise
        import inspect
        cls = {"guided": "autotune.strategies.guided.GuidedStrategy",
               "ppo": "autotune.agents.ppo_strategy.PPOStrategy"}.get(name) or \
            ("autotune.strategies.optuna_samplers.OptunaStrategy" if name in OPTUNA else None)
        takes = "none"
        if cls:
            import importlib
            mod, _, attr = cls.rpartition(".")
            takes = ", ".join(p for p in inspect.signature(getattr(importlib.import_module(mod), attr)).parameters
                              if p != "name") or "none"
        raise UserInputError("--strategy-option", ", ".join(sorted(options)), f"options of {name}: {takes}") from None


def _make(name: str, **options):
    from ..extras import require
    if name == "gp":                 # Optuna's GPSampler runs on torch and scipy
        require("gp", "--strategy", name)
    if name == "ppo":
        require("rl", "--strategy", name)
    if name in OPTUNA:
        return OptunaStrategy(name=name, **options)
    if options and name in ("random", "exhaustive", "production", "sota"):
        raise TypeError("unexpected keyword argument")       # they take none: refused as the others' are
    if name == "random":
        return RandomStrategy()
    if name == "exhaustive":
        return ExhaustiveStrategy()
    if name == "guided":
        from .guided import GuidedStrategy
        return GuidedStrategy(**options)
    if name in ("production", "sota"):
        return FixedStrategy(name)
    if name == "ppo":
        from ..agents.ppo_strategy import PPOStrategy
        return PPOStrategy(**options)
    raise UserInputError("--strategy", name, "one of " + ", ".join(NAMES))

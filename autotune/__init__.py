"""autotune: find the fastest scale-across training configuration, and show why."""
from .costmodel import CostParams, Evaluation, evaluate, evaluate_batch
from .space import SearchSpace
from .specs import Config, Scenario, build_scenario

__all__ = ["Config", "CostParams", "Evaluation", "Scenario", "SearchSpace", "build_scenario", "evaluate", "run_study",
           "evaluate_batch"]


def __getattr__(name):
    """Heavy parts (Optuna, MLflow) load on first use: ``autotune.run_study``."""
    if name == "run_study":
        from .study import run_study
        return run_study
    raise AttributeError(name)

"""autotune: find the fastest scale-across training configuration, and show why."""
from .costmodel import CostParams, Evaluation, evaluate, evaluate_batch
from .space import SearchSpace
from .specs import Config, Scenario, build_scenario

__all__ = ["Config", "CostParams", "Evaluation", "Scenario", "SearchSpace", "build_scenario", "evaluate",
           "evaluate_batch"]

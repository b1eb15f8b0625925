"""Search strategies over a SearchSpace, behind one small interface (propose / observe / best)."""
from .base import Observation, Strategy
from .exhaustive import ExhaustiveResult, exhaustive_search
from .registry import NAMES, make_strategy

__all__ = ["ExhaustiveResult", "NAMES", "Observation", "Strategy", "exhaustive_search", "make_strategy"]

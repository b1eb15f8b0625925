"""Search strategies over a SearchSpace."""
from .exhaustive import ExhaustiveResult, exhaustive_search

__all__ = ["ExhaustiveResult", "exhaustive_search"]

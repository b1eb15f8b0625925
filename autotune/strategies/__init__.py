"""Search strategies over a SearchSpace, behind one small interface (``Strategy.propose(study)``)."""
from .base import EXHAUSTED, SAMPLER, Proposal, Strategy
from .exhaustive import ExhaustiveResult, exhaustive_search
from .registry import NAMES, make_strategy

__all__ = ["EXHAUSTED", "ExhaustiveResult", "NAMES", "Proposal", "SAMPLER", "Strategy", "exhaustive_search",
           "make_strategy"]

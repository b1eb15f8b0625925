"""The analytical iteration-time cost model: pure functions over arrays, no I/O."""
from .iteration import BREAKDOWN_KEYS, evaluate, evaluate_batch
from .params import CostParams, default_params
from .result import Evaluation

__all__ = ["BREAKDOWN_KEYS", "CostParams", "Evaluation", "default_params", "evaluate", "evaluate_batch"]

"""Array backends for the cost model's formulas.

The formulas are written once against a tiny namespace (``where``, ``maximum``, ``select``...).
``NUMPY`` runs them over arrays of configurations; ``SCALAR`` runs the very same code on Python
floats for one configuration, where numpy's per-call overhead would dominate (~1 us per ufunc on
a 1-element array vs ~50 ns for a float operation). Tests assert both give the same numbers.
"""
from __future__ import annotations

import math

import numpy as np


class _Numpy:
    where = staticmethod(np.where)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    ceil = staticmethod(np.ceil)
    log2 = staticmethod(np.log2)
    exp2 = staticmethod(np.exp2)
    round = staticmethod(np.round)
    sqrt = staticmethod(np.sqrt)

    @staticmethod
    def select(conds, choices, default=0.0):
        return np.select(conds, choices, default)

    @staticmethod
    def full_like(x, value):
        return np.full_like(x, value, dtype=np.float64)

    @staticmethod
    def asfloat(x):
        return np.asarray(x, dtype=np.float64)

    @staticmethod
    def take_table(table, idx):
        return table[np.asarray(idx, dtype=np.int64)]


class _Scalar:
    @staticmethod
    def where(c, a, b):
        return a if c else b

    maximum = staticmethod(max)
    minimum = staticmethod(min)

    @staticmethod
    def ceil(x):
        return float(math.ceil(x))

    log2 = staticmethod(math.log2)

    @staticmethod
    def exp2(x):
        return 2.0 ** x

    @staticmethod
    def round(x):
        return float(round(x))

    sqrt = staticmethod(math.sqrt)

    @staticmethod
    def select(conds, choices, default=0.0):
        for c, v in zip(conds, choices):
            if c:
                return v
        return default

    @staticmethod
    def full_like(x, value):
        return float(value)

    @staticmethod
    def asfloat(x):
        return float(x)

    @staticmethod
    def take_table(table, idx):
        return float(table[int(idx)])


NUMPY = _Numpy()
SCALAR = _Scalar()

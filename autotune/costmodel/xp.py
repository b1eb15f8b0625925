"""Array backends for the cost model's formulas.

The formulas are written once against a tiny namespace (``where``, ``maximum``, ``select``...).
``NUMPY`` runs them over arrays of configurations; ``SCALAR`` runs the very same code on Python
floats for one configuration, where numpy's per-call overhead would dominate (~1 us per ufunc on
a 1-element array vs ~50 ns for a float operation). Tests assert both give the same numbers.
"""
from __future__ import annotations

import math

import numpy as np


BY_KEY_MAX_TABLE = 1 << 16
"""Largest key range ``by_key`` tabulates directly; beyond it fn runs on every row."""


class _Numpy:
    where = staticmethod(np.where)
    logical_not = staticmethod(np.logical_not)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    ceil = staticmethod(np.ceil)
    floor = staticmethod(np.floor)
    log2 = staticmethod(np.log2)
    exp2 = staticmethod(np.exp2)
    round = staticmethod(np.round)
    sqrt = staticmethod(np.sqrt)

    @staticmethod
    def select(conds, choices, default=0.0):
        """np.select's result by nested np.where: the same values, faster for the handful of
        conditions the cost model uses."""
        out = default
        for c, v in zip(reversed(conds), reversed(choices)):
            out = np.where(c, v, out)
        return out

    @staticmethod
    def full_like(x, value):
        return np.full_like(x, value, dtype=np.float64)

    @staticmethod
    def asfloat(x):
        return np.asarray(x, dtype=np.float64)

    @staticmethod
    def take_table(table, idx):
        if not np.ndim(idx):
            return table[int(idx)]
        return np.take(table, np.asarray(idx).astype(np.intp))     # faster than fancy indexing

    @staticmethod
    def group_rows(cols):
        """The rows grouped by the values of the key columns ``cols`` (whole numbers >= 0), for
        ``by_group``: (key per row, first row of each key, key range or None when sorted), or
        None where a column is not whole (then ``by_group`` runs on every row). Built once and
        shared by every term that depends on the same few knobs."""
        n = max(np.size(c) for c in cols)
        if n == 0:
            return None
        key = np.zeros(n, dtype=np.int64)
        span = 1
        for c in cols:
            c = np.broadcast_to(np.asarray(c), (n,))
            ci = c if c.dtype.kind in "iu" else c.astype(np.int64)
            if (c.dtype.kind == "f" and not np.array_equal(ci, c)) or ci.min() < 0:
                return None
            width = int(ci.max()) + 1
            span *= width
            if span > 1 << 62:
                return None
            key = key * width + ci
        if span > BY_KEY_MAX_TABLE:                           # a sort instead of a table
            _, rows, inv = np.unique(key, return_index=True, return_inverse=True)
            return inv, rows, None
        first = np.full(span, -1, dtype=np.int64)
        first[key] = np.arange(n)                             # some row of each key (the last write wins)
        present = np.flatnonzero(first >= 0)
        return (key, present), first[present], span

    @staticmethod
    def by_group(group, fn, *args):
        """fn(*args) computed once per group of ``group_rows`` and spread back to every row: for
        a term that varies only with a few knobs (the cross-building goodput depends on load
        balancing, queue pairs, loss recovery, channels and buffer, not on the other dozen).
        The key columns must hold every per-row input of fn. Returns what fn returns."""
        if group is None:
            return fn(*args)
        index, rows, span = group
        n = len(index[0]) if span is not None else len(index)
        res = fn(*(a[rows] if np.ndim(a) else a for a in args))

        def spread(r):
            if not np.ndim(r):
                return np.full(n, r, dtype=np.float64)
            if span is None:
                return r[index]
            table = np.zeros(span)
            table[index[1]] = r
            return table[index[0]]
        return tuple(spread(r) for r in res) if isinstance(res, tuple) else spread(res)

    @classmethod
    def by_key(cls, cols, fn, *args):
        """``by_group`` over ``group_rows(cols)``."""
        return cls.by_group(cls.group_rows(cols), fn, *args)

    @staticmethod
    def per_pair(fn, a, b, n_out=2):
        """fn(int a, int b) -> tuple of n_out numbers, once per distinct (a, b) pair of the rows
        (fn is a cached lookup such as a tree's shape); a tuple of per-row arrays."""
        a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
        if a.size == 0:
            return tuple(np.zeros(a.shape) for _ in range(n_out))

        def table(x, y):
            rows = np.array([fn(int(i), int(j)) for i, j in zip(x, y)], dtype=np.float64).reshape(len(x), n_out)
            return tuple(rows[:, j] for j in range(n_out))
        out = _Numpy.by_key((a.ravel(), b.ravel()), table, a.ravel(), b.ravel())
        return tuple(np.reshape(o, a.shape) for o in out)

    @staticmethod
    def on_rows(mask, fn, *args):
        """fn(*args) evaluated only on the rows where ``mask`` holds; a tuple of full-length arrays,
        0 elsewhere. Saves the work of formulas a row does not use (a DDP row needs no
        reduce-scatter). Scalars in ``args`` pass through. Where the rows are one contiguous run
        ``fn`` gets views of the arguments: it must not write into them."""
        mask = np.asarray(mask)
        n = mask.shape[0]
        idx = np.flatnonzero(mask)
        if len(idx) == n:
            return fn(*args)
        some = len(idx) > 0
        if some and idx[-1] - idx[0] + 1 == len(idx):
            idx = slice(int(idx[0]), int(idx[-1]) + 1)    # one run of rows (the batch is sorted): views, no copies
        shape_n = [np.ndim(a) > 0 for a in args]
        res = fn(*(a[idx] if full else a for a, full in zip(args, shape_n))) if some else None
        outs = []
        for j in range(len(res) if res is not None else _n_out(fn)):
            o = np.zeros(n)
            if res is not None:
                o[idx] = res[j]
            outs.append(o)
        return tuple(outs)


def _n_out(fn) -> int:
    return getattr(fn, "n_out", 2)


class _Scalar:
    @staticmethod
    def where(c, a, b):
        return a if c else b

    maximum = staticmethod(max)
    minimum = staticmethod(min)

    @staticmethod
    def logical_not(x):
        return not x

    @staticmethod
    def ceil(x):
        return float(math.ceil(x))

    @staticmethod
    def floor(x):
        return float(math.floor(x))

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

    @staticmethod
    def group_rows(cols):
        return None

    @staticmethod
    def by_group(group, fn, *args):
        return fn(*args)

    @staticmethod
    def by_key(cols, fn, *args):
        return fn(*args)

    @staticmethod
    def per_pair(fn, a, b, n_out=2):
        return tuple(float(v) for v in fn(int(a), int(b)))

    @staticmethod
    def on_rows(mask, fn, *args):
        if mask:
            return fn(*args)
        return (0.0,) * _n_out(fn)


NUMPY = _Numpy()
SCALAR = _Scalar()

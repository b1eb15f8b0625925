"""The array backend's row grouping (xp.group_rows / by_group / per_pair): computing a term once per
distinct key and spreading it back must give exactly what computing it on every row gives."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.costmodel.xp import BY_KEY_MAX_TABLE, NUMPY, SCALAR


def term(a, b, x):
    return a * 3.5 + np.sqrt(b + 1.0) * x, a - b


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), hi_a=st.sampled_from([2, 17, 300, 10**6]), hi_b=st.sampled_from([1, 5, 10**5]),
       seed=st.integers(0, 2**31), frac=st.booleans())
def test_by_group_equals_the_term_on_every_row(n, hi_a, hi_b, seed, frac):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, hi_a, n)
    b = rng.integers(0, hi_b, n).astype(float) + (0.5 if frac else 0.0)   # not whole: every row
    x = 2.0
    got = NUMPY.by_key((a, b), term, a, b, x)
    want = term(a, b, x)
    for g, w in zip(got, want):
        assert np.array_equal(g, w)


def test_large_key_ranges_sort_instead_of_tabulating():
    a = np.array([0, BY_KEY_MAX_TABLE * 4, 0, 7])
    group = NUMPY.group_rows((a,))
    assert group is not None and group[2] is None              # the sorted form
    assert NUMPY.by_group(group, lambda v: v * 2.0, a).tolist() == (a * 2.0).tolist()


def test_per_pair_is_the_lookup_on_every_row():
    def shape(i, j):
        return i + j, i * j
    a, b = np.array([3, 4, 3, 9]), np.array([1, 2, 1, 2])
    lin, lx = NUMPY.per_pair(shape, a, b)
    assert lin.tolist() == [4, 6, 4, 11] and lx.tolist() == [3, 8, 3, 18]
    assert SCALAR.per_pair(shape, 3.0, 2.0) == (5.0, 6.0)
    assert [v.shape for v in NUMPY.per_pair(shape, np.array([], dtype=int), np.array([], dtype=int))] == [(0,), (0,)]

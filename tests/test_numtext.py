"""autotune.numtext: the one rule every reader of user text applies to numbers."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from autotune.numtext import MAX_INT_DIGITS, finite_float_or_none, int_or_none


@given(st.integers(min_value=-(10**MAX_INT_DIGITS) + 1, max_value=10**MAX_INT_DIGITS - 1))
def test_every_integer_of_at_most_30_digits_reads_back(n):
    assert int_or_none(str(n)) == n and int_or_none(f" +{abs(n)} ") == abs(n)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_every_finite_float_reads_back(x):
    assert finite_float_or_none(repr(x)) == x


def test_what_python_would_take_and_a_person_would_not_write_is_refused():
    for text in ("1_000", "\u0668", "\uff11", "0x10", "1" * (MAX_INT_DIGITS + 1), "+-1", "", "1.0", "1e3"):
        assert int_or_none(text) is None, text
    for text in ("nan", "inf", "-Infinity", "1e999", "1_0.5", "\u0668.5", "1.2.3", "1e", ".", "0x1p3"):
        assert finite_float_or_none(text) is None, text
    assert finite_float_or_none(".5") == 0.5 and finite_float_or_none("5.") == 5.0 and finite_float_or_none("2E-3") == 0.002

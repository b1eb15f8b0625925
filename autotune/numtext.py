"""Numbers as a person writes them, one rule for every reader of user text.

Python's ``int()`` and ``float()`` take more than a command line, a ``--config`` string, a ``--set``
value, a strategy option or a runs-file cell should: ``1_000``, other scripts' digits (``٨``),
``nan`` and ``inf``; and ``int()`` raises past 4,300 digits. Each of those readers matches the text
against these patterns before converting it. (``yamlsafe`` keeps its own integer rule: YAML 1.1
reads a leading zero as octal.)"""
from __future__ import annotations

import math
import re

MAX_INT_DIGITS = 30
"""Longest integer accepted: far beyond any field's bound, far below int()'s 4,300-digit limit."""
INT_TEXT = re.compile(r"[+-]?[0-9]+")
"""An integer in the ASCII digits 0-9 with an optional sign (check its length: ``int_or_none``)."""
MAX_SEED = 2**32 - 1
"""Largest random seed (numpy's and Optuna's range, 0 to 2**32 - 1): the CLI's --seed options and
``study.options`` (the library's StudyRunner) check against this one bound."""
FLOAT_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
"""A decimal number in ASCII: digits, at most one point, an optional exponent."""


def int_or_none(text: str) -> int | None:
    """The integer ``text`` spells (ASCII digits, optional sign, at most MAX_INT_DIGITS), else None."""
    text = text.strip()
    if not INT_TEXT.fullmatch(text) or len(text.lstrip("+-")) > MAX_INT_DIGITS:
        return None
    return int(text, 10)


def finite_float_or_none(text: str) -> float | None:
    """The finite number ``text`` spells (``FLOAT_TEXT``), else None (1e999 overflows to inf: None)."""
    text = text.strip()
    if not FLOAT_TEXT.fullmatch(text):
        return None
    v = float(text)
    return v if math.isfinite(v) else None

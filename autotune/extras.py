"""Optional parts of autotune and the extra that installs each (``pip install 'autotune[EXTRA]'``).

The core (cost model, space, search, Optuna studies, plots) needs none of them. A command that
needs one checks for it before any work, and a missing one is a one-line error naming the option
that asked for it and the extra to install, never an ImportError traceback halfway through."""
from __future__ import annotations

import importlib.util

from .errors import UserInputError

EXTRAS = {
    "tracking": ("mlflow",),
    "fit": ("scipy",),
    "rl": ("gymnasium", "stable_baselines3", "sb3_contrib", "torch"),
    "workloads": ("torch",),
    "postgres": ("psycopg",),
    "gp": ("scipy", "torch"),
    "importance": ("sklearn",),
}
"""Extra -> the modules it installs (pyproject.toml's optional-dependencies)."""


def missing(extra: str) -> list[str]:
    """The extra's modules that cannot be imported here (found without importing them)."""
    return [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]


def require(extra: str, option: str, value: object, alternative: str = "") -> None:
    """Raise a one-line UserInputError when the extra ``option``/``value`` needs is not installed."""
    gone = missing(extra)
    if gone:
        raise UserInputError(option, value, f"the '{extra}' extra installed (pip install 'autotune[{extra}]'; "
                             f"missing {', '.join(gone)})" + (f", or {alternative}" if alternative else ""))

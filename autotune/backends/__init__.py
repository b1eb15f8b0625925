"""Measurement backends: one interface served by the cost model, real runs and plugins.

A backend measures one configuration of one scenario and returns a Measurement. Strategies
never know which backend they talk to. Third-party backends register under the Python
entry-point group ``autotune.backends`` (name -> class or factory taking keyword options).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Protocol, runtime_checkable

from ..errors import UserInputError

ENTRY_POINT_GROUP = "autotune.backends"


@dataclass
class Measurement:
    iteration_time_s: float
    feasible: bool = True
    reason: str = ""
    failed: bool = False          # the measurement itself failed (crash, timeout, garbage)
    breakdown: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @classmethod
    def failure(cls, reason: str) -> "Measurement":
        return cls(iteration_time_s=math.nan, feasible=False, reason=reason, failed=True)

    def checked(self) -> "Measurement":
        """A measurement whose time is NaN, infinite or not positive is a failure, with the reason."""
        t = self.iteration_time_s
        if not self.failed and (not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0):
            return Measurement.failure(f"backend returned an invalid iteration time: {t!r}")
        return self


@runtime_checkable
class Backend(Protocol):
    name: str

    def measure(self, scenario, config) -> Measurement: ...


class CostModelBackend:
    """The analytical cost model as a backend."""

    name = "costmodel"

    def __init__(self, params=None):
        """``params``: CostParams, or the path of a parameter file (``--params``, stored with a
        study as the backend option ``params``); None: the shipped calibration."""
        if isinstance(params, str):
            from ..costmodel.params import load_params_file
            params = load_params_file(params)
        self.params = params

    def measure(self, scenario, config) -> Measurement:
        from ..costmodel import evaluate
        from ..costmodel.tiers import flat_figures
        e = evaluate(scenario, config, self.params, check=False)
        return Measurement(iteration_time_s=e.iteration_time_s, feasible=e.feasible, reason=e.reason,
                           breakdown=e.breakdown,
                           extra={"memory_deficit_bytes": e.memory_deficit_bytes, "mfu": e.mfu,
                                  "memory_per_gpu_bytes": e.memory_per_gpu_bytes, **e.traffic, **e.exposure,
                                  **flat_figures(e.tiers)})


def _lazy(module: str, cls: str, name: str, extra: str | None = None):
    """A factory importing ``module`` only when the backend is asked for (torch is heavy); with an
    ``extra``, a missing one is a one-line error naming it first (autotune/extras.py)."""
    def make(**options):
        import importlib
        if extra is not None:
            from ..extras import require
            require(extra, "--backend", name)
        return getattr(importlib.import_module(module, __package__), cls)(**options)
    make.backend_class = lambda: getattr(__import__("importlib").import_module(module, __package__), cls)
    return make


BUILTIN = {"costmodel": CostModelBackend, "command": _lazy(".command", "CommandBackend", "command"),
           "local-torch": _lazy(".local_torch", "LocalTorchBackend", "local-torch", extra="workloads")}


def available_backends() -> dict:
    found = dict(BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep)
    return found


def get_backend(name: str, **options) -> Backend:
    found = available_backends()
    if name not in found:
        raise UserInputError("--backend", name, "one of " + ", ".join(sorted(found)))
    target = found[name]
    if not isinstance(target, type) and hasattr(target, "load"):
        target = target.load()
    try:
        backend = target(**options)
    except TypeError as e:
        import inspect
        try:
            params = inspect.signature(getattr(target, "backend_class", lambda: target)()).parameters.values()
            takes = ", ".join(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)) or "none"
        except (TypeError, ValueError):        # a plugin whose signature cannot be read: its own words
            takes = str(e)
        raise UserInputError("--backend-option", ",".join(options) or "(none)",
                             f"options of backend {name!r}: {takes}") from None
    if not hasattr(backend, "measure"):
        raise UserInputError("--backend", name, "a backend with a measure(scenario, config) method")
    return backend

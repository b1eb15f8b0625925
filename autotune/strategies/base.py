"""The Strategy interface: propose, observe, best (Optuna's Sampler spirit, one small protocol).

A strategy proposes configurations in the flat encoding (``autotune.encoding``), or returns None
to let the Optuna sampler of the study choose. Strategies never know which backend measures.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Observation:
    params: dict
    config: object
    value: float            # iteration time in seconds (nan when the measurement failed)
    feasible: bool


@dataclass
class Strategy:
    name: str = "strategy"
    sampler_name: str = "random"       # the Optuna sampler the study runs with
    max_trials: int | None = None      # a strategy with a fixed number of proposals
    history: list = field(default_factory=list)
    study: object = field(default=None, repr=False, compare=False)
    """The Optuna study proposed for, set by the study runner before ``bind``. As Optuna's samplers
    do, a strategy derives its progress from the study's trials, not from what this process
    proposed: a resumed study, or one of several workers, continues where the study is."""

    def bind(self, space, encoding, seed: int) -> None:
        self.space, self.encoding, self.seed = space, encoding, seed

    def propose(self) -> dict | None:
        return None

    def observe(self, obs: Observation) -> None:
        self.history.append(obs)

    def best(self) -> Observation | None:
        ok = [o for o in self.history if o.feasible and not math.isnan(o.value)]
        return min(ok, key=lambda o: o.value) if ok else None

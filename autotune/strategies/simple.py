"""Random search, the exhaustive referee, and the two baselines as strategies."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..space import config_at
from .base import Strategy


@dataclass
class RandomStrategy(Strategy):
    """Uniform over the legal space (not over the raw product, which is mostly illegal)."""
    name: str = "random"

    def bind(self, space, encoding, seed):
        super().bind(space, encoding, seed)
        self._rng = np.random.default_rng(seed)

    def propose(self):
        b = self.space.sample(1, seed=int(self._rng.integers(0, 2**63 - 1)))
        return self.encoding.encode(config_at(b, 0))


@dataclass
class ExhaustiveStrategy(Strategy):
    """The whole legal space, vectorised through the cost model, best first. With another
    backend, the cost model's ranking orders what gets measured."""
    name: str = "exhaustive"

    def bind(self, space, encoding, seed):
        super().bind(space, encoding, seed)
        self._order = None
        self._next = 0

    def _rank(self, limit=4096):
        from ..costmodel import evaluate_batch
        best_t, best_rows = [], []
        for batch in self.space.enumerate():
            out = evaluate_batch(self.space.scenario, batch, check=False)
            t = np.where(out["feasible"], out["iteration_time_s"], np.inf)
            k = min(limit, len(t))
            idx = np.argpartition(t, k - 1)[:k]
            best_t.append(t[idx])
            best_rows.append([config_at(batch, int(i)) for i in idx])
        t = np.concatenate(best_t)
        rows = [c for r in best_rows for c in r]
        order = np.argsort(t, kind="stable")[:limit]
        return [rows[i] for i in order if np.isfinite(t[i])]

    def propose(self):
        if self._order is None:
            self._order = self._rank()
        if self._next >= len(self._order):
            return None
        cfg = self._order[self._next]
        self._next += 1
        return self.encoding.encode(cfg)


@dataclass
class FixedStrategy(Strategy):
    """Proposes one configuration computed from the scenario (a baseline)."""
    name: str = "production"
    max_trials: int | None = 1

    def bind(self, space, encoding, seed):
        super().bind(space, encoding, seed)
        from ..baselines import production_config, sota_config
        make = production_config if self.name == "production" else sota_config
        self._config = make(space.scenario, space)
        self._done = False

    def propose(self):
        if self._done or self._config is None:
            return None
        self._done = True
        return self.encoding.encode(self._config)

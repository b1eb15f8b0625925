"""Optuna samplers as strategies: the study's sampler proposes; we only choose and configure it."""
from __future__ import annotations

from ..space import config_at
from ..trials import proposed_by
from .base import SAMPLER, Strategy
from .samplers import CONSTRAINT_KEY, STARTUP_TRIALS, SUPPORTS_CONSTRAINTS, make_sampler  # noqa: F401 - public here too

class OptunaStrategy(Strategy):
    """The study's Optuna sampler proposes. For TPE the start-up trials are drawn uniformly from
    the legal space (index vectors drawn uniformly are not uniform over legal configurations
    once decoded), then TPE models them.

    The start-up phase is the study's: its length is the number of start-up trials the study holds
    (trials this strategy proposed, interrupted ones left out), so a resumed study or a worker
    continues it where it is, as one process would, and several workers share one start-up (two
    may both draw the last ones)."""

    def __init__(self, name: str = "tpe", legal_startup: bool = True):
        self.name = self.sampler_name = name
        self.legal_startup = bool(legal_startup)

    def bind(self, space, encoding, seed):
        super().bind(space, encoding, seed)
        self._startup_over = self.name != "tpe" or not self.legal_startup

    def propose(self, study):
        # once the study holds its start-up it always will: that fact is cached, never counted again
        if self._startup_over or len(proposed_by(study, self.name)) >= STARTUP_TRIALS:
            self._startup_over = True
            return SAMPLER
        b = self.space.sample(1, seed=int(self.rng(study).integers(0, 2**63 - 1)))
        return self.encoding.encode(config_at(b, 0))

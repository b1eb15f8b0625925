"""The Strategy interface: a stateless object that reads the study (Optuna's ``BaseSampler`` spirit).

Life cycle, the same in the first process, a resume and every worker of a study:

1. ``make_strategy(name, **options)`` builds it from its options only.
2. ``bind(space, encoding, seed)``, once per process: it may prepare what depends only on these
   (PPO loads its policy, exhaustive ranks the space); never progress.
3. ``propose(study)`` before each trial, given the Optuna study: it returns the encoded
   configuration to measure (a dict in ``autotune.encoding``'s flat encoding), ``SAMPLER`` to let
   the study's Optuna sampler choose, or ``EXHAUSTED`` when it has nothing left to propose. All
   progress is read from the study's trials (which ones it proposed: the ``source`` user attribute;
   how many there are), so a resumed study, or one of several workers, continues where the study
   is, as one process would.
4. ``sampler(seed, n_objectives)``: the Optuna sampler the study runs with.

Strategies never know which backend measures.
"""
from __future__ import annotations

import abc
import enum

import numpy as np


class Proposal(enum.Enum):
    """What ``propose`` returns when it returns no configuration."""
    SAMPLER = "let the study's Optuna sampler choose"
    EXHAUSTED = "nothing left to propose: the study stops"


SAMPLER, EXHAUSTED = Proposal.SAMPLER, Proposal.EXHAUSTED


class Strategy(abc.ABC):
    name: str = "strategy"
    sampler_name: str = "random"
    """The Optuna sampler the study runs with (``SAMPLER`` proposals are its)."""
    seeded_with_baselines: bool = True
    """Whether a new study measures the production and sota configurations first (a search
    strategy's best is then never slower than either); a baseline strategy is itself one."""

    def bind(self, space, encoding, seed: int) -> None:
        self.space, self.encoding, self.seed = space, encoding, int(seed)

    @abc.abstractmethod
    def propose(self, study) -> dict | Proposal:
        """The next encoded configuration, SAMPLER or EXHAUSTED, from the study's trials only."""

    def sampler(self, seed: int, n_objectives: int = 1):
        from .samplers import make_sampler
        return make_sampler(self.sampler_name, seed, n_objectives)

    def rng(self, study) -> np.random.Generator:
        """A generator that depends on the seed and the number of trials the study holds only: a
        resume or a worker draws what one process would have drawn at the same point."""
        return np.random.default_rng([self.seed, study._storage.get_n_trials(study._study_id)])

"""Random search, the exhaustive referee, and the two baselines as strategies."""
from __future__ import annotations


from ..space import config_at
from ..trials import is_interrupted, proposed_by, trial_config
from .base import EXHAUSTED, Strategy


class RandomStrategy(Strategy):
    """Uniform over the legal space (not over the raw product, which is mostly illegal)."""
    name = "random"

    def propose(self, study):
        b = self.space.sample(1, seed=int(self.rng(study).integers(0, 2**63 - 1)))
        return self.encoding.encode(config_at(b, 0))


class ExhaustiveStrategy(Strategy):
    """The whole legal space, vectorised through the cost model, best first: each proposal is the
    best-ranked configuration the study does not hold yet. With another backend, the cost model's
    ranking orders what gets measured."""
    name = "exhaustive"
    RANKED = 4096
    """How many of the best-ranked configurations it proposes at most."""

    def bind(self, space, encoding, seed):
        super().bind(space, encoding, seed)
        self._order = None          # the ranking depends on the space only: computed once per process

    def _rank(self):
        """The RANKED fastest feasible configurations by the cost model, fastest first: the exact
        top K of the branch-and-bound search (``exhaustive_search``)."""
        from .exhaustive import exhaustive_search
        return [c for c, _ in exhaustive_search(self.space, top_k=self.RANKED).top]

    def propose(self, study):
        if self._order is None:
            self._order = self._rank()
        held = set()
        for t in study.get_trials(deepcopy=False):
            if t.params and not is_interrupted(t):
                c = trial_config(t) or self.encoding.decode(t.params).model_dump()
                held.add(tuple(sorted(c.items())))
        for cfg in self._order:
            if tuple(sorted(cfg.model_dump().items())) not in held:
                return self.encoding.encode(cfg)
        return EXHAUSTED


class FixedStrategy(Strategy):
    """Proposes one configuration computed from the scenario (a baseline), once per study."""
    seeded_with_baselines = False

    def __init__(self, name: str = "production"):
        self.name = name

    def bind(self, space, encoding, seed):
        super().bind(space, encoding, seed)
        from ..baselines import production_config, sota_config
        make = production_config if self.name == "production" else sota_config
        self._config = make(space.scenario, space)

    def propose(self, study):
        if self._config is None or proposed_by(study, self.name):
            return EXHAUSTED
        return self.encoding.encode(self._config)

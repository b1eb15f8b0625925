"""The PPO agent as a study strategy: its first proposal is the policy's one-shot answer (the
fastest by the cost model of its deterministic action and ``rank_draws`` draws, ``ppo.ranked_proposal``;
``rank_draws=0``: the raw deterministic action); with a larger budget it keeps sampling from the
policy and the study keeps the best."""
from __future__ import annotations

from autotune.errors import UserInputError
from autotune.strategies.base import Strategy
from autotune.trials import proposed_by

MAX_RANK_DRAWS = 4096


class PPOStrategy(Strategy):
    name = "ppo"

    def __init__(self, policy: str | None = None, rank_draws: int | None = None):
        from .ppo import RANK_DRAWS
        self.policy = policy
        try:                                             # an int, or the text of one (--strategy-option)
            n = RANK_DRAWS if rank_draws is None else int(str(rank_draws).strip())
        except ValueError:
            n = -1
        if isinstance(rank_draws, (bool, float)) or not 0 <= n <= MAX_RANK_DRAWS:
            raise UserInputError("--strategy-option rank_draws", rank_draws, f"an integer from 0 to {MAX_RANK_DRAWS}")
        self.rank_draws = n

    def bind(self, space, encoding, seed):
        super().bind(space, encoding, seed)
        from autotune.envs.design_points import make_point
        from autotune.envs.scale_across import ScaleAcrossEnv

        from .ppo import DEFAULT_POLICY, load, ranked_proposal
        self._model = load(self.policy or DEFAULT_POLICY)
        point = make_point(space.scenario, space)       # the policy decodes over what fits; the study encodes

        class _One:
            points = [point]
        self._env = ScaleAcrossEnv(design_points=_One())
        self._obs, _ = self._env.reset(seed=seed)
        self._masks = self._env.action_masks()
        # the one-shot answer depends on the policy and the scenario only (ranked_proposal's fixed
        # seed): a resumed or parallel worker, any study seed, `propose` and `compare` give the same
        self._first, _ = ranked_proposal(self._model, point, self.rank_draws)

    def propose(self, study):
        """The one-shot answer while the study holds none of this strategy's proposals; then
        samples of the policy, drawn with a torch seed taken from the study (as one process would)."""
        if not proposed_by(study, self.name):
            return self.encoding.encode(self._first)
        import torch
        torch.manual_seed(int(self.rng(study).integers(0, 2**63 - 1)))
        action, _ = self._model.predict(self._obs, action_masks=self._masks, deterministic=False)
        return self.encoding.encode(self._env.decode(action))

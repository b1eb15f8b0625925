"""The PPO agent as a study strategy: its first proposal is the policy's deterministic choice
(zero-shot); with a larger budget it keeps sampling from the policy and the study keeps the best."""
from __future__ import annotations

from autotune.strategies.base import Strategy
from autotune.trials import proposed_by


class PPOStrategy(Strategy):
    name = "ppo"

    def __init__(self, policy: str | None = None):
        self.policy = policy

    def bind(self, space, encoding, seed):
        super().bind(space, encoding, seed)
        from autotune.envs.design_points import make_point
        from autotune.envs.scale_across import ScaleAcrossEnv

        from .ppo import DEFAULT_POLICY, load
        self._model = load(self.policy or DEFAULT_POLICY)
        point = make_point(space.scenario, space)       # the policy decodes over what fits; the study encodes

        class _One:
            points = [point]
        self._env = ScaleAcrossEnv(design_points=_One())
        self._obs, _ = self._env.reset(seed=seed)
        self._masks = self._env.action_masks()

    def propose(self, study):
        """The policy's deterministic choice while the study holds none of its proposals; then
        samples of the policy, drawn with a torch seed taken from the study (as one process would)."""
        deterministic = not proposed_by(study, self.name)
        if not deterministic:
            import torch
            torch.manual_seed(int(self.rng(study).integers(0, 2**63 - 1)))
        action, _ = self._model.predict(self._obs, action_masks=self._masks, deterministic=deterministic)
        return self.encoding.encode(self._env.decode(action))

"""The PPO agent as a study strategy: its first proposal is the policy's deterministic choice
(zero-shot); with a larger budget it keeps sampling from the policy and the study keeps the best."""
from __future__ import annotations

from dataclasses import dataclass

from autotune.strategies.base import Strategy


@dataclass
class PPOStrategy(Strategy):
    name: str = "ppo"
    policy: str | None = None

    def bind(self, space, encoding, seed):
        super().bind(space, encoding, seed)
        import numpy as np

        from autotune.envs.design_points import make_point
        from autotune.envs.scale_across import ScaleAcrossEnv

        from .ppo import DEFAULT_POLICY, load
        self._model = load(self.policy or DEFAULT_POLICY)
        point = make_point(space.scenario, space, encoding)

        class _One:
            points = [point]
        self._env = ScaleAcrossEnv(design_points=_One())
        self._obs, _ = self._env.reset(seed=seed)
        self._masks = self._env.action_masks()
        self._n = 0
        self._rng = np.random.default_rng(seed)

    def propose(self):
        deterministic = self._n == 0
        self._n += 1
        action, _ = self._model.predict(self._obs, action_masks=self._masks, deterministic=deterministic)
        return self.encoding.encode(self._env.decode(action))

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import autotune  # noqa: F401  (registers autotune/ScaleAcross-v0)
from autotune.envs.design_points import DesignPointSet


@pytest.fixture(scope="module")
def points():
    return DesignPointSet(3, "train", seed=0)


def test_checkers_pass(points):
    env = gym.make("autotune/ScaleAcross-v0", design_points=points)
    check_env(env.unwrapped)
    sb3_check_env(env.unwrapped)


def test_reward_is_log_speedup_over_production(points):
    env = gym.make("autotune/ScaleAcross-v0", design_points=points).unwrapped
    obs, info = env.reset(seed=1)
    assert env.observation_space.contains(obs)
    rng = np.random.default_rng(0)
    seen = 0
    for _ in range(40):
        env.reset()
        a = np.array([rng.integers(n) for n in env.action_space.nvec])
        _, r, term, trunc, info = env.step(a)
        assert term and not trunc
        if info["feasible"]:
            assert r == pytest.approx(np.log(info["production_s"] / info["iteration_time_s"]))
            assert set(info["breakdown"]) >= {"compute_s", "dp_comm_s"}
            seen += 1
        else:
            assert r <= -1.0 and info["reason"]
    assert seen > 0


def test_masks_fix_knobs_with_one_legal_value(points):
    env = gym.make("autotune/ScaleAcross-v0", design_points=points).unwrapped
    env.reset(seed=0)
    masks = env.action_masks()
    assert masks.dtype == bool and len(masks) == int(env.action_space.nvec.sum())
    dense = not env.point.scenario.model.is_moe
    ep_start = int(env.action_space.nvec[:2].sum())
    if dense:
        assert masks[ep_start] and not masks[ep_start + 1:ep_start + 9].any()

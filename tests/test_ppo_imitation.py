"""The PPO agent's action space runs over what fits, and imitation of exact optima (issue 16 item 3)."""
import numpy as np
import pytest

from autotune.costmodel import evaluate
from autotune.envs.design_points import DesignPointSet
from autotune.envs.scale_across import ACTION_SIZES, ScaleAcrossEnv


@pytest.fixture(scope="module")
def points():
    return DesignPointSet(2, "unseen", 3)


def test_every_action_fits_and_exact_optima_round_trip(points):
    from autotune.agents.ppo import action_for
    from autotune.strategies.exhaustive import exhaustive_search
    env = ScaleAcrossEnv(design_points=points)
    rng = np.random.default_rng(0)
    for i, p in enumerate(points.points):
        env.reset(options={"index": i})
        for _ in range(60):
            a = np.array([rng.integers(n) for n in ACTION_SIZES.values()])
            assert evaluate(p.scenario, env.decode(a), check=False).feasible
        top = exhaustive_search(p.space, top_k=3, workers=1).top
        for cfg, _ in top:
            a = action_for(env, cfg)
            assert a is None or env.decode(a) == cfg
        assert action_for(env, top[0][0]) is not None


@pytest.mark.slow      # ~15 s; the default run keeps its faster siblings, CI runs this (.ci/run)
def test_imitation_alone_reproduces_the_training_optima(tmp_path):
    from autotune.agents.ppo import load, propose, train
    from autotune.strategies.exhaustive import exhaustive_search
    policy = tmp_path / "bc.zip"
    card = train(total_steps=0, n_points=1, n_generated=1, seed=0, out=policy, imitation_epochs=300,
                 imitation_top_k=1)
    assert card["imitation_nll"] < 0.5
    model = load(policy)
    pts = DesignPointSet(1, "train", 0).points
    for p in pts:
        best = exhaustive_search(p.space, workers=1).best_config
        assert propose(model, p)[0] == best

"""PPO end to end at toy scale: train, save, load, propose zero-shot, run as a study strategy."""
import pytest

from autotune.specs import build_scenario
from autotune.study import StudyRunner


@pytest.mark.slow
def test_ppo_train_save_load_propose_and_study(tmp_path):
    from autotune.agents.ppo import load, point_for, propose, train
    policy = tmp_path / "ppo.zip"
    card = train(total_steps=2048, n_points=2, seed=0, out=policy)
    assert policy.exists() and card["train_s"] > 0
    model = load(policy)
    scen = build_scenario("llama3-70b", "metro-2bldg", overrides=["cluster.cross_building.distance_km=55"])
    cfgs = propose(model, point_for(scen), n=3)
    assert len(cfgs) == 3
    r = StudyRunner(scen, strategy="ppo", trials=6, storage=f"sqlite:///{tmp_path}/s.db", track=False,
                    strategy_options={"policy": str(policy)}).run()
    assert r["n_trials"] == 6 and r["best_iteration_time_s"] <= r["production_iteration_time_s"]

"""``autotune propose`` (the PPO policy's one-shot proposal) and compare's score of it."""
from __future__ import annotations

import json

import pytest

from tests.test_hardening import assert_one_line_error, run

pytest.importorskip("sb3_contrib")
SCEN = ["--model", "llama3-8b", "--cluster", "metro-2bldg", "--gpus", "256", "--global-batch", "128"]


def test_propose_prints_the_one_shot_proposal_and_its_gap():
    code, out, err = run(["propose", *SCEN, "--samples", "4", "--json"])
    assert code == 0, err
    d = json.loads(out)
    assert len(d["proposals"]) == 4 and d["first"] == d["proposals"][0]
    feas = [p for p in d["proposals"] if p["feasible"]]
    assert feas, "the shipped policy proposed nothing that fits"
    for p in feas:   # the exact optimum is never slower than a proposal
        assert p["iteration_time_s"] >= d["optimum_s"] * (1 - 1e-12) and p["gap_pct"] >= -1e-9
    b = d["proposals"][d["best_of_samples"]]
    assert b["iteration_time_s"] == min(p["iteration_time_s"] for p in feas)
    # the one-shot proposal is ranked among the raw action and its draws: never slower than the raw action
    raw = d["policy_action"]
    assert d["first"]["feasible"] and d["ranked_candidates"] >= 1
    if raw["feasible"]:
        assert d["first"]["iteration_time_s"] <= raw["iteration_time_s"] * (1 + 1e-12)
    # deterministic: the same on a second call
    code, out, _ = run(["propose", *SCEN, "--no-gap", "--json"])
    assert code == 0 and json.loads(out)["first"]["config_text"] == d["first"]["config_text"]
    code, out, _ = run(["propose", *SCEN])
    assert code == 0 and "one-shot proposal (" in out and "gap of the one-shot proposal" in out
    assert "the policy's raw action:" in out
    # --rank-draws 0: the one-shot proposal is the raw action itself
    code, out, _ = run(["propose", *SCEN, "--rank-draws", "0", "--json"])
    d0 = json.loads(out)
    assert code == 0 and d0["first"]["config_text"] == d0["policy_action"]["config_text"] == raw["config_text"]


@pytest.mark.slow      # kept out of the 10-minute default run; CI's slow suite runs it (13 s)
def test_ranked_proposal_beats_random_draws_of_the_same_count():
    """The policy's draws carry what it learned: ranked the same way, the same number of uniform
    random actions does worse on these generated unseen points (the experiment's control)."""
    import numpy as np

    from autotune.agents.ppo import DEFAULT_POLICY, load, ranked_proposal
    from autotune.envs.design_points import DesignPointSet
    from experiments.ppo_zero_shot import random_control
    model = load(DEFAULT_POLICY)
    ranked, control = [], []
    for p in DesignPointSet(4, "unseen", 3).points:
        ranked.append(ranked_proposal(model, p, 64)[1]["model_time_s"])      # inf where nothing fits
        control.append(random_control(p, 65, 0)[0])
    assert np.median(np.array(ranked) / np.array(control)) < 1.0


@pytest.mark.parametrize("args, option", [(["--samples", "0"], "--samples"), (["--samples", "9999"], "--samples"),
                                          (["--rank-draws", "-1"], "--rank-draws"),
                                          (["--rank-draws", "5000"], "--rank-draws"),
                                          (["--policy", "no-such-policy.zip"], "--policy")])
def test_propose_bad_input_is_one_line(args, option):
    code, _, err = run(["propose", *SCEN, *args])
    assert_one_line_error(code, err, option)


def test_propose_bad_policy_files_are_one_line(tmp_path):
    bad = tmp_path / "notapolicy.zip"
    bad.write_text("not a zip")
    for path in (bad, tmp_path):
        code, _, err = run(["propose", *SCEN, "--policy", str(path)])
        assert_one_line_error(code, err, "--policy")


def test_propose_where_nothing_fits_says_so():
    code, out, err = run(["propose", "--model", "llama3-405b", "--cluster", "single-building", "--gpus", "8",
                          "--global-batch", "16"])
    assert code in (0, 2) and "Traceback" not in err, err
    if code == 0:
        assert "fits in memory" in out
    else:
        assert_one_line_error(code, err)


def test_compare_scores_ppo_by_its_own_first_proposal():
    from autotune.compare import ppo_first_proposal_gap
    from autotune.costmodel.params import default_params
    from autotune.space import SearchSpace
    from autotune.specs import build_scenario
    from autotune.strategies import exhaustive_search
    scen = build_scenario("llama3-8b", "metro-2bldg", gpus=256, global_batch=128)
    opt = exhaustive_search(SearchSpace(scen), default_params(), top_k=1).top[0][1]
    gap = ppo_first_proposal_gap(scen, default_params(), opt)
    d = json.loads(run(["propose", *SCEN, "--json"])[1])
    assert gap == pytest.approx(d["first"]["gap_pct"], rel=1e-9, abs=1e-9)


def test_policy_draws_respect_masks_at_any_temperature_and_repeat_with_a_seed():
    import numpy as np

    from autotune.agents.ppo import DEFAULT_POLICY, _Single, draw_actions, load, point_for
    from autotune.envs.scale_across import ScaleAcrossEnv
    from autotune.specs import build_scenario
    model = load(DEFAULT_POLICY)
    env = ScaleAcrossEnv(design_points=_Single(point_for(build_scenario("llama3-8b", "metro-2bldg", gpus=256,
                                                                          global_batch=128))))
    obs, _ = env.reset(seed=0)
    masks = env.action_masks()
    per_knob = np.split(masks, np.cumsum(env.action_space.nvec)[:-1])
    assert any(not m.all() for m in per_knob)                 # the scenario masks some knob
    for t in (1.0, 2.0, 100.0, (1.0, 4.0)):
        a = draw_actions(model, obs, masks, 512, t, seed=5)
        assert a.shape == (512, len(per_knob))
        for j, m in enumerate(per_knob):
            assert m[a[:, j]].all(), (t, j)                    # never a masked index
        assert (a == draw_actions(model, obs, masks, 512, t, seed=5)).all()
    for bad in (0.0, -1.0, float("nan"), float("inf"), 1e7, ()):
        with pytest.raises(ValueError, match="temperature"):
            draw_actions(model, obs, masks, 8, bad)


def test_a_studys_first_ppo_trial_is_proposes_one_shot_answer(tmp_path):
    """Whatever the study's seed, its first PPO trial measures the proposal ``propose`` prints."""
    from autotune.study import StudyRunner
    from autotune.specs import build_scenario
    scen = build_scenario("llama3-8b", "metro-2bldg", gpus=256, global_batch=128)
    first = json.loads(run(["propose", *SCEN, "--no-gap", "--json"])[1])["first"]["config"]
    import optuna

    from autotune.trials import SOURCE, trial_config
    for seed in (0, 3):
        url = f"sqlite:///{tmp_path}/s{seed}.db"
        r = StudyRunner(scen, strategy="ppo", trials=3, seed=seed, storage=url, track=False).run()
        trials = optuna.load_study(study_name=r["study_name"], storage=url).get_trials(deepcopy=False)
        ppo = sorted((t for t in trials if t.user_attrs.get(SOURCE) == "ppo"), key=lambda t: t.number)
        assert ppo and trial_config(ppo[0]) == first, (seed, ppo[:1])


@pytest.mark.parametrize("value", ["abc", "-3", "99999", "1.5"])
def test_ppo_rank_draws_option_is_checked(value):
    from autotune.errors import UserInputError
    from autotune.strategies import make_strategy
    with pytest.raises(UserInputError, match="rank_draws"):
        make_strategy("ppo", rank_draws=value)
    with pytest.raises(UserInputError, match="rank_draws"):
        make_strategy("ppo", no_such_option=1)


def test_compare_writes_ppos_first_proposal(tmp_path):
    from autotune.compare import run_compare
    from autotune.specs import build_scenario
    scen = build_scenario("llama3-8b", "metro-2bldg", gpus=256, global_batch=128)
    d = run_compare(scen, ["ppo"], 2, 1, tmp_path, track=False)
    gap = d["strategies"]["ppo"]["first_proposal_gap_pct"]
    first = json.loads(run(["propose", *SCEN, "--json"])[1])["first"]["gap_pct"]
    assert gap == pytest.approx(first, rel=1e-9, abs=1e-9)
    assert "ppo's own first (one-shot) proposal" in open(d["table"]).read()

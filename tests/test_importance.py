"""Issue 14 (conventions): knob importance over the configurations' real values, not the sampler's
encoded indices (``autotune importance``, the study report)."""
from __future__ import annotations

import json

import optuna
import pytest

from autotune.specs.config import FIELDS
from autotune.study.importance import MIN_TRIALS, knob_importances
from tests.test_hardening import assert_one_line_error, run

BASE = {"tp": 8, "cp": 1, "ep": 1, "pp": 4, "dp": 8, "placement": "dp_out", "dp_flavour": "zero1",
        "pp_schedule": "1f1b", "pp_chunks": 1, "micro_batch": 1, "recompute": "none"}


def synthetic(n: int, time_of) -> optuna.Study:
    """A study whose trials carry a decoded configuration (user attribute ``config``) and a
    value that depends on it through ``time_of``; the sampler's params are dummies."""
    import random
    rnd = random.Random(0)
    study = optuna.create_study()
    dummy = {"i": optuna.distributions.IntDistribution(0, 10**6)}
    for i in range(n):
        cfg = dict(BASE, pp=rnd.choice([1, 2, 4, 8, 16]), placement=rnd.choice(["dp_out", "pp_out", "hybrid"]),
                   micro_batch=rnd.choice([1, 2, 4]))
        study.add_trial(optuna.trial.create_trial(params={"i": i}, distributions=dummy, value=time_of(cfg),
                                                  user_attrs={"config": cfg, "feasible": True}))
    return study


def test_the_knob_that_sets_the_time_ranks_first_under_its_real_name():
    study = synthetic(60, lambda c: 10.0 / c["pp"] + (0.5 if c["placement"] == "pp_out" else 0.0) + 0.01 * c["micro_batch"])
    imp = knob_importances(study)
    assert list(imp)[:2] == ["pp", "placement"] and imp["pp"] > 0.6
    assert sum(imp.values()) == pytest.approx(1.0)
    assert "i" not in imp and "tp" not in imp          # the sampler's index and a constant knob are left out


def test_too_few_trials_and_constant_knobs_are_refused():
    with pytest.raises(ValueError, match="at least"):
        knob_importances(synthetic(MIN_TRIALS - 1, lambda c: 1.0))
    study = optuna.create_study()
    d = {"i": optuna.distributions.IntDistribution(0, 100)}
    for i in range(MIN_TRIALS):
        study.add_trial(optuna.trial.create_trial(params={"i": i}, distributions=d, value=float(i),
                                                  user_attrs={"config": BASE, "feasible": True}))
    with pytest.raises(ValueError, match="same value"):
        knob_importances(study)


def random_study(tmp_path, name: str, trials: int) -> str:
    """A cost-model study of ``trials`` random trials (plus its baselines); its storage URL."""
    db = f"sqlite:///{tmp_path / 's.db'}"
    code, _, err = run(["study", "--model", "llama3-8b", "--cluster", "metro-2bldg", "--gpus", "64",
                        "--strategy", "random", "--trials", str(trials), "--storage", db, "--study-name", name,
                        "--no-tracking", "--json"])
    assert code == 0, err
    return db


def test_importance_command_on_a_real_study(tmp_path):
    db = random_study(tmp_path, "imp", 30)
    code, out, err = run(["importance", "--study-name", "imp", "--storage", db, "--json"])
    assert code == 0, err
    imp = json.loads(out)["importance"]
    assert imp and set(imp) <= set(FIELDS) and sum(imp.values()) == pytest.approx(1.0)
    assert list(imp.values()) == sorted(imp.values(), reverse=True)
    code, out, err = run(["importance", "--study-name", "imp", "--storage", db])
    assert code == 0 and "fANOVA over real knob values" in out
    assert_one_line_error(*run(["importance", "--study-name", "nope", "--storage", db])[::2], "--study-name", "nope")


def test_importance_of_a_study_with_too_few_trials_is_one_line(tmp_path):
    db = random_study(tmp_path, "few", 2)
    assert_one_line_error(*run(["importance", "--study-name", "few", "--storage", db])[::2], "--study-name", "at least")

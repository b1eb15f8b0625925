import math
import time

import optuna
import pytest
from mlflow.tracking import MlflowClient

from autotune.backends import CostModelBackend, Measurement
from autotune.errors import UserInputError
from autotune.specs import build_scenario
from autotune.study import StudyRunner, run_study


@pytest.fixture()
def uris(tmp_path):
    return f"sqlite:///{tmp_path}/studies.db", f"sqlite:///{tmp_path}/mlflow.db"


def child_runs(tracking_uri, parent):
    c = MlflowClient(tracking_uri)
    exp = c.get_experiment_by_name("autotune")
    return c.search_runs([exp.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent}'",
                         max_results=10000)


def test_study_contract_tracking_and_baselines(uris):
    storage, tracking = uris
    r = run_study("llama3-70b", "metro-2bldg", strategy="tpe", trials=25, storage=storage, tracking_uri=tracking)
    for k in ("best_config", "best_iteration_time_s", "production_iteration_time_s", "sota_iteration_time_s",
              "speedup_vs_production", "speedup_vs_sota", "n_trials", "mlflow_run_id", "study_name", "storage"):
        assert k in r
    assert r["n_trials"] == 25
    assert r["best_iteration_time_s"] <= r["production_iteration_time_s"]
    assert r["best_iteration_time_s"] <= r["sota_iteration_time_s"]
    assert r["speedup_vs_production"] == pytest.approx(r["production_iteration_time_s"] / r["best_iteration_time_s"] - 1)
    runs = child_runs(tracking, r["mlflow_run_id"])
    assert sorted(int(x.data.tags["autotune.trial"]) for x in runs) == list(range(25))
    parent = MlflowClient(tracking).get_run(r["mlflow_run_id"])
    arts = {a.path for a in MlflowClient(tracking).list_artifacts(r["mlflow_run_id"])}
    assert {"best_config.yaml", "convergence.png", "scenario.yaml"} <= arts
    assert parent.data.params["scenario_key"] and "scale_out:" in parent.data.params["network"]
    assert parent.data.metrics["best_iteration_time_s"] == pytest.approx(r["best_iteration_time_s"])


def test_resume_by_name_adds_trials_or_runs_until_a_total_without_duplicates(uris):
    """Issue 14: --trials adds (Optuna's n_trials), --until N runs to a total, and a study that
    already holds its --until says so instead of silently doing nothing."""
    storage, tracking = uris
    a = run_study("llama3-8b", "campus-5bldg", strategy="random", trials=12, storage=storage, tracking_uri=tracking,
                  study_name="resume-me")
    b = run_study("llama3-8b", "campus-5bldg", strategy="random", trials=5, storage=storage, tracking_uri=tracking,
                  study_name="resume-me")
    assert b["n_trials"] == 17 and b["n_trials_this_run"] == 5 and a["mlflow_run_id"] == b["mlflow_run_id"]
    c = run_study(storage=storage, tracking_uri=tracking, study_name="resume-me", until=20)
    assert c["n_trials"] == 20 and c["n_trials_this_run"] == 3 and "note" not in c
    assert sorted(int(x.data.tags["autotune.trial"]) for x in child_runs(tracking, b["mlflow_run_id"])) == list(range(20))
    d = run_study(storage=storage, tracking_uri=tracking, study_name="resume-me", until=20)
    assert d["n_trials"] == 20 and d["n_trials_this_run"] == 0 and "already holds 20" in d["note"]
    with pytest.raises(UserInputError) as ei:
        run_study("llama3-70b", "campus-5bldg", strategy="random", trials=5, storage=storage, tracking_uri=tracking,
                  study_name="resume-me")
    assert "different scenario" in str(ei.value)


@pytest.mark.parametrize("kwargs, field", [
    ({"strategy": "annealing"}, "--strategy"),
    ({"trials": 0}, "--trials"),
    ({"storage": "postgresql://user:hunter2@127.0.0.1:1/none"}, "--storage"),
    ({"tracking_uri": "http://user:hunter2@127.0.0.1:1"}, "--tracking-uri"),
])
def test_bad_study_input(uris, kwargs, field):
    storage, tracking = uris
    base = dict(strategy="random", trials=3, storage=storage, tracking_uri=tracking)
    with pytest.raises(UserInputError) as ei:
        run_study("llama3-8b", "campus-5bldg", **(base | kwargs))
    assert str(ei.value).startswith(field) and "hunter2" not in str(ei.value)


class Flaky:
    """A backend that raises, returns NaN, a negative or an infinite time, or hangs, in turn."""
    name = "flaky"

    def __init__(self):
        self.n = 0
        self.inner = CostModelBackend()

    def measure(self, scenario, config):
        self.n += 1
        kind = self.n % 6
        if kind == 1:
            raise RuntimeError("rank 3 segfaulted")
        if kind == 2:
            return Measurement(iteration_time_s=math.nan)
        if kind == 3:
            return Measurement(iteration_time_s=-1.0)
        if kind == 4:
            return Measurement(iteration_time_s=math.inf)
        if kind == 5:
            time.sleep(3)
        return self.inner.measure(scenario, config)


def test_faulty_backend_trials_fail_with_reasons_and_the_study_finishes(uris):
    storage, _ = uris
    s = build_scenario("llama3-8b", "campus-5bldg")
    runner = StudyRunner(s, strategy="random", trials=12, storage=storage, backend=Flaky(), trial_timeout_s=1.0,
                         track=False, baselines=())
    r = runner.run()
    assert r["n_trials"] == 12 and r["n_failed"] >= 8
    import optuna
    st = optuna.load_study(study_name=r["study_name"], storage=storage)
    reasons = " | ".join(t.user_attrs.get("reason", "") for t in st.trials)
    for needle in ("segfaulted", "invalid iteration time", "timed out"):
        assert needle in reasons


def test_multi_objective_study_reports_a_pareto_front(uris):
    storage, _ = uris
    r = run_study("llama3-8b", "metro-2bldg", strategy="nsga2", trials=40, storage=storage, track=False,
                  objectives=("iteration_time_s", "xb_bytes_per_step"))
    front = r["pareto_front"]
    assert front and r["objectives"] == ["iteration_time_s", "xb_bytes_per_step"]
    for a in front:      # no point of the front dominates another
        for b in front:
            if a is not b:
                va, vb = list(a["objectives"].values()), list(b["objectives"].values())
                assert not (all(x <= y for x, y in zip(va, vb)) and va != vb)
    assert min(p["objectives"]["iteration_time_s"] for p in front) == pytest.approx(r["best_iteration_time_s"])
    with pytest.raises(UserInputError):
        run_study("llama3-8b", "metro-2bldg", strategy="nsga2", trials=5, storage=storage, track=False,
                  objectives=("xb_bytes_per_step",))


def test_a_trial_killed_before_recording_its_owner_is_failed_when_a_quick_resume_finishes(uris):
    """Regression (seen in the SIGKILL test under load): a process killed between asking a trial
    and recording its owner leaves an ownerless RUNNING trial. A resumed study that reached its
    budget inside the grace period left it RUNNING for ever; now it waits the grace period out and
    fails it as interrupted."""
    import optuna
    storage, _ = uris
    run_study("llama3-8b", "campus-5bldg", strategy="random", trials=3, storage=storage, track=False,
              study_name="quick")
    optuna.load_study(study_name="quick", storage=storage).ask()      # the killed process's trial
    run_study("llama3-8b", "campus-5bldg", strategy="random", until=5, storage=storage, track=False,
              study_name="quick")
    trials = optuna.load_study(study_name="quick", storage=storage).trials
    assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    assert trials[3].state == optuna.trial.TrialState.FAIL and trials[3].user_attrs["reason"].startswith("interrupted")


def test_mlflow_environment_variables_are_honoured(tmp_path, monkeypatch):
    """Issue 14: MLFLOW_TRACKING_URI stands in for --tracking-uri and MLFLOW_EXPERIMENT_NAME names the
    experiment, as in MLflow itself."""
    tracking = f"sqlite:///{tmp_path}/env-mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "scale-across-team")
    r = run_study("llama3-70b", "metro-2bldg", strategy="random", trials=3, storage=f"sqlite:///{tmp_path}/s.db")
    c = MlflowClient(tracking)
    exp = c.get_experiment_by_name("scale-across-team")
    assert exp is not None and c.get_experiment_by_name("autotune") is None
    assert c.get_run(r["mlflow_run_id"]).info.experiment_id == exp.experiment_id


def test_child_runs_carry_throughput_mfu_memory_and_traffic_and_optuna_names_the_objective(uris):
    """Issue 14: child runs lacked tokens/s, MFU, memory and cross-building bytes; Optuna's own
    views called the objective 'Objective 0'."""
    storage, tracking = uris
    r = run_study("llama3-8b", "campus-5bldg", strategy="random", trials=6, storage=storage, tracking_uri=tracking,
                  study_name="figures")
    runs = child_runs(tracking, r["mlflow_run_id"])
    ok = [x for x in runs if x.data.metrics.get("feasible") == 1.0]
    assert ok
    for x in ok:
        m = x.data.metrics
        assert {"tokens_per_s", "mfu", "memory_per_gpu_bytes", "xb_bytes_per_step", "xb_bytes_per_gpu", "nvlink_bytes_per_gpu"} <= set(m)
        assert m["tokens_per_s"] > 0 and 0 < m["mfu"] < 1 and m["memory_per_gpu_bytes"] > 0
        # issue 18: time and bytes per network tier (NVLink is always there: tp or nothing)
        tiers = {k for k in m if k.startswith("tier.")}
        assert tiers and all(k.split(".")[1] in ("nvlink", "scale_out", "cross_building") for k in tiers)
        for t in {k.split(".")[1] for k in tiers}:
            assert m[f"tier.{t}.exposed_s"] + m[f"tier.{t}.hidden_s"] >= m[f"tier.{t}.link_s"] * (1 - 1e-9)
    study = optuna.load_study(study_name="figures", storage=storage)
    assert study.metric_names == ["iteration_time_s"]

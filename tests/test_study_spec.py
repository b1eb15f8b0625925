"""Issue 14: what defines a study is stored with it (a StudySpec) and read back by every worker and
resume; a given option that conflicts with it is refused before anything is written. TPE's start-up
phase is derived from the study's trials, so a resume or a worker continues where the study is."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

import optuna
import pytest

from autotune.cli import main

SCEN = ["--model", "llama3-8b", "--cluster", "metro-2bldg", "--gpus", "8"]
OTHER = ["--model", "llama3-8b", "--cluster", "campus-5bldg", "--gpus", "10"]
OOM = ["--model", "llama3-405b", "--cluster", "metro-2bldg"]      # about 65% of legal configurations do not fit
TWO = "iteration_time_s,xb_bytes_per_step"
JSON_LINE = "echo '{{\"iteration_time_s\": 2.5}}'"
TEMPLATE = f"template=echo {{tp}}; {JSON_LINE}"


def run(argv: list[str]) -> tuple[int, str, str]:
    """The real CLI in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def ok(argv: list[str]) -> dict:
    code, out, err = run(argv)
    assert code == 0, err
    return json.loads(out)


def snapshot(storage: str) -> list:
    """Everything a study holds, for every study in the storage."""
    st = optuna.storages.RDBStorage(storage)
    out = []
    for s in st.get_all_studies():
        out.append((s.study_name, s.user_attrs, s.system_attrs,
                    [(t.number, t.state, t.params, t.values, t.user_attrs, t.system_attrs, t.datetime_complete)
                     for t in st.get_all_trials(s._study_id)]))
    return out


def startup_trials(storage: str, name: str) -> list:
    """Trials TPE's start-up enqueued (drawn uniformly from the legal space)."""
    return [t for t in optuna.load_study(study_name=name, storage=storage).trials
            if t.user_attrs.get("source") == "tpe"]


@pytest.fixture()
def storage(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)          # a default tracking store would land here (mlflow.db)
    return f"sqlite:///{tmp_path}/s.db"


# ---------------------------------------------------------------- 1. workers inherit the study's options
def test_a_worker_joins_a_multi_objective_study(storage):
    ok(["study", *SCEN, "--strategy", "nsga2", "--objectives", TWO, "--trials", "3", "--storage", storage,
        "--study-name", "mo", "--no-tracking", "--json"])
    d = ok(["worker", "--study-name", "mo", "--storage", storage, "--until", "8", "--no-tracking", "--json"])
    assert d["objectives"] == TWO.split(",") and d["strategy"] == "nsga2" and d["n_trials"] >= 8
    assert d["pareto_front"]
    st = optuna.load_study(study_name="mo", storage=storage)
    assert all(len(t.values) == 2 for t in st.trials if t.state == optuna.trial.TrialState.COMPLETE)


def test_a_worker_keeps_out_of_memory_trials_as_constraints(storage):
    """A --infeasible constraint study was run as `fail` by its workers."""
    ok(["study", *OOM, "--strategy", "tpe", "--infeasible", "constraint", "--trials", "2", "--storage", storage,
        "--study-name", "c", "--no-tracking", "--json"])
    ok(["worker", "--study-name", "c", "--storage", storage, "--until", "20", "--no-tracking", "--json"])
    trials = optuna.load_study(study_name="c", storage=storage).trials
    oom = [t for t in trials[2:] if t.user_attrs.get("feasible") is False]
    assert oom, "the worker should have met out-of-memory configurations"
    for t in oom:       # a constraint (the memory deficit), never a failed trial
        assert t.state == optuna.trial.TrialState.COMPLETE, t.user_attrs.get("reason")
        assert t.system_attrs["constraints:memory_deficit"] > 0


def test_a_worker_inherits_backend_options_and_tracking_uri(storage, tmp_path):
    tracking = f"sqlite:///{tmp_path}/tracked.db"
    ok(["study", *SCEN, "--strategy", "random", "--trials", "2", "--backend", "command", "--backend-option", TEMPLATE,
        "--storage", storage, "--study-name", "b", "--tracking-uri", tracking, "--json"])
    d = ok(["worker", "--study-name", "b", "--storage", storage, "--until", "5", "--json"])
    assert d["best_iteration_time_s"] == 2.5 and not d["tracking_errors"]
    assert not (tmp_path / "mlflow.db").exists()      # logged where the study logs, not to the default
    from mlflow.tracking import MlflowClient
    c = MlflowClient(tracking)
    kids = c.search_runs([c.get_experiment_by_name("autotune").experiment_id], max_results=100,
                         filter_string=f"tags.`mlflow.parentRunId` = '{d['mlflow_run_id']}'")
    assert sorted(int(k.data.tags["autotune.trial"]) for k in kids) == list(range(5))


def test_given_options_equal_to_the_stored_ones_are_accepted(storage):
    ok(["study", *SCEN, "--strategy", "tpe", "--objectives", TWO, "--infeasible", "constraint", "--trials", "2",
        "--storage", storage, "--study-name", "same", "--no-tracking", "--json"])
    d = ok(["worker", *SCEN, "--strategy", "tpe", "--objectives", TWO, "--infeasible", "constraint",
            "--backend", "costmodel", "--study-name", "same", "--storage", storage, "--until", "4", "--no-tracking",
            "--json"])
    assert d["n_trials"] == 4


# ---------------------------------------------------------------- 2. a resume inherits them too
def test_a_resume_inherits_what_it_is_not_given(storage):
    ok(["study", *OOM, "--strategy", "tpe", "--objectives", TWO, "--infeasible", "constraint", "--trials", "2",
        "--storage", storage, "--study-name", "r", "--no-tracking", "--json"])
    d = ok(["study", *OOM, "--study-name", "r", "--storage", storage, "--trials", "10", "--no-tracking", "--json"])
    assert d["objectives"] == TWO.split(",") and d["strategy"] == "tpe" and d["n_trials"] == 12
    d = ok(["study", "--study-name", "r", "--storage", storage, "--until", "14", "--no-tracking", "--json"])
    assert d["n_trials"] == 14                        # the scenario too, from the study
    trials = optuna.load_study(study_name="r", storage=storage).trials
    assert [t for t in trials if t.user_attrs.get("feasible") is False]
    assert not [t for t in trials if t.user_attrs.get("feasible") is False and t.state != optuna.trial.TrialState.COMPLETE]


def test_a_resume_of_a_study_that_does_not_exist_still_needs_a_scenario(storage, tmp_path):
    code, out, err = run(["study", "--study-name", "nope", "--storage", storage, "--trials", "2", "--no-tracking"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "model" in err
    assert not (tmp_path / "s.db").exists()


# ---------------------------------------------------------------- 3. conflicts: exit 2, one line, nothing written
CONFLICTS = [
    ("worker", ["--strategy", "random"], "--strategy", "'tpe'", "'random'"),
    ("worker", ["--objectives", "iteration_time_s"], "--objectives", f"'{TWO}'", "'iteration_time_s'"),
    ("worker", ["--infeasible", "fail"], "--infeasible", "'constraint'", "'fail'"),
    ("worker", ["--backend", "command", "--backend-option", TEMPLATE], "--backend", "'costmodel'", "'command'"),
    ("worker", OTHER, "scenario", "llama3-8b x metro-2bldg", "llama3-8b x campus-5bldg"),
    ("study", [*SCEN, "--strategy", "random"], "--strategy", "'tpe'", "'random'"),
    ("study", [*SCEN, "--infeasible", "fail"], "--infeasible", "'constraint'", "'fail'"),
    ("study", [*SCEN, "--objectives", "iteration_time_s,memory_per_gpu_bytes"], "--objectives", f"'{TWO}'",
     "'iteration_time_s,memory_per_gpu_bytes'"),
    ("study", OTHER, "scenario", "llama3-8b x metro-2bldg", "llama3-8b x campus-5bldg"),
]


@pytest.mark.parametrize("command, args, option, stored, given", CONFLICTS,
                         ids=[f"{c[0]}{c[1][0]}{c[1][1]}" for c in CONFLICTS])
def test_a_conflicting_option_is_refused_and_nothing_is_written(storage, tmp_path, command, args, option, stored,
                                                                 given):
    ok(["study", *SCEN, "--strategy", "tpe", "--objectives", TWO, "--infeasible", "constraint", "--trials", "3",
        "--storage", storage, "--study-name", "s", "--no-tracking", "--json"])
    before = snapshot(storage)
    never = tmp_path / "never.db"
    code, out, err = run([command, *args, "--study-name", "s", "--storage", storage, "--trials", "6",
                          "--tracking-uri", f"sqlite:///{never}"])
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autotune: error: ") and "Traceback" not in err, err
    for needle in (option, stored, given):
        assert needle in lines[0], (needle, lines[0])
    assert snapshot(storage) == before
    assert not never.exists()


# ---------------------------------------------------------------- 4. the spec itself
def test_the_spec_is_frozen_compact_and_round_trips(storage):
    import dataclasses

    from autotune.study import SPEC_ATTR, StudySpec
    ok(["study", *SCEN, "--strategy", "tpe", "--objectives", TWO, "--infeasible", "constraint", "--backend", "command",
        "--backend-option", TEMPLATE, "--storage", storage, "--study-name", "spec", "--trials", "1",
        "--tracking-uri", "http://mlflow.example.com:5000", "--no-tracking", "--json"])
    attrs = optuna.load_study(study_name="spec", storage=storage).user_attrs
    spec = StudySpec.from_attr(attrs[SPEC_ATTR])
    assert (spec.strategy, spec.objectives, spec.infeasible, spec.backend) == ("tpe", tuple(TWO.split(",")),
                                                                             "constraint", "command")
    assert dict(spec.backend_options) == {"template": TEMPLATE.partition("=")[2]}
    assert spec.tracking_uri == "http://mlflow.example.com:5000"
    assert spec.scenario_key in attrs["scenario"]
    assert StudySpec.from_attr(spec.to_attr()) == spec
    assert len(json.dumps(attrs[SPEC_ATTR])) < 400            # the scenario by its key, not its JSON
    assert len(json.dumps(attrs)) < 600 and "scenario_json" not in attrs and "baselines" not in attrs    # issue 14
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.strategy = "random"


def test_a_secret_in_the_tracking_uri_is_not_stored(storage):
    from autotune.specs import build_scenario
    from autotune.study import StudyRunner
    StudyRunner(build_scenario("llama3-8b", "metro-2bldg", gpus=8), strategy="random", trials=1, storage=storage,
                study_name="secret", tracking_uri="http://alice:hunter2@127.0.0.1:1/", track=False).run()
    assert "hunter2" not in json.dumps(optuna.load_study(study_name="secret", storage=storage).user_attrs)
    code, out, err = run(["worker", "--study-name", "secret", "--storage", storage, "--until", "2"])
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--tracking-uri" in err and "hunter2" not in err
    assert ok(["worker", "--study-name", "secret", "--storage", storage, "--until", "2", "--no-tracking",
               "--json"])["n_trials"] == 2


# ---------------------------------------------------------------- 5. older studies (no stored spec)
def legacy_study(storage: str, name: str, strategy: str = "random") -> None:
    """A study as autotune wrote it before the spec: its options as separate attributes."""
    from autotune.specs import build_scenario
    scen = build_scenario("llama3-8b", "metro-2bldg", gpus=8)
    st = optuna.create_study(study_name=name, storage=storage, directions=["minimize"])
    for k, v in {"scenario_key": scen.key, "scenario_json": scen.model_dump_json(), "strategy": strategy,
                 "seed": 0, "backend": "costmodel", "objectives": ["iteration_time_s"]}.items():
        st.set_user_attr(k, v)


def test_an_older_study_without_a_spec_still_works(storage):
    from autotune.study import SPEC_ATTR
    legacy_study(storage, "old")
    assert ok(["worker", "--study-name", "old", "--storage", storage, "--until", "3", "--no-tracking",
               "--json"])["strategy"] == "random"
    d = ok(["study", *SCEN, "--strategy", "random", "--study-name", "old", "--storage", storage, "--until", "5",
            "--no-tracking", "--json"])
    assert d["n_trials"] == 5
    assert SPEC_ATTR not in optuna.load_study(study_name="old", storage=storage).user_attrs
    code, out, err = run(["study", *OTHER, "--study-name", "old", "--storage", storage, "--trials", "6",
                          "--no-tracking"])
    assert code == 2 and "different scenario" in err
    code, out, err = run(["worker", "--strategy", "tpe", "--study-name", "old", "--storage", storage, "--until", "6",
                          "--no-tracking"])
    assert code == 2 and "--strategy" in err and "'random'" in err


# ---------------------------------------------------------------- 6. TPE's start-up, derived from the study
def test_a_resumed_tpe_study_does_not_redo_its_startup(storage):
    from autotune.study import run_study
    from autotune.strategies.optuna_samplers import STARTUP_TRIALS
    kw = dict(scenario=None, model="llama3-8b", cluster="metro-2bldg", gpus=8, strategy="tpe", storage=storage,
              study_name="t", track=False)
    run_study(trials=8, **kw)                     # 2 baselines + 6 start-up trials
    assert len(startup_trials(storage, "t")) == 6
    run_study(trials=40, **kw)
    assert len(startup_trials(storage, "t")) == STARTUP_TRIALS
    trials = optuna.load_study(study_name="t", storage=storage).trials
    assert [t.user_attrs.get("source") for t in trials[:2 + STARTUP_TRIALS]] == \
        ["production", "sota"] + ["tpe"] * STARTUP_TRIALS       # as one process would have run it
    assert not [t for t in trials[2 + STARTUP_TRIALS:] if "source" in t.user_attrs]


def test_workers_continue_the_startup_where_the_study_is(storage):
    from autotune.strategies.optuna_samplers import STARTUP_TRIALS
    ok(["study", *SCEN, "--strategy", "tpe", "--trials", "5", "--storage", storage, "--study-name", "w",
        "--no-tracking", "--json"])
    for target in ("12", "30", "34"):
        ok(["worker", "--study-name", "w", "--storage", storage, "--until", target, "--no-tracking", "--json"])
    assert len(startup_trials(storage, "w")) == STARTUP_TRIALS


def test_concurrent_workers_share_one_startup(storage):
    """Three workers at once: about STARTUP_TRIALS start-up trials in all, not three times as many
    (two workers may both draw the last one or two)."""
    from autotune.strategies.optuna_samplers import STARTUP_TRIALS
    ok(["study", *SCEN, "--strategy", "tpe", "--trials", "1", "--storage", storage, "--study-name", "cw",
        "--no-tracking", "--json"])
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    procs = [subprocess.Popen([sys.executable, "-m", "autotune.cli", "worker", "--study-name", "cw", "--storage",
                               storage, "--until", "45", "--no-tracking", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    assert STARTUP_TRIALS <= len(startup_trials(storage, "cw")) <= STARTUP_TRIALS + 2

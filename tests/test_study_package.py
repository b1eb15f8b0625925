"""Issue 14: studies built the way Optuna builds them: stateless strategies that read the study (one
contract test for every strategy), one job per module, no import cycle, Optuna's and SQLite users'
conventions (real knob values in Optuna's views, no global SQLAlchemy listener, no stray lock file,
Optuna's heartbeat across hosts)."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from autotune.study import StudyRunner, run_study
from autotune.trials import SOURCE, trial_config
from tests.tools.imports import cycles, graph

ROOT = Path(__file__).resolve().parents[1]
SCEN = dict(model="llama3-8b", cluster="campus-5bldg", gpus=320)
STRATEGIES = ["random", "tpe", "exhaustive", "production", "sota", "cmaes", "nsga2", "ppo"]


def _configs(storage: str, name: str) -> list:
    study = optuna.load_study(study_name=name, storage=storage)
    return [(t.user_attrs.get(SOURCE), tuple(sorted((trial_config(t) or {}).items()))) for t in study.trials]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_strategy_resumes_and_shares_a_study_as_one_process_would(strategy, tmp_path):
    """The contract of ``Strategy.propose(study)``: a resume and a second worker continue where the
    study is. One process running 8 trials and four processes taking 2 each in turn (fresh runners,
    as new processes have) propose the same configurations in the same order wherever the strategy
    itself proposes; baselines are measured once; a baseline strategy proposes once per study."""
    if strategy == "ppo":
        pytest.importorskip("sb3_contrib")
    storage = f"sqlite:///{tmp_path}/s.db"
    one = run_study(**SCEN, strategy=strategy, trials=8, storage=storage, study_name="one", track=False)
    for i in range(4):
        StudyRunner(None if i else _scenario(), strategy=strategy if i == 0 else None, trials=2, storage=storage,
                    study_name="parts", track=False, join=i > 0).run()
    a, b = _configs(storage, "one"), _configs(storage, "parts")
    assert len(a) == len(b) == one["n_trials"]
    for source in ("production", "sota"):
        assert sum(s == source for s, _ in b) <= 1
    own = [c for s, c in a if s == strategy]
    assert own == [c for s, c in b if s == strategy]          # the strategy's own proposals: identical
    if strategy in ("production", "sota"):
        assert len(a) == 1
    if strategy == "exhaustive":
        assert len(set(own)) == len(own) == 8 - 2             # never one configuration twice
    if strategy in ("random", "tpe", "exhaustive", "ppo"):
        assert own


def _scenario():
    from autotune.specs import build_scenario
    return build_scenario(**SCEN)


def test_no_module_of_the_study_package_over_300_lines_no_class_over_150():
    for p in sorted((ROOT / "autotune" / "study").glob("*.py")):
        text = p.read_text()
        assert len(text.splitlines()) <= 300, p.name
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno - node.lineno + 1 <= 150, (p.name, node.name)


def test_no_import_cycle_in_autotune():
    assert cycles(graph()) == []


def test_tracking_does_not_import_the_study():
    g = graph()
    for m in ("autotune.tracking", "autotune.tracking_store", "autotune.tracking_callback"):
        assert not any(t.startswith("autotune.study") for t in g[m]), m


def test_optuna_best_trial_prints_real_knob_values(tmp_path):
    """Optuna's own CLI shows the configuration (tp, pp, dp, placement by value), not the encoded indices."""
    storage = f"sqlite:///{tmp_path}/s.db"
    run_study(**SCEN, strategy="random", trials=4, storage=storage, study_name="bt", track=False)
    out = subprocess.run([str(Path(sys.executable).with_name("optuna")), "best-trial", "--storage", storage,
                          "--study-name", "bt", "-f", "json"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    best = json.loads(out.stdout)
    ua = best["user_attrs"]["config"]
    assert {"tp", "pp", "dp", "cp", "ep", "placement", "dp_flavour", "pp_schedule"} <= set(ua)
    assert ua["placement"] in ("dp_out", "pp_out", "hybrid", "ep_out", "cp_out")
    assert ua["tp"] * ua["pp"] * ua["dp"] * ua["cp"] == _scenario().n_gpus


def test_a_users_own_sqlite_database_is_left_alone(tmp_path):
    """No listener on SQLAlchemy's global Engine: an unrelated SQLite database in the same process
    keeps its journal mode (it was switched to WAL)."""
    import sqlalchemy
    run_study(**SCEN, strategy="random", trials=2, storage=f"sqlite:///{tmp_path}/s.db", study_name="x", track=False)
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path}/mine.db")
    with engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "delete"
    engine.dispose()
    ours = sqlalchemy.create_engine(f"sqlite:///{tmp_path}/s.db")
    with ours.connect() as c:                    # the study's own file is in WAL (stored in the file)
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    ours.dispose()


def test_no_stray_lock_file_beside_the_databases(tmp_path):
    storage, tracking = f"sqlite:///{tmp_path}/s.db", f"sqlite:///{tmp_path}/mlflow.db"
    r = subprocess.run([sys.executable, "-m", "autotune.cli", "study", "--model", "llama3-8b", "--cluster",
                        "campus-5bldg", "--strategy", "random", "--trials", "3", "--storage", storage,
                        "--tracking-uri", tracking, "--json"], capture_output=True, text=True, cwd=tmp_path,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    # the databases and MLflow's artifact folder: no lock file (the SQLite queue lock is gone, the
    # tracking schema lock lives in the temporary folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db", "mlruns", "s.db"]


def test_a_running_trial_whose_heartbeat_stopped_on_another_host_is_failed_as_interrupted(tmp_path, monkeypatch):
    """Optuna's heartbeat: a worker on another host that died mid-trial (its pid means nothing here)
    is found by its stale heartbeat; the trial is failed, not counted, and the study goes on."""
    from autotune.study import storage as storage_mod
    from autotune.trials import is_interrupted
    monkeypatch.setattr(storage_mod, "HEARTBEAT_GRACE_s", 1)
    storage = f"sqlite:///{tmp_path}/s.db"
    run_study(**SCEN, strategy="random", trials=2, storage=storage, study_name="hb", track=False)
    st = storage_mod.open_storage(storage)
    study = optuna.load_study(study_name="hb", storage=st)
    trial = study.ask()
    study._storage.set_trial_user_attr(trial._trial_id, "owner", "another-host:4242")
    st.record_heartbeat(trial._trial_id)
    import time
    time.sleep(2.5)                # SQLite keeps heartbeats to the second
    r = run_study(storage=storage, study_name="hb", track=False, until=4)
    t = optuna.load_study(study_name="hb", storage=storage).trials[trial.number]
    assert t.state == optuna.trial.TrialState.FAIL and is_interrupted(t)
    assert r["n_trials"] == 5 and r["failures_by_kind"].get("interrupted") == 1


def test_categorical_codes_have_one_typed_home():
    """Issue 14 item 3: the cost model's, the space's and the configuration's codes are the enums of
    specs/codes.py, in the configuration's order, and the legality rules compare with members only."""
    from autotune.costmodel import collectives, dp_step, nccl, network, pipeline, terms
    from autotune.specs import codes
    from autotune.specs.config import CATEGORICAL
    for field, enum in codes.BY_FIELD.items():
        assert CATEGORICAL[field] == enum.labels()
        assert all(enum.of(label).label == label for label in enum.labels())
    assert (terms.P_DP_OUT, terms.P_CP_OUT, terms.F_HSDP) == (codes.Placement.DP_OUT, codes.Placement.CP_OUT,
                                                               codes.DPFlavour.HSDP)
    # the cost model's hot path holds the codes as plain ints taken from the enums (Code.codes():
    # numpy compares an array with an int directly, with an IntEnum member only after probing its type)
    hot = [(pipeline.S_1F1B, codes.PPSchedule.ONE_F_ONE_B), (dp_step.R_FULL, codes.Recompute.FULL),
           (network.LR_SR, codes.LossRecovery.SR), (nccl.PROTO_LL128, codes.Protocol.LL128),
           (collectives.COLL_HIER, codes.Collective.HIERARCHICAL), (terms.F_HSDP, codes.DPFlavour.HSDP)]
    assert all(type(c) is int and c == member for c, member in hot)
    assert codes.PPSchedule.codes() == tuple(int(m) for m in codes.PPSchedule)
    tree = ast.parse((ROOT / "autotune" / "space.py").read_text())
    coded = {"pl", "fl", "sc"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id in coded:
            assert not any(isinstance(c, ast.Constant) for c in node.comparators), ast.unparse(node)


def test_experiment_name_is_stored_and_inherited_by_workers(tmp_path, monkeypatch):
    """Issue 14: --experiment-name names the MLflow experiment, is stored with the study, and a worker
    logs to it without being told; another name is refused in one line."""
    from mlflow.tracking import MlflowClient

    from tests.test_hardening import run
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    storage, tracking = f"sqlite:///{tmp_path}/s.db", f"sqlite:///{tmp_path}/m.db"
    scen = ["--model", "llama3-8b", "--cluster", "campus-5bldg", "--gpus", "320"]
    code, out, err = run(["study", *scen, "--strategy", "random", "--trials", "2", "--storage", storage,
                          "--study-name", "e", "--tracking-uri", tracking, "--experiment-name", "team-x", "--json"])
    assert code == 0, err
    code, out, err = run(["worker", "--study-name", "e", "--storage", storage, "--trials", "2", "--json"])
    assert code == 0, err
    c = MlflowClient(tracking)
    exp = c.get_experiment_by_name("team-x")
    assert exp is not None and c.get_experiment_by_name("autotune") is None
    runs = c.search_runs([exp.experiment_id], max_results=50)
    assert len(runs) == 1 + 4                      # the study's parent run and one child run per trial
    code, out, err = run(["worker", "--study-name", "e", "--storage", storage, "--trials", "1",
                          "--experiment-name", "other"])
    assert code == 2 and "--experiment-name" in err and "'team-x'" in err and len(err.strip().splitlines()) == 1


def _open_after(url, barrier, results):
    from autotune.study.storage import open_storage
    barrier.wait()
    try:
        open_storage(url)
        results.put("ok")
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        results.put(f"{type(e).__name__}: {e}")


def test_workers_opening_a_new_database_at_the_same_moment_all_get_it(tmp_path):
    """Six processes open one new SQLite storage at once (parallel workers, or a monitor polling the
    study while the first worker creates it: CI's crash-resume test hit this). Before the fix the
    losers of the schema race got a one-line '--storage' error (IntegrityError) 34 times in 60."""
    import multiprocessing as mp
    for rep in range(3):
        url = f"sqlite:///{tmp_path}/race{rep}.db"
        barrier, results = mp.Barrier(6), mp.Queue()
        procs = [mp.Process(target=_open_after, args=(url, barrier, results)) for _ in range(6)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        got = [results.get(timeout=5) for _ in procs]
        assert got == ["ok"] * 6, got

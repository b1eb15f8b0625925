"""A study killed with SIGKILL mid-trial and resumed by name loses no finished trial and counts
none twice, in Optuna and in MLflow."""
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from mlflow.tracking import MlflowClient
from helpers import env_with_slow_backend
from reliability_report import record

KILLS = 3


@pytest.mark.slow      # ~40 s; test_kills_and_corruption.py kills 50 times more (slow too); CI runs both
def test_sigkill_then_resume(tmp_path):
    """Killed three times (after 6, 12 and 18 finished trials), resumed each time; then run to the end."""
    env = env_with_slow_backend(tmp_path)
    storage, tracking = f"sqlite:///{tmp_path}/s.db", f"sqlite:///{tmp_path}/m.db"
    args = [sys.executable, "-m", "autotune.cli", "study", "--model", "llama3-8b", "--cluster", "single-building",
            "--strategy", "random", "--until", "30", "--backend", "slow", "--storage", storage,
            "--tracking-uri", tracking, "--study-name", "crash", "--json"]
    before = {}
    for kill in range(1, KILLS + 1):
        p = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.time() + 180
        done = 0
        while time.time() < deadline and done < 6 * kill:
            time.sleep(0.3)
            try:
                st = optuna.load_study(study_name="crash", storage=storage)
                done = sum(t.state == optuna.trial.TrialState.COMPLETE for t in st.trials)
            except Exception:  # noqa: BLE001 - the study may not exist yet
                pass
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        assert done >= 6 * kill, p.stderr.read().decode()[-2000:]
        now = {t.number: t.values for t in optuna.load_study(study_name="crash", storage=storage).trials
               if t.state == optuna.trial.TrialState.COMPLETE}
        assert all(now.get(n) == v for n, v in before.items())   # earlier kills lost nothing
        before = now
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    st = optuna.load_study(study_name="crash", storage=storage)
    complete = {t.number: t.values for t in st.trials if t.state == optuna.trial.TrialState.COMPLETE}
    for n, v in before.items():            # nothing finished before the kill was lost or changed
        assert complete[n] == v
    finished = [t for t in st.trials if t.state.is_finished()]
    not_interrupted = [t for t in finished if "interrupted" not in t.user_attrs.get("reason", "")]
    assert len(not_interrupted) == 30      # the resumed study reaches its budget
    assert not [t for t in st.trials if t.state == optuna.trial.TrialState.RUNNING]
    interrupted = [t for t in st.trials if "interrupted" in t.user_attrs.get("reason", "")]
    assert len(interrupted) <= KILLS       # a trial killed mid-flight is failed, never counted as done
    assert all(t.state == optuna.trial.TrialState.FAIL for t in interrupted)
    assert not [t for t in st.trials if t.state == optuna.trial.TrialState.WAITING]   # queue drained
    c = MlflowClient(tracking)
    exp = c.get_experiment_by_name("autotune")
    parents = c.search_runs([exp.experiment_id], filter_string="tags.`autotune.role` = 'study'")
    assert len(parents) == 1
    kids = c.search_runs([exp.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parents[0].info.run_id}'",
                         max_results=1000)
    numbers = sorted(int(k.data.tags["autotune.trial"]) for k in kids)
    assert numbers == sorted(t.number for t in finished)     # each finished trial logged exactly once
    record("kills:sigkill_mid_trial", KILLS, trials_kept=len(before))

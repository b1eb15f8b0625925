"""The MLflow writer process (``tracking._Writer``): a writer that dies is an error in the summary,
never a traceback or a hang of the study; a normal flush logs everything queued."""
from __future__ import annotations

import os
import signal
import time

import pytest

pytest.importorskip("mlflow")

from autotune.tracking import Tracker  # noqa: E402


def child_runs(tracker):
    return [r for r in tracker.client.search_runs([tracker.experiment_id], max_results=1000)
            if "autotune.trial" in r.data.tags]


def test_a_flush_writes_every_queued_trial(tmp_path):
    t = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "w", "sqlite:///s.db")
    for n in range(12):
        t.log_trial(n, {"tp": 8}, {"iteration_time_s": 1.0 + n, "tier.nvlink.link_s": 0.1})
    t.flush()
    assert t.errors == [] and not t.dead
    assert sorted(int(r.data.tags["autotune.trial"]) for r in child_runs(t)) == list(range(12))


def test_a_writer_killed_mid_study_is_reported_and_the_study_neither_crashes_nor_hangs(tmp_path):
    t = Tracker(f"sqlite:///{tmp_path / 'm.db'}", "w", "sqlite:///s.db")
    w = t._writer
    if not w.forked:
        pytest.skip("the writer is a thread here")
    os.kill(w._proc.pid, signal.SIGKILL)
    w._proc.join(10)
    big = {f"m{i}": float(i) for i in range(400)}        # enough queued bytes to fill a pipe
    t0 = time.monotonic()
    for n in range(60):
        t.log_trial(n, {"tp": 8}, big)
        assert t.dead == ""                                # polled after each trial: no EOFError
    t.flush()
    assert time.monotonic() - t0 < 20
    assert any("exited before it finished" in e for e in t.errors)


def test_two_writers_racing_for_one_trial_leave_one_child_run(tmp_path):
    """Both writers passed ``_already_logged`` before either wrote (CI caught it with two workers):
    after writing, whichever looks last deletes all but the smallest run id; one run is left."""
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    a = Tracker(uri, "w", "sqlite:///s.db")
    b = Tracker(uri, "w", "sqlite:///s.db")            # the same study's parent run, a second worker
    assert a.parent_id == b.parent_id
    for t in (a, b):
        t._already_logged = lambda number: False       # the race: neither sees the other's run yet
        assert t.write(("trial", 7, {"tp": 8}, {"iteration_time_s": 1.5}, {}), []) == ""
    runs = child_runs(a)
    assert [r.data.tags["autotune.trial"] for r in runs] == ["7"]
    a.flush(), b.flush()

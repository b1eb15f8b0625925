"""Whose running trial is alive: Optuna's heartbeat across hosts, and the owner's process id as a
fast path on this host.

Every running trial records its owner (``host:pid``) and, in a database storage, Optuna's heartbeat
(``RDBStorage.record_heartbeat``, every HEARTBEAT_INTERVAL_s from a daemon thread). A resume or a
worker fails as interrupted: a trial whose owner is a dead process of this host (at once: a
resume right after a crash need not wait), a trial of any host whose heartbeat stopped more than the
grace period ago (``optuna.storages.fail_stale_trials``), and a trial killed before it recorded
either, once older than ORPHAN_GRACE_s. Interrupted trials are failed, never counted as done.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import threading
import time
import warnings

import optuna

from ..processes import THIS_PROCESS, alive, dead_here, parse
from ..trials import INTERRUPTED, RUNNING

OWNER = THIS_PROCESS
ORPHAN_GRACE_s = 10.0
"""A running trial with neither owner nor heartbeat is orphaned once this old (a live worker
records both within milliseconds of creating it)."""
CATCH_UP_AFTER_s = 120.0
"""A finished trial of another host's worker is left to that worker to log for this long."""


def owner(t) -> tuple[str, str]:
    """(host, pid) recorded on a trial by the process that ran it; ("", "") if none."""
    return parse(t.user_attrs.get("owner", ""))


def owner_may_still_log(t) -> bool:
    """True while the worker that ran a finished trial may still be logging it: a live local
    process, or another host's worker that finished it less than CATCH_UP_AFTER_s ago."""
    h, pid = owner(t)
    if h == socket.gethostname() and pid.isdigit():
        return int(pid) != os.getpid() and alive(int(pid))
    if not h or t.datetime_complete is None:
        return False
    return (dt.datetime.now() - t.datetime_complete).total_seconds() < CATCH_UP_AFTER_s


def _beats(storage) -> bool:
    """Whether the storage keeps Optuna's heartbeat (a database storage, possibly behind Optuna's cache)."""
    return hasattr(storage, "record_heartbeat") and bool(storage.get_heartbeat_interval())


def _fail(study, t, why: str) -> bool:
    try:
        study._storage.set_trial_user_attr(t._trial_id, "reason", f"{INTERRUPTED}: {why}")
        study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        return True
    except (RuntimeError, optuna.exceptions.UpdateFinishedTrialError):
        return False      # another worker got there first


def fail_orphaned_trials(study) -> list[int]:
    """Fail every running trial whose worker is gone (see the module docstring); trials of live
    workers are left alone. Returns the numbers of the trials this call failed."""
    failed = []
    st = study._storage
    if _beats(st):
        stale_before = {t.number for t in study.get_trials(deepcopy=False, states=(RUNNING,))}
        with warnings.catch_warnings():                   # marked experimental in Optuna
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)      # no heartbeat for grace_period: any host
        failed += [t.number for t in study.get_trials(deepcopy=False)
                   if t.number in stale_before and t.state == optuna.trial.TrialState.FAIL]
    for t in study.get_trials(deepcopy=False, states=(RUNNING,)):
        h, pid = owner(t)
        label = f"{h}:{pid}" if h else ""
        if not label:
            age = (dt.datetime.now() - t.datetime_start).total_seconds() if t.datetime_start else 0.0
            if age < ORPHAN_GRACE_s:
                continue
            label = "unknown"
        elif not dead_here(label):
            continue
        if _fail(study, t, f"process {label} died mid-trial"):
            failed.append(t.number)
    return failed


def wait_out_ownerless_trials(study) -> None:
    """Sleep until every running trial without an owner is past ORPHAN_GRACE_s (at most that
    long), so that fail_orphaned_trials can tell: a trial killed before it recorded its owner would
    otherwise stay running when a resumed study finishes inside the grace period."""
    starts = [t.datetime_start for t in study.get_trials(deepcopy=False, states=(RUNNING,))
              if not owner(t)[0] and t.datetime_start is not None]
    if starts:
        left = ORPHAN_GRACE_s - (dt.datetime.now() - max(starts)).total_seconds() + 0.1
        time.sleep(min(max(left, 0.0), ORPHAN_GRACE_s))


@contextlib.contextmanager
def heartbeat(study, trial_id: int):
    """Record Optuna's heartbeat for a running trial every ``heartbeat_interval`` seconds while the
    block runs (a database storage with the heartbeat on; nothing otherwise)."""
    st = study._storage
    if not _beats(st):
        yield
        return
    st.record_heartbeat(trial_id)
    stop = threading.Event()

    def beat():
        while not stop.wait(st.get_heartbeat_interval()):
            try:
                st.record_heartbeat(trial_id)
            except Exception:  # noqa: BLE001 - a lost connection: the trial's own writes report it
                pass
    th = threading.Thread(target=beat, name="autotune-heartbeat", daemon=True)
    th.start()
    try:
        yield
    finally:
        stop.set()

"""MLflow tracking: one parent run per study, one child run per trial, logged off the search
loop (a queue and a writer process, ``_Writer``) and flushed before the command returns.

Resuming a study reuses its parent run (found by tag) and never logs a trial number twice.
Secrets in URIs are masked wherever a URI is shown or logged.
"""
from __future__ import annotations


import logging
import os
import queue
import threading
import time
from .masking import mask_text, mask_uri  # noqa: F401 - public here too
from .processes import THIS_PROCESS, dead_here


DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"


def default_tracking_uri() -> str:
    """MLflow's convention: MLFLOW_TRACKING_URI when set, else a SQLite file in the working folder."""
    import os
    return (os.environ.get("MLFLOW_TRACKING_URI") or "").strip() or DEFAULT_TRACKING_URI


EXPERIMENT = "autotune"
"""The MLflow experiment when MLFLOW_EXPERIMENT_NAME is not set (MLflow's own variable)."""


def experiment_name() -> str:
    """MLflow's convention: MLFLOW_EXPERIMENT_NAME names the experiment; else ``autotune``."""
    import os
    return (os.environ.get("MLFLOW_EXPERIMENT_NAME") or "").strip() or EXPERIMENT
HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
               "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
"""Bounded retries for a tracking server (MLflow's defaults retry for minutes); a user's own
settings of these variables win."""
def _unreachable(e: Exception) -> bool:
    """A failure to reach the tracking store (as opposed to a rejected value)."""
    text = str(e).lower()
    return isinstance(e, OSError) or any(w in text for w in ("connect", "max retries", "unable to open",
                                                                 "timed out", "temporarily unavailable"))


STALE_CHILD_RUN_S = 120.0
"""A child run not finished this long after it was created is a crashed writer's, not a slow one's."""


class Tracker:
    def __init__(self, tracking_uri: str, study_name: str, storage: str, tags: dict | None = None,
                 retries: int = 3, experiment: str | None = None):
        import os
        for k, v in HTTP_LIMITS.items():
            os.environ.setdefault(k, v)
        # MLflow prints "View run ... at: <tracking URI>" on stdout: it would break --json and
        # show a password embedded in the URI
        os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
        import mlflow
        from mlflow.tracking import MlflowClient

        logging.getLogger("mlflow").setLevel(logging.ERROR)
        logging.getLogger("alembic").setLevel(logging.ERROR)
        self.uri = tracking_uri
        from .tracking_store import experiment_id, one_line_errors, probe_tracking_db, schema_lock
        probe_tracking_db(tracking_uri)
        with schema_lock(tracking_uri), one_line_errors(tracking_uri):
            # inside the try: MLflow rejects a malformed or unsupported URI with a message
            # that repeats it, password included
            mlflow.set_tracking_uri(tracking_uri)
            self.client = MlflowClient(tracking_uri)
            name = experiment or experiment_name()
            self.experiment_id = experiment_id(self.client, name)
            found = self.client.search_runs([self.experiment_id],
                                            filter_string=f"tags.`autotune.study_name` = '{study_name}' and "
                                                          f"tags.`autotune.role` = 'study'", max_results=1)
        if found:
            self.parent_id = found[0].info.run_id
            self.client.update_run(self.parent_id, status="RUNNING")
        else:
            t = {"autotune.study_name": study_name, "autotune.role": "study", "autotune.storage": mask_uri(storage)}
            t.update(tags or {})
            self.parent_id = self.client.create_run(self.experiment_id, run_name=study_name, tags=t).info.run_id
        self.logged = self._logged_trials()
        self.retries = retries
        self.errors: list[str] = []
        self._dead: str = ""      # set when a call failed through every retry: the cause
        self._writer = _Writer(self)

    @property
    def dead(self) -> str:
        """The cause, once a call to the tracking store failed through every retry ("" before)."""
        self._writer.poll()
        return self._dead

    def _logged_trials(self) -> set[int]:
        """Trial numbers whose child run was logged to the end. A child run left half-written
        by a crash or an outage (not FINISHED, older than STALE_CHILD_RUN_S) is deleted, so the
        trial is logged again, once. A younger one may be another live worker's run in the
        middle of being written (CI caught a late-starting worker deleting one): left alone."""
        runs = self.client.search_runs([self.experiment_id],
                                       filter_string=f"tags.`mlflow.parentRunId` = '{self.parent_id}'",
                                       max_results=50000)
        done = set()
        now_ms = time.time() * 1000
        for r in runs:
            if "autotune.trial" not in r.data.tags:
                continue
            if r.info.status == "FINISHED":
                done.add(int(r.data.tags["autotune.trial"]))
            elif dead_here(r.data.tags.get("autotune.writer", "")) \
                    or now_ms - (r.info.start_time or 0) > STALE_CHILD_RUN_S * 1000:
                self.client.delete_run(r.info.run_id)
        return done

    # ------------------------------------------------------------ logging (off the search loop)
    def log_trial(self, number: int, params: dict, metrics: dict, tags: dict | None = None) -> None:
        """Queue one trial's child run (written only if no process has logged that trial yet)."""
        if number in self.logged:
            return
        self.logged.add(number)
        self._writer.put(("trial", number, params, metrics, tags or {}))

    def log_study(self, params: dict | None = None, metrics: dict | None = None) -> None:
        self._writer.put(("study", params or {}, metrics or {}))

    def log_artifact(self, path: str) -> None:
        self._writer.put(("artifact", path))

    def write(self, item, errors: list) -> str:
        """Write one queued item, retrying; returns the cause when the store is unreachable
        through every retry ("" otherwise). Runs in the writer (``_Writer``)."""
        from mlflow.entities import Metric, Param, RunTag
        run_id = None
        for attempt in range(self.retries):
            try:
                now = int(time.time() * 1000)
                if item[0] == "trial":
                    _, number, params, metrics, tags = item
                    # always look first: another worker (a resumed run, or one that raced
                    # for the same queued trial on SQLite) may have logged this trial
                    if run_id is None and self._already_logged(number):
                        return ""
                    t = {"mlflow.parentRunId": self.parent_id, "autotune.trial": str(number),
                         "autotune.writer": THIS_PROCESS} | tags
                    if run_id is None:     # a retry reuses the run: one child run per trial
                        run_id = self.client.create_run(self.experiment_id, run_name=f"trial-{number}",
                                                        tags=t).info.run_id
                    self.client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
                                          params=[Param(k, str(v)[:6000]) for k, v in params.items()])
                    self.client.set_terminated(run_id)
                    self._keep_one(number)
                elif item[0] == "study":
                    _, params, metrics = item
                    self.client.log_batch(self.parent_id,
                                          metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
                                          params=[Param(k, str(v)[:6000]) for k, v in params.items()],
                                          tags=[RunTag("autotune.updated", str(now))])
                else:
                    self.client.log_artifact(self.parent_id, item[1])
                return ""
            except Exception as e:  # noqa: BLE001 - retried, then reported at flush
                if "already" in str(e).lower() and item[0] == "study":
                    return ""     # params are immutable in MLflow; a resumed study keeps the first
                if attempt == self.retries - 1:
                    errors.append(f"{item[0]}: {type(e).__name__}: {mask_text(str(e))[:200]}")
                    return type(e).__name__ if _unreachable(e) else ""
                time.sleep(0.2 * (attempt + 1))
        return ""

    def _keep_one(self, number: int) -> None:
        """Two workers can both pass ``_already_logged`` for one trial before either has written
        (CI caught trial 7 of a shared study logged twice). After writing, every writer keeps
        the finished child run with the smallest run id and deletes the others: whichever writer
        looks last sees both runs, so exactly one is left; a run already deleted by the other
        writer is skipped. Only finished runs are touched, never one still being written."""
        try:
            runs = self.client.search_runs([self.experiment_id], max_results=100,
                                           filter_string=f"tags.`mlflow.parentRunId` = '{self.parent_id}' and "
                                                         f"tags.`autotune.trial` = '{number}' and "
                                                         "attributes.status = 'FINISHED'")
        except Exception:  # noqa: BLE001 - the trial is logged; a duplicate is the lesser harm
            return
        for r in sorted(runs, key=lambda r: r.info.run_id)[1:]:
            try:
                self.client.delete_run(r.info.run_id)
            except Exception:  # noqa: BLE001 - the other writer deleted it first
                pass

    def _already_logged(self, number: int) -> bool:
        runs = self.client.search_runs([self.experiment_id], max_results=1,
                                       filter_string=f"tags.`mlflow.parentRunId` = '{self.parent_id}' and "
                                                     f"tags.`autotune.trial` = '{number}'")
        return bool(runs)

    def flush(self, status: str = "FINISHED") -> None:
        """Wait until every queued item is written (or given up), then close the parent run."""
        self._writer.close()
        try:
            self.client.set_terminated(self.parent_id, status=status)
        except Exception as e:  # noqa: BLE001
            self.errors.append(f"terminate: {type(e).__name__}")


class _Writer:
    """Writes the tracker's queued items off the search loop. On Linux a forked process does it:
    MLflow's client is pure Python, and as a thread it held the interpreter lock for about half of
    a tracked study's time; a process runs on another core. Elsewhere (no safe fork) a thread.

    The process drops the connections it inherited (SQLAlchemy's rule for forked processes),
    ignores Ctrl-C (blocked from before the fork until it ignores it; the study's process flushes
    it on its way out), stops as soon as the study's process is gone (what it has not written is
    logged when the study resumes), and sends back its errors and, the moment the store is
    unreachable through every retry, its cause. A writer that dies is reported as an error, never
    as a crash or a hang of the study: what is queued for it is dropped."""

    JOIN_TIMEOUT_s = 30.0
    """How long a close waits for a writer that no longer answers before it stops it."""

    def __init__(self, tracker: Tracker):
        import multiprocessing
        import signal
        import sys
        self.tracker = tracker
        self.forked = sys.platform == "linux" and "fork" in multiprocessing.get_all_start_methods()
        self._closed = self._gone = False
        if self.forked:
            ctx = multiprocessing.get_context("fork")
            self._q = ctx.Queue()
            self._back, back_w = ctx.Pipe(duplex=False)
            self._proc = ctx.Process(target=self._run_process, args=(back_w, os.getpid()), daemon=True,
                                     name="autotune-mlflow")
            old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                self._proc.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
            back_w.close()
        else:
            self._q = queue.Queue()
            self._proc = threading.Thread(target=self._run_thread, daemon=True)
            self._proc.start()

    def put(self, item) -> None:
        if not self._gone:
            self._q.put(item)

    # ---- in the study's process
    def poll(self) -> None:
        """Take what the process sent back so far (nothing to do for a thread)."""
        try:
            while self.forked and not self._closed and not self._gone and self._back.poll(0):
                self._receive(self._back.recv())
        except (EOFError, OSError):
            self._lost()

    def _receive(self, msg) -> None:
        kind, payload = msg
        if kind == "dead":
            self.tracker._dead = payload
        elif kind == "errors":
            self.tracker.errors.extend(payload)

    def _lost(self) -> None:
        """The writer process died: say so, drop what is queued for it (never wait on it)."""
        if not self._gone:
            self._gone = True
            self.tracker.errors.append("mlflow writer: exited before it finished (the trials it did not "
                                       "log are logged when the study resumes)")
        self._q.cancel_join_thread()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if not self.forked:
            self._q.put(None)
            self._proc.join()
            return
        finished = False
        try:
            if not self._gone:
                self._q.put(None)
                while True:
                    if not self._back.poll(self.JOIN_TIMEOUT_s) and not self._proc.is_alive():
                        raise EOFError
                    msg = self._back.recv()
                    self._receive(msg)
                    if msg[0] == "errors":    # its last message
                        finished = True
                        break
        except (EOFError, OSError):
            self._lost()
        finally:
            if not finished:                  # died, or Ctrl-C while waiting: never hang the exit
                self._q.cancel_join_thread()
                if self._proc.is_alive():
                    self._proc.terminate()
            self._proc.join(self.JOIN_TIMEOUT_s)
            self._q.close()

    # ---- in the writer
    def _run_thread(self) -> None:
        while (item := self._q.get()) is not None:
            if not self.tracker._dead:        # the store is gone: the rest is logged on resume
                self.tracker._dead = self.tracker.write(item, self.tracker.errors)

    def _run_process(self, back, parent_pid: int) -> None:
        import signal
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C reaches the whole process group
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        errors: list[str] = []
        dead = ""
        try:
            _drop_inherited_connections(self.tracker.client)
        except Exception as e:  # noqa: BLE001 - reported, and nothing is written with the parent's connections
            errors.append(f"mlflow writer: {type(e).__name__}: {mask_text(str(e))[:200]}")
            dead = type(e).__name__
            back.send(("dead", dead))
        while True:
            try:
                item = self._q.get(timeout=1.0)
            except queue.Empty:
                item = False
            if os.getppid() != parent_pid:       # the study's process is gone: stop (a resume logs the rest)
                break
            if item is None:
                break
            if item is False:
                continue
            if not dead:
                dead = self.tracker.write(item, errors)
                if dead:
                    back.send(("dead", dead))
        try:
            back.send(("errors", errors))
        except OSError:
            pass


def _drop_inherited_connections(client) -> None:
    """A forked process must not use the database connections or HTTP sessions its parent opened
    (SQLAlchemy: ``engine.dispose(close=False)`` in the child); it opens its own."""
    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    engine = getattr(store, "engine", None)
    if engine is not None:
        engine.dispose(close=False)
    try:
        from mlflow.utils import request_utils
        cached = getattr(request_utils, "_get_request_session", None)
        if cached is not None and hasattr(cached, "cache_clear"):
            cached.cache_clear()
    except ImportError:
        pass

"""Tuning studies: durable (Optuna storage is the source of truth), resumable by name, shared by
many workers, every trial tracked in MLflow.

One trial: the strategy proposes an encoded configuration (or lets the Optuna sampler choose),
the encoding decodes it to a legal configuration, the backend measures it, the study records it.
Out-of-memory configurations are feasibility constraints (samplers that take constraints) or
failed trials with their reason (the others); a failed measurement is a failed trial with its
reason. No fake large value ever enters the study.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import socket
import tempfile
import threading
import time
from pathlib import Path

import optuna
import pydantic
import sqlalchemy.exc
import yaml

from .backends import Measurement, get_backend
from .encoding import FlatEncoding
from .errors import ServiceUnavailable, UserInputError, from_pydantic
from .space import SearchSpace
from .specs import Config, Scenario
from .strategies.base import Observation
from .strategies.optuna_samplers import CONSTRAINT_KEY, SUPPORTS_CONSTRAINTS, make_sampler
from .strategies.registry import make_strategy
from .processes import THIS_PROCESS, alive, dead_here, parse
from .tracking import Tracker, mask_uri

DEFAULT_STORAGE = "sqlite:///autotune.db"
OBJECTIVES = ("iteration_time_s", "xb_bytes_per_step", "memory_per_gpu_bytes")
"""Minimised objectives a study may ask for; more than one makes it multi-objective (Pareto front;
NSGA-II or TPE). Memory per GPU stands for memory headroom (less used = more headroom)."""
INFEASIBLE_MODES = ("fail", "constraint")
"""How an out-of-memory configuration enters the study: a failed trial with its reason (default),
or an Optuna constraint whose value is the memory deficit over HBM (samplers that take
constraints: tpe, gp, nsga2). Within seed noise of each other for TPE (experiments/tpe_ablation.py)."""
DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"

optuna.logging.set_verbosity(optuna.logging.ERROR)   # storage errors are reported by autotune, in one line


_SQLITE_TUNED = False


def _tune_sqlite() -> None:
    """WAL journal + synchronous=NORMAL for SQLite: one fsync per checkpoint instead of per
    commit. A committed trial survives a crash or SIGKILL of the process (only an OS crash or
    power loss can drop the last commits). Optuna writes each parameter in its own transaction,
    so this is the difference between ~3 ms and ~0.1 ms per write."""
    global _SQLITE_TUNED
    if _SQLITE_TUNED:
        return
    import sqlite3

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _pragmas(dbapi_connection, _record):
        if isinstance(dbapi_connection, sqlite3.Connection):
            cur = dbapi_connection.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()
    _SQLITE_TUNED = True


def _driver_url(url: str) -> str:
    """``postgresql://`` means psycopg2 to SQLAlchemy; autotune ships psycopg 3."""
    if url.startswith(("postgresql://", "postgres://")):
        try:
            import psycopg2  # noqa: F401
        except ImportError:
            return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _storage(url: str):
    _tune_sqlite()
    if url == "memory":
        return optuna.storages.InMemoryStorage()
    url = _driver_url(url)
    try:
        if url.startswith("sqlite:///"):
            path = Path(url[len("sqlite:///"):])
            if path.parent and not path.parent.exists():
                raise UserInputError("--storage", mask_uri(url), "a SQLite path in an existing directory")
        return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True},
                                          heartbeat_interval=None)
    except UserInputError:
        raise
    except Exception as e:  # noqa: BLE001 - unreachable or malformed database URL
        raise UserInputError("--storage", mask_uri(url), f"a reachable SQLAlchemy database URL ({type(e).__name__})") from None


UNORDERED = ("placement", "dp_flavour", "pp_schedule", "recompute", "xb_load_balancing", "xb_loss_recovery",
             "collective")
CATEGORICAL_SAMPLERS = ("tpe", "nsga2", "random")


def distributions_for(encoding, sampler_name: str, categorical_unordered: bool = True) -> dict:
    """Static, always-sampled parameters: unordered knobs categorical for samplers that model
    categories (TPE, NSGA-II); integers elsewhere (CMA-ES and GP need numbers). Measured with
    experiments/tpe_ablation.py on llama4-maverick x campus-5bldg: 4.07% vs 4.77% all-integer."""
    out = {}
    for k, n in zip(encoding.names, encoding.sizes):
        if categorical_unordered and k in UNORDERED and sampler_name in CATEGORICAL_SAMPLERS:
            out[k] = optuna.distributions.CategoricalDistribution(list(range(n)))
        else:
            out[k] = optuna.distributions.IntDistribution(0, n - 1)
    return out


OWNER = THIS_PROCESS
"""Who runs a trial: recorded on the trial so a resumed study can tell a dead run's trial
from a live worker's."""


CATCH_UP_AFTER_S = 120.0
"""A finished trial of another host's worker is left to that worker to log for this long."""


def _owner(t) -> tuple[str, str]:
    """(host, pid) recorded on a trial by the process that ran it; ("", "") if none."""
    return parse(t.user_attrs.get("owner", ""))


def _interrupted(t) -> bool:
    return str(t.user_attrs.get("reason", "")).startswith(INTERRUPTED)


def _owner_may_still_log(t) -> bool:
    """True while the worker that ran a finished trial may still be logging it: a live local
    process, or another host's worker that finished it less than CATCH_UP_AFTER_S ago."""
    h, pid = _owner(t)
    if h == socket.gethostname() and pid.isdigit():
        return int(pid) != os.getpid() and alive(int(pid))
    if not h or t.datetime_complete is None:
        return False
    return (dt.datetime.now() - t.datetime_complete).total_seconds() < CATCH_UP_AFTER_S


ORPHAN_GRACE_S = 10.0
INTERRUPTED = "interrupted"
"""Reason prefix of a trial whose process died mid-trial: failed, and not counted in the budget."""


def fail_orphaned_trials(study) -> list[int]:
    """Mark FAIL every RUNNING trial whose process (on this host) is gone: a trial interrupted
    by a crash or SIGKILL is never counted as done and never left running for ever. Trials of
    live workers and of other hosts are left alone."""
    failed = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        h, pid = _owner(t)
        owner = f"{h}:{pid}" if h else ""
        if not owner:
            # killed between ask and recording its owner (a live worker records it within
            # milliseconds): orphaned once it is older than the grace period
            age = (dt.datetime.now() - t.datetime_start).total_seconds() if t.datetime_start else 0.0
            if age < ORPHAN_GRACE_S:
                continue
            owner = "unknown"
        elif not dead_here(owner):
            continue
        try:
            study._storage.set_trial_user_attr(t._trial_id, "reason", f"{INTERRUPTED}: process {owner} died mid-trial")
            study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
            failed.append(t.number)
        except (RuntimeError, optuna.exceptions.UpdateFinishedTrialError):
            pass        # another worker got there first
    return failed


def wait_out_ownerless_trials(study) -> None:
    """Sleep until every RUNNING trial without an owner is past ORPHAN_GRACE_S (at most that
    long), so that fail_orphaned_trials can tell: a live worker records its owner within
    milliseconds, a trial killed before that would otherwise stay RUNNING when a resumed study
    finishes inside the grace period."""
    starts = [t.datetime_start for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
              if not _owner(t)[0] and t.datetime_start is not None]
    if starts:
        left = ORPHAN_GRACE_S - (dt.datetime.now() - max(starts)).total_seconds() + 0.1
        time.sleep(min(max(left, 0.0), ORPHAN_GRACE_S))


TOLD_BY_ANOTHER = object()
STORAGE_RETRIES = 4
STORAGE_BACKOFF_S = 0.5
"""A lost storage connection is retried 4 times, waiting 0.5, 1, 2 and 4 s."""
STORAGE_ERRORS = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError,
                  optuna.exceptions.StorageInternalError, optuna.exceptions.UpdateFinishedTrialError)


FAILURE_KINDS = (("timed out", "timeout"), ("invalid iteration time: nan", "NaN time"),
                 ("invalid iteration time: inf", "infinite time"), ("invalid iteration time: -", "negative time"),
                 ("invalid iteration time", "invalid time"), ("command failed (signal", "killed mid-run"),
                 ("out of memory", "out of memory"), (INTERRUPTED, INTERRUPTED),
                 ("backend raised", "backend raised"), ("no JSON line", "no result line"),
                 ("command failed", "command failed"), ("does not report", "missing objective"))


def failure_kinds(trials) -> dict:
    """Failed trials counted by the kind of their reason (summary and README table)."""
    out: dict[str, int] = {}
    for t in trials:
        if t.state != optuna.trial.TrialState.FAIL:
            continue
        reason = str(t.user_attrs.get("reason", ""))
        kind = next((k for needle, k in FAILURE_KINDS if needle in reason), "other")
        out[kind] = out.get(kind, 0) + 1
    return dict(sorted(out.items()))


def _measure(backend, scenario, config, timeout_s: float | None) -> Measurement:
    """Measure with a deadline; exceptions and garbage become failures with their reason."""
    box: dict = {}

    def call():
        try:
            box["m"] = backend.measure(scenario, config)
        except BaseException as e:  # noqa: BLE001 - reported below as the trial's reason
            box["e"] = e
    if timeout_s:
        # a daemon thread: a backend hung for good can neither block the study nor its exit
        th = threading.Thread(target=call, name="autotune-measure", daemon=True)
        th.start()
        th.join(timeout_s)
        if th.is_alive():
            return Measurement.failure(f"timed out after {timeout_s:g} s")
    else:
        call()
    if "e" in box:
        e = box["e"]
        if isinstance(e, KeyboardInterrupt):
            raise e
        return Measurement.failure(f"backend raised {type(e).__name__}: {str(e)[:300]}")
    m = box.get("m")
    if not isinstance(m, Measurement):
        return Measurement.failure(f"backend returned {type(m).__name__}, not a Measurement")
    return m.checked()


class StudyRunner:
    def __init__(self, scenario: Scenario, strategy: str = "tpe", trials: int = 100, storage: str | None = None,
                 study_name: str | None = None, tracking_uri: str | None = None, seed: int = 0,
                 backend: str = "costmodel", backend_options: dict | None = None, trial_timeout_s: float | None = None, track: bool = True,
                 seed_baselines: bool = True, strategy_options: dict | None = None, progress: bool = False,
                 infeasible: str = "fail", baselines: tuple = ("production", "sota"),
                 known_baselines: dict | None = None, objectives: tuple = ("iteration_time_s",),
                 categorical_unordered: bool = True):
        if trials is None or trials <= 0:
            raise UserInputError("--trials", trials, "a positive integer")
        self.scenario, self.trials, self.seed = scenario, int(trials), int(seed)
        self.storage_url = storage or DEFAULT_STORAGE
        self.tracking_uri = tracking_uri or DEFAULT_TRACKING_URI
        self.strategy = make_strategy(strategy, **(strategy_options or {}))
        self.backend = get_backend(backend, **(backend_options or {})) if isinstance(backend, str) else backend
        self.backend_name = backend if isinstance(backend, str) else getattr(backend, "name", type(backend).__name__)
        self.trial_timeout_s = trial_timeout_s
        self.track = track
        self.seed_baselines = seed_baselines
        self.progress = progress
        self.study_name = study_name or f"{scenario.model.name}-{scenario.cluster.name}-{strategy}-seed{seed}"
        self.space = SearchSpace(scenario)
        self.encoding = FlatEncoding(self.space)
        self.distributions = distributions_for(self.encoding, self.strategy.sampler_name, categorical_unordered)
        self.hbm_bytes = min(b.gpu.hbm_bytes for b in scenario.cluster.buildings)
        if infeasible not in INFEASIBLE_MODES:
            raise UserInputError("--infeasible", infeasible, " or ".join(INFEASIBLE_MODES))
        self.infeasible = infeasible
        self.baseline_names = tuple(baselines)
        self.known_baselines = known_baselines
        objectives = tuple(objectives)
        bad = [o for o in objectives if o not in OBJECTIVES]
        if bad or not objectives or objectives[0] != "iteration_time_s" or len(set(objectives)) != len(objectives):
            raise UserInputError("--objectives", ",".join(objectives),
                                 "iteration_time_s first, then optionally " + " and/or ".join(OBJECTIVES[1:]))
        self.objectives = objectives

    # ------------------------------------------------------------------ setup
    def _open_study(self) -> optuna.Study:
        storage = _storage(self.storage_url)
        sampler = make_sampler(self.strategy.sampler_name, self.seed)
        try:
            study = optuna.create_study(study_name=self.study_name, storage=storage, sampler=sampler,
                                        directions=["minimize"] * len(self.objectives), load_if_exists=True)
        except Exception as e:  # noqa: BLE001
            raise UserInputError("--storage", mask_uri(self.storage_url), f"a reachable database ({type(e).__name__})") from None
        attrs = study.user_attrs
        key = self.scenario.key
        if "scenario_key" in attrs and attrs["scenario_key"] != key:
            raise UserInputError("--study-name", self.study_name,
                                 "a new name: a study of that name exists with a different scenario")
        if "objectives" in attrs and tuple(attrs["objectives"]) != self.objectives:
            raise UserInputError("--study-name", self.study_name,
                                 f"a new name: that study optimises {','.join(attrs['objectives'])}")
        if "strategy" in attrs and attrs["strategy"] != self.strategy.name:
            raise UserInputError("--study-name", self.study_name,
                                 f"a new name: that study was run with strategy {attrs['strategy']!r}")
        if "scenario_key" not in attrs:
            study.set_user_attr("scenario_key", key)
            study.set_user_attr("scenario_json", self.scenario.model_dump_json())
            study.set_user_attr("strategy", self.strategy.name)
            study.set_user_attr("seed", self.seed)
            study.set_user_attr("backend", self.backend_name)
            study.set_user_attr("objectives", list(self.objectives))
        return study

    def _baselines(self, study) -> dict:
        """Production and sota configurations and their times, computed once per study."""
        from .baselines import measure_baselines
        attrs = study.user_attrs
        if self.known_baselines is not None and "baselines" not in attrs:
            study.set_user_attr("baselines", self.known_baselines)
            return self.known_baselines
        if "baselines" in attrs and all(attrs["baselines"][n]["config"] for n in self.baseline_names
                                        if n in attrs["baselines"]):
            return attrs["baselines"]
        out = measure_baselines(self.scenario, self.space, self.baseline_names,
                                lambda cfg: _measure(self.backend, self.scenario, cfg, self.trial_timeout_s))
        study.set_user_attr("baselines", out)
        return out

    # ------------------------------------------------------------------ run
    def run(self) -> dict:
        t0 = time.perf_counter()
        study = self._open_study()
        tracker = None
        if self.track:      # connect before any expensive work: a bad URI fails fast
            tracker = Tracker(self.tracking_uri, self.study_name, self.storage_url,
                              tags={"autotune.strategy": self.strategy.name, "autotune.scenario_key": self.scenario.key})
        # a trial this worker fails as orphaned is this worker's to log: its runner, if it was in
        # fact alive but slow to record its owner, finds it told by another and logs nothing
        orphaned = set(fail_orphaned_trials(study))
        # interrupted trials are failed but do not use up the budget: the resumed study still
        # reaches the number of finished trials it was asked for
        n_interrupted = sum(map(_interrupted, study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,))))
        base = self._baselines(study)
        self.strategy.bind(self.space, self.encoding, self.seed + len(study.trials))
        if tracker is not None:
            tracker.log_study(params={"model": self.scenario.model.name, "cluster": self.scenario.cluster.name,
                                      "gpus": self.scenario.n_gpus, "strategy": self.strategy.name,
                                      "seed": self.seed, "backend": self.backend_name,
                                      "global_batch_seqs": self.scenario.global_batch_seqs})
            for t in study.trials:   # trials finished before a crash but never logged
                if t.number in orphaned or (t.state.is_finished() and not _owner_may_still_log(t)):
                    self._track(tracker, t, base)
        if not study.trials and self.strategy.max_trials is None:   # search strategies start from the baselines
            for name in ("production", "sota") if self.seed_baselines else ("production",):
                if base[name]["config"]:
                    study.enqueue_trial(self.encoding.encode(Config(**base[name]["config"])),
                                        user_attrs={"source": name})
        bar = None
        if self.progress:
            from tqdm import tqdm
            bar = tqdm(total=self.trials, desc=self.study_name, unit="trial")
        status = "FINISHED"
        try:
            done_states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL,
                           optuna.trial.TrialState.PRUNED)
            while True:
                finished = self._storage_call(study._storage.get_n_trials, study._study_id,
                                              state=done_states) - n_interrupted
                if bar is not None:
                    bar.n = min(finished, self.trials)
                    bar.refresh()
                if finished >= self.trials:
                    # a trial killed before it recorded its owner: wait until it is past its grace
                    # period, then fail it (a live worker's trial has its owner by then)
                    wait_out_ownerless_trials(study)
                    for n in fail_orphaned_trials(study):
                        if tracker is not None:
                            self._track(tracker, study.trials[n], base)
                    break
                if self.strategy.max_trials is not None and len(self.strategy.history) >= self.strategy.max_trials \
                        and finished > 0:
                    break
                waiting = self._storage_call(study.get_trials, deepcopy=False,
                                             states=(optuna.trial.TrialState.WAITING,))
                params = None if waiting else self.strategy.propose()   # a crash can leave one queued
                if params is not None:
                    self._storage_call(study.enqueue_trial, params, user_attrs={"source": self.strategy.name})
                elif not waiting and self.strategy.sampler_name == "random" and self.strategy.name != "random":
                    break   # a fixed strategy with nothing left to propose
                with self._ask_lock():
                    trial = self._storage_call(study.ask, self.distributions)
                self._run_trial(study, trial, base, tracker)
                self._raise_if_tracking_gone(tracker)
        except KeyboardInterrupt:
            status = "KILLED"
            raise
        except ServiceUnavailable:
            status = "FAILED"
            raise
        finally:
            if bar is not None:
                bar.close()
            if tracker is not None:
                self._finish_tracking(study, base, tracker, status)
        self._raise_if_tracking_gone(tracker)
        self.last_values = [t.values[0] if t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs.get("feasible")
                            else None for t in study.trials]
        return self._summary(study, base, tracker, time.perf_counter() - t0)

    def _raise_if_tracking_gone(self, tracker) -> None:
        if tracker is not None and tracker.dead:
            raise ServiceUnavailable("--tracking-uri", mask_uri(self.tracking_uri), tracker.retries, tracker.dead,
                                     "every finished trial is in the storage; resume with "
                                     f"--study-name {self.study_name} to log them")

    @contextlib.contextmanager
    def _ask_lock(self):
        """SQLite has no row locks: two workers can pop the same queued trial. Workers sharing a
        SQLite file share a machine, so an exclusive file lock around ``ask`` makes it atomic.
        (PostgreSQL pops with SELECT ... FOR UPDATE and needs none.)"""
        url = self.storage_url
        if not url.startswith("sqlite:///"):
            yield
            return
        import fcntl
        with open(url[len("sqlite:///"):] + ".ask.lock", "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _storage_call(self, fn, *args, **kwargs):
        """Call the storage; a lost connection is retried STORAGE_RETRIES times with doubling
        waits, then the study stops with ServiceUnavailable (nothing committed is lost)."""
        for attempt in range(STORAGE_RETRIES + 1):
            try:
                return fn(*args, **kwargs)
            except ValueError as e:
                if fn.__name__ == "tell" and "Cannot tell" in str(e):
                    # attempt > 0: our first attempt went through before its error. attempt 0:
                    # another worker popped the same queued trial (SQLite has no row locks) and
                    # finished it first; it records and logs it, we do not count it twice
                    return None if attempt else TOLD_BY_ANOTHER
                raise
            except STORAGE_ERRORS as e:
                if isinstance(e, optuna.exceptions.UpdateFinishedTrialError):
                    if fn.__name__ != "ask":
                        return None   # a retried write that had in fact gone through
                    continue          # another worker took the queued trial first: ask again
                if attempt == STORAGE_RETRIES:
                    raise ServiceUnavailable("--storage", mask_uri(self.storage_url), attempt + 1,
                                             type(e).__name__, f"resume with --study-name {self.study_name}") from None
                time.sleep(STORAGE_BACKOFF_S * 2 ** attempt)

    def _run_trial(self, study, trial, base, tracker):
        self._storage_call(trial.set_user_attr, "owner", OWNER)
        cfg = self.encoding.decode(trial.params)
        self._storage_call(trial.set_user_attr, "config", cfg.model_dump())
        m = _measure(self.backend, self.scenario, cfg, self.trial_timeout_s)
        self._record(study, trial, cfg, m, base, tracker)

    def _record(self, study, trial, cfg, m, base, tracker):
        """Store the measurement (each storage write retried), then feed the strategy and MLflow."""
        call = self._storage_call
        call(trial.set_user_attr, "breakdown", m.breakdown)
        call(trial.set_user_attr, "feasible", bool(m.feasible))
        if m.reason:
            call(trial.set_user_attr, "reason", m.reason)
        deficit = float(m.extra.get("memory_deficit_bytes", 0.0) or 0.0)
        fail = optuna.trial.TrialState.FAIL
        told = None
        if m.failed:
            told = call(study.tell, trial, state=fail)
        elif not m.feasible and (self.infeasible == "fail" or self.strategy.sampler_name not in SUPPORTS_CONSTRAINTS):
            # out of memory: a failed trial with its reason (never a made-up value)
            told = call(study.tell, trial, state=fail)
        else:
            call(trial.set_constraint, CONSTRAINT_KEY, deficit / self.hbm_bytes if not m.feasible else 0.0)
            values = [m.iteration_time_s]
            for o in self.objectives[1:]:
                v = m.extra.get(o)
                if v is None or not math.isfinite(float(v)):
                    values = None
                    break
                values.append(float(v))
            if values is None:
                call(trial.set_user_attr, "reason", f"backend {self.backend_name!r} does not report {self.objectives[1:]}")
                told = call(study.tell, trial, state=fail)
            else:
                call(trial.set_user_attr, "objectives", dict(zip(self.objectives, values)))
                told = call(study.tell, trial, values if len(values) > 1 else values[0])
        if told is TOLD_BY_ANOTHER:
            return
        self.strategy.observe(Observation(trial.params, cfg, m.iteration_time_s, bool(m.feasible and not m.failed)))
        if tracker is not None:
            self._track(tracker, call(study._storage.get_trial, trial._trial_id), base)

    def _track(self, tracker, t, base):
        cfg = t.user_attrs.get("config") or {}
        value = t.values[0] if t.state == optuna.trial.TrialState.COMPLETE else None
        feasible = bool(t.user_attrs.get("feasible", False)) and value is not None
        metrics = {"feasible": float(feasible)}
        if value is not None:
            metrics["iteration_time_s"] = value
            for name in ("production", "sota"):
                b = base[name]["iteration_time_s"]
                if b and math.isfinite(b) and feasible:
                    metrics[f"speedup_vs_{name}"] = b / value - 1.0
        for k, v in (t.user_attrs.get("breakdown") or {}).items():
            metrics[k] = v
        for k, v in (t.user_attrs.get("objectives") or {}).items():
            metrics[k] = v
        tags = {"autotune.state": t.state.name}
        if t.user_attrs.get("reason"):
            tags["autotune.reason"] = t.user_attrs["reason"][:500]
        tracker.log_trial(t.number, cfg, metrics, tags)

    def _feasible(self, study):
        return [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                if t.user_attrs.get("feasible") and t.values]

    def _best(self, study):
        """Fastest feasible trial (the first objective)."""
        ok = self._feasible(study)
        return min(ok, key=lambda t: t.values[0]) if ok else None

    def _pareto(self, study) -> list[dict]:
        """Non-dominated feasible trials over all objectives (minimised)."""
        ok = self._feasible(study)
        front = [t for t in ok if not any(all(a <= b for a, b in zip(o.values, t.values)) and o.values != t.values
                                          for o in ok)]
        seen, out = set(), []
        for t in sorted(front, key=lambda t: t.values):
            key = tuple(t.values)
            if key not in seen:
                seen.add(key)
                out.append({"config": t.user_attrs["config"], "objectives": dict(zip(self.objectives, t.values))})
        return out

    def _finish_tracking(self, study, base, tracker, status):
        best = self._best(study)
        metrics = {}
        with tempfile.TemporaryDirectory() as tmp:
            if best is not None:
                p = Path(tmp) / "best_config.yaml"
                p.write_text(yaml.safe_dump({"best_config": best.user_attrs["config"],
                                             "iteration_time_s": best.values[0],
                                             "baselines": {k: v["config"] for k, v in base.items()}}, sort_keys=False))
                tracker.log_artifact(str(p))
                metrics["best_iteration_time_s"] = best.values[0]
            try:
                from .report import breakdown_plot, convergence_plot
                values = [t.values[0] if t.state == optuna.trial.TrialState.COMPLETE and t.user_attrs.get("feasible")
                          else None for t in study.trials]
                p1 = Path(tmp) / "convergence.png"
                convergence_plot(values, p1, self.study_name,
                                 {k: v["iteration_time_s"] for k, v in base.items()})
                tracker.log_artifact(str(p1))
                if best is not None:
                    bd = {"best": best.user_attrs.get("breakdown", {})}
                    bd.update({k: v.get("breakdown", {}) for k, v in base.items() if v.get("breakdown")})
                    p2 = Path(tmp) / "breakdown.png"
                    breakdown_plot(bd, p2, self.study_name)
                    tracker.log_artifact(str(p2))
            except Exception as e:  # noqa: BLE001 - a plot must not lose the study
                tracker.errors.append(f"plots: {type(e).__name__}: {e}")
            for name in ("production", "sota"):
                b = base[name]["iteration_time_s"]
                if best is not None and b and math.isfinite(b):
                    metrics[f"speedup_vs_{name}"] = b / best.values[0] - 1.0
            tracker.log_study(metrics=metrics)
            tracker.flush(status)       # artifacts are uploaded before the temp dir goes

    def _summary(self, study, base, tracker, elapsed) -> dict:
        best = self._best(study)
        states = [t.state for t in study.trials]
        prod, sota = base["production"]["iteration_time_s"], base["sota"]["iteration_time_s"]
        bt = best.values[0] if best else math.nan

        def speedup(b):
            return b / bt - 1.0 if best and b and math.isfinite(b) else None
        return {
            "best_config": best.user_attrs["config"] if best else None,
            "best_iteration_time_s": bt if best else None,
            "best_breakdown": best.user_attrs.get("breakdown") if best else None,
            "production_iteration_time_s": prod if math.isfinite(prod) else None,
            "sota_iteration_time_s": sota if math.isfinite(sota) else None,
            "speedup_vs_production": speedup(prod), "speedup_vs_sota": speedup(sota),
            "n_trials": sum(s.is_finished() for s in states),
            "n_failed": sum(s == optuna.trial.TrialState.FAIL for s in states),
            "n_infeasible": sum(1 for t in study.trials if t.user_attrs.get("feasible") is False),
            "failures_by_kind": failure_kinds(study.trials),
            "mlflow_run_id": tracker.parent_id if tracker else None,
            "tracking_errors": tracker.errors if tracker else [],
            "study_name": self.study_name, "storage": mask_uri(self.storage_url),
            "strategy": self.strategy.name, "elapsed_s": elapsed, "objectives": list(self.objectives),
            **({"pareto_front": self._pareto(study)} if len(self.objectives) > 1 else {}),
        }


def run_study(model=None, cluster=None, scenario: Scenario | None = None, strategy: str = "tpe", trials: int = 100,
              storage: str | None = None, study_name: str | None = None, tracking_uri: str | None = None,
              seed: int = 0, backend: str = "costmodel", **kw) -> dict:
    """Run (or resume) a tuning study; returns the summary dict of ``autotune study --json``."""
    if scenario is None:
        from .specs.presets import build_scenario
        scenario = build_scenario(model=model, cluster=cluster, **{k: kw.pop(k) for k in list(kw)
                                                                    if k in ("gpus", "global_batch", "seq_len",
                                                                             "precision", "scenario_file", "overrides")})
    return StudyRunner(scenario, strategy=strategy, trials=trials, storage=storage, study_name=study_name,
                       tracking_uri=tracking_uri, seed=seed, backend=backend, **kw).run()


def load_study_scenario(storage: str, study_name: str) -> tuple[Scenario, dict]:
    """Scenario and attributes of an existing study (for workers joining it)."""
    st = _storage(storage)
    try:
        study = optuna.load_study(study_name=study_name, storage=st)
    except KeyError:
        raise UserInputError("--study-name", study_name, "the name of an existing study in that storage") from None
    attrs = study.user_attrs
    try:
        return Scenario.model_validate_json(attrs["scenario_json"]), attrs
    except pydantic.ValidationError as e:      # a stored scenario that no longer validates (or was tampered with)
        err = from_pydantic(e, prefix="scenario")
        raise UserInputError(f"--study-name {study_name} (its stored {err.field})", err.value, err.allowed) from None

"""Tuning studies: durable (Optuna storage is the source of truth), resumable by name, shared by
many workers, every trial tracked in MLflow.

One trial: the strategy proposes an encoded configuration (or lets the Optuna sampler choose),
the encoding decodes it to a legal configuration, the backend measures it, the study records it.
Out-of-memory configurations are feasibility constraints (samplers that take constraints) or
failed trials with their reason (the others); a failed measurement is a failed trial with its
reason. No fake large value ever enters the study.

What defines a study (StudySpec: scenario, strategy, objectives, infeasible handling, backend and
its options, tracking URI) is stored with it when it is created; a resume or a worker uses the
stored value of every such option it is not given, and refuses one given with another value.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import importlib.util
import math
import os
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
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
from .strategies.registry import NAMES as STRATEGY_NAMES
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


def default_tracking_uri() -> str:
    """MLflow's convention: MLFLOW_TRACKING_URI when set, else a SQLite file in the working folder."""
    return (os.environ.get("MLFLOW_TRACKING_URI") or "").strip() or DEFAULT_TRACKING_URI

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
    """``postgresql://`` means psycopg2 to SQLAlchemy; autotune's postgres extra ships psycopg 3."""
    if url.startswith(("postgresql", "postgres://")):
        from .extras import missing
        if missing("postgres") and importlib.util.find_spec("psycopg2") is None:
            from .extras import require
            require("postgres", "--storage", mask_uri(url))
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
    from .sqlitecheck import check_sqlite_url
    check_sqlite_url(url, "--storage")          # a missing folder, an empty or garbled file: one line, nothing opened
    url = _driver_url(url)
    try:
        return optuna.storages.RDBStorage(url, engine_kwargs={"pool_pre_ping": True},
                                          heartbeat_interval=None)
    except UserInputError:
        raise
    except Exception as e:  # noqa: BLE001 - unreachable or malformed database URL
        raise UserInputError("--storage", mask_uri(url), f"a reachable SQLAlchemy database URL ({type(e).__name__})") from None


TRIAL_FIGURES = ("mfu", "memory_per_gpu_bytes", "xb_bytes_per_step")
"""Measurement extras kept with each trial and logged to its MLflow child run (the cost model
reports all three; a real backend those it measures)."""

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


SPEC_ATTR = "spec"
"""The study user attribute that holds its StudySpec."""
SPEC_VERSION = 1
SCENARIO_OPTIONS = "--model/--cluster/--scenario/--set"


@dataclass(frozen=True)
class StudySpec:
    """What defines a study: written once, when the study is created, as the study user attribute
    ``spec``, and read back by every ``autotune worker`` and every resume, which use it for each
    option they are not given and refuse one they are given with another value (StudyConflict).

    Compact: the scenario by its key (its JSON is the ``scenario_json`` attribute, written beside it),
    options at their empty default left out. A secret (a password in the tracking URI, a
    secret-looking backend option) is stored masked and named in ``masked``: each process that
    needs it is given it again. Per process, not stored: trials, seed, storage URL, trial
    timeout, whether to track."""
    scenario_key: str
    strategy: str = "tpe"
    objectives: tuple = ("iteration_time_s",)
    infeasible: str = "fail"
    backend: str = "costmodel"
    backend_options: tuple = ()          # ((key, value), ...) sorted by key
    strategy_options: tuple = ()         # ((key, value), ...) sorted by key
    categorical_unordered: bool = True
    tracking_uri: str | None = None      # None: the default (sqlite:///mlflow.db)
    masked: tuple = ()                   # "tracking_uri", "backend_options.KEY": stored masked

    def to_attr(self) -> dict:
        d = {"v": SPEC_VERSION, "scenario_key": self.scenario_key, "strategy": self.strategy,
             "objectives": list(self.objectives), "infeasible": self.infeasible, "backend": self.backend}
        if self.backend_options:
            d["backend_options"] = dict(self.backend_options)
        if self.strategy_options:
            d["strategy_options"] = dict(self.strategy_options)
        if not self.categorical_unordered:
            d["categorical_unordered"] = False
        if self.tracking_uri is not None:
            d["tracking_uri"] = self.tracking_uri
        if self.masked:
            d["masked"] = list(self.masked)
        return d

    @classmethod
    def from_attr(cls, d, study_name: str = "") -> "StudySpec":
        def bad(why):
            return UserInputError(f"--study-name {study_name} (its stored {SPEC_ATTR})", "{...}" if isinstance(d, dict)
                                  else d, why)
        if not isinstance(d, dict):
            raise bad("a mapping written by autotune")
        if not isinstance(d.get("v"), int) or d["v"] > SPEC_VERSION:
            raise bad(f"a spec of version <= {SPEC_VERSION} (a newer autotune wrote it: upgrade)")
        try:
            spec = cls(scenario_key=str(d["scenario_key"]), strategy=str(d["strategy"]),
                       objectives=tuple(str(o) for o in d["objectives"]), infeasible=str(d["infeasible"]),
                       backend=str(d["backend"]),
                       backend_options=tuple(sorted(dict(d.get("backend_options") or {}).items())),
                       strategy_options=tuple(sorted(dict(d.get("strategy_options") or {}).items())),
                       categorical_unordered=bool(d.get("categorical_unordered", True)),
                       tracking_uri=None if d.get("tracking_uri") is None else str(d["tracking_uri"]),
                       masked=tuple(str(m) for m in d.get("masked") or ()))
        except (KeyError, TypeError, ValueError) as e:
            raise bad(f"a spec written by autotune ({type(e).__name__}: {e})") from None
        return spec

    def fields(self) -> dict:
        """What a worker or resume is checked against (all of it)."""
        return {"scenario_key": self.scenario_key, "strategy": self.strategy, "objectives": self.objectives,
                "infeasible": self.infeasible, "backend": self.backend, "categorical_unordered": self.categorical_unordered,
                "backend_options": dict(self.backend_options), "strategy_options": dict(self.strategy_options),
                "tracking_uri": self.tracking_uri, "masked": self.masked}


def stored_fields(attrs: dict, study_name: str) -> dict:
    """The options an existing study was created with: its StudySpec, or for a study written
    before the spec, what it kept then (scenario, strategy, objectives, backend); options it did
    not keep are taken as given (or at their default) and never refused."""
    if SPEC_ATTR in attrs:
        return StudySpec.from_attr(attrs[SPEC_ATTR], study_name).fields()
    out = {}
    if "scenario_key" in attrs:
        out["scenario_key"] = str(attrs["scenario_key"])
    if "strategy" in attrs:
        out["strategy"] = str(attrs["strategy"])
    if "objectives" in attrs:
        out["objectives"] = tuple(attrs["objectives"])
    if "backend" in attrs:
        out["backend"] = str(attrs["backend"])
    return out


class StudyConflict(UserInputError):
    """A worker or a resume given an option with another value than the stored study's: one line
    naming the option, the stored value and the given one (exit 2); nothing is written."""

    def __init__(self, option: str, what: str, study_name: str, stored: str, given: str, leave_out: str = ""):
        self.field, self.value, self.allowed = option, given, stored
        ValueError.__init__(self, f"{option}: study {study_name!r} was created with a different {what}: stored "
                                  f"{stored}, given {given}; leave {leave_out or option} out to use the stored one, "
                                  "or give another --study-name")


def _plain(v):
    """An option value as stored (JSON): str, number, bool or None as they are, anything else as text."""
    return v if v is None or isinstance(v, (str, int, float, bool)) else str(v)


def _stored_option(key: str, value) -> tuple[object, bool]:
    """(value as stored, whether a secret was masked): a secret-looking key, or a value holding a
    URI password or a secret-looking key=value, is never written to the study."""
    from .tracking import MASK, _secret_key, mask_text
    v = _plain(value)
    if v is None or isinstance(v, bool):
        return v, False
    if _secret_key(key):
        return MASK, True
    if isinstance(v, str):
        m = mask_text(v)
        if m != " ".join(v.split()):
            return m, True
    return v, False


def _check_options(stored: dict, given: dict, name: str, flag: str, what: str) -> None:
    """Every given option (strategy or backend) must equal the stored one; else one StudyConflict."""
    for k, v in given.items():
        s = stored.get(k)
        if k not in stored or not _same_value(_stored_option(k, v)[0], s):
            raise StudyConflict(flag.format(k), what.format(k), name,
                                "(not set)" if k not in stored else repr(s), repr(_stored_option(k, v)[0]))


def _same_value(a, b) -> bool:
    return a == b or str(a) == str(b)


def _describe_scenario(s: Scenario | None, key: str) -> str:
    if s is None:
        return f"scenario key {key}"
    return f"{s.model.name} x {s.cluster.name}, {s.n_gpus} GPUs (key {key})"


def check_objectives(objectives) -> tuple:
    objectives = tuple(objectives)
    bad = [o for o in objectives if o not in OBJECTIVES]
    if bad or not objectives or objectives[0] != "iteration_time_s" or len(set(objectives)) != len(objectives):
        raise UserInputError("--objectives", ",".join(objectives),
                             "iteration_time_s first, then optionally " + " and/or ".join(OBJECTIVES[1:]))
    return objectives


def _stored_scenario(attrs: dict, study_name: str) -> Scenario:
    try:
        return Scenario.model_validate_json(attrs["scenario_json"])
    except pydantic.ValidationError as e:      # a stored scenario that no longer validates (or was tampered with)
        err = from_pydantic(e, prefix="scenario")
        raise UserInputError(f"--study-name {study_name} (its stored {err.field})", err.value, err.allowed) from None


class StudyRunner:
    def __init__(self, scenario: Scenario | None = None, strategy: str | None = None, trials: int = 100,
                 storage: str | None = None, study_name: str | None = None, tracking_uri: str | None = None,
                 seed: int = 0, backend=None, backend_options: dict | None = None,
                 trial_timeout_s: float | None = None, track: bool = True, seed_baselines: bool = True,
                 strategy_options: dict | None = None, progress: bool = False, infeasible: str | None = None,
                 baselines: tuple = ("production", "sota"), known_baselines: dict | None = None,
                 objectives: tuple | None = None, categorical_unordered: bool | None = None, join: bool = False):
        """The options that define a study (scenario, strategy, objectives, infeasible, backend and
        its options, strategy options, categorical_unordered, tracking URI) left at None are not
        given: an existing study's stored value (its StudySpec) is used, else the default. A given
        one that differs from the stored study's is refused (StudyConflict) before anything is
        written. ``join``: the study must exist already (``autotune worker``)."""
        if trials is None or not 0 < trials <= 10_000_000:
            raise UserInputError("--trials", trials, "an integer from 1 to 10,000,000")
        if trial_timeout_s is not None and not (math.isfinite(trial_timeout_s) and trial_timeout_s > 0):
            raise UserInputError("--trial-timeout", trial_timeout_s, "a positive number of seconds")
        if not 0 <= int(seed) < 2**32:                 # the samplers' (numpy's) seed range
            raise UserInputError("--seed", seed, "an integer from 0 to 4294967295")
        self.trials, self.seed = int(trials), int(seed)
        for option, value in (("--storage", storage), ("--tracking-uri", tracking_uri)):
            if value is not None and not str(value).strip():
                raise UserInputError(option, value, "a non-empty URL (leave the option out for the default)")
        self.storage_url = storage or DEFAULT_STORAGE
        self.join = join
        self._st = None
        # given options that are wrong on their own come first
        if strategy is not None and strategy not in STRATEGY_NAMES:
            raise UserInputError("--strategy", strategy, "one of " + ", ".join(STRATEGY_NAMES))
        if objectives is not None:
            objectives = check_objectives(objectives)
        if infeasible is not None and infeasible not in INFEASIBLE_MODES:
            raise UserInputError("--infeasible", infeasible, " or ".join(INFEASIBLE_MODES))
        if scenario is None and not study_name:
            raise UserInputError("--study-name", study_name, "the name of an existing study when no scenario is given")
        self.study_name = study_name or \
            f"{scenario.model.name}-{scenario.cluster.name}-{strategy or StudySpec.strategy}-seed{seed}"
        # what the stored study says (read only: nothing is written before every check passed)
        self._attrs_at_start = attrs = self._stored_attrs()
        stored = stored_fields(attrs, self.study_name) if attrs is not None else {}
        if scenario is None:
            if attrs is None or "scenario_json" not in attrs:
                raise UserInputError("--model", None, "a model and cluster preset (--model, --cluster) or --scenario "
                                     f"FILE: study {self.study_name!r} is not in that storage to resume")
            scenario = _stored_scenario(attrs, self.study_name)
            given_key = None
        else:
            given_key = scenario.key
        self.scenario = scenario
        backend_name = backend if backend is None or isinstance(backend, str) else \
            getattr(backend, "name", type(backend).__name__)
        self._given = {"scenario_key": given_key, "strategy": strategy, "objectives": objectives,
                       "infeasible": infeasible, "backend": backend_name, "categorical_unordered": categorical_unordered,
                       "backend_options": dict(backend_options or {}), "strategy_options": dict(strategy_options or {})}
        self._check_against(stored, before_backend=True)
        spec = StudySpec(scenario_key=scenario.key)
        value = {k: self._given[k] if self._given[k] is not None else stored.get(k, getattr(spec, k))
                 for k in ("strategy", "objectives", "infeasible", "backend", "categorical_unordered")}
        # options of the strategy and backend: the stored ones (when it is the same strategy or
        # backend), each given one replacing its own
        masked = set(stored.get("masked", ()))
        s_opts = (stored.get("strategy_options", {}) if value["strategy"] == stored.get("strategy") else {}) \
            | self._given["strategy_options"]
        same_backend = value["backend"] == stored.get("backend")
        b_opts = (stored.get("backend_options", {}) if same_backend else {}) | self._given["backend_options"]
        for k in b_opts:
            if same_backend and f"backend_options.{k}" in masked and k not in self._given["backend_options"]:
                raise UserInputError(f"--backend-option {k}", "(not given)",
                                     f"the value study {self.study_name!r} was created with, "
                                     f"{stored['backend_options'][k]!r}: its secret is not stored with the study, "
                                     "so give it to every worker and resume")
        self.strategy = make_strategy(value["strategy"], **s_opts)
        self.backend = get_backend(value["backend"], **b_opts) if backend is None or isinstance(backend, str) \
            else backend
        self.backend_name = value["backend"]
        self._check_against(stored, before_backend=False)
        self.objectives, self.infeasible = tuple(value["objectives"]), value["infeasible"]
        # the tracking URI: the given one (this host may reach the same store by another address),
        # else the study's, else the default
        stored_uri = stored.get("tracking_uri")
        if tracking_uri is None and stored_uri is not None and "tracking_uri" in masked and track:
            raise UserInputError("--tracking-uri", "(not given)",
                                 f"the tracking URI study {self.study_name!r} was created with, {stored_uri}: its "
                                 "secret is not stored with the study, so give it to every worker and resume "
                                 "(or --no-tracking)")
        self.tracking_uri = tracking_uri or (stored_uri if "tracking_uri" not in masked else None) \
            or default_tracking_uri()
        # what a new study stores: secrets masked
        stored_b, stored_s, new_masked = [], [], []
        for k, v in sorted(b_opts.items()):
            sv, m = _stored_option(k, v)
            stored_b.append((k, sv))
            if m:
                new_masked.append(f"backend_options.{k}")
        for k, v in sorted(s_opts.items()):
            stored_s.append((k, _stored_option(k, v)[0]))
        uri = tracking_uri if tracking_uri is not None else stored_uri
        if uri is not None and mask_uri(uri) != uri:
            uri = mask_uri(uri)
            new_masked.append("tracking_uri")
        self.spec = StudySpec(scenario_key=scenario.key, strategy=self.strategy.name, objectives=self.objectives,
                              infeasible=self.infeasible, backend=self.backend_name,
                              backend_options=tuple(stored_b), strategy_options=tuple(stored_s),
                              categorical_unordered=bool(value["categorical_unordered"]), tracking_uri=uri,
                              masked=tuple(new_masked))
        self.trial_timeout_s = trial_timeout_s
        self.track = track
        if track:
            from .extras import require
            require("tracking", "--tracking-uri", mask_uri(self.tracking_uri), "--no-tracking")
        self.seed_baselines = seed_baselines
        self.progress = progress
        self.space = SearchSpace(scenario).require_legal()
        self.encoding = FlatEncoding(self.space)
        self.distributions = distributions_for(self.encoding, self.strategy.sampler_name,
                                               self.spec.categorical_unordered)
        self.hbm_bytes = min(b.gpu.hbm_bytes for b in scenario.cluster.buildings)
        self.baseline_names = tuple(baselines)
        self.known_baselines = known_baselines

    # ------------------------------------------------------------------ setup
    def _storage(self):
        if self._st is None:
            self._st = _storage(self.storage_url)
        return self._st

    def _stored_attrs(self) -> dict | None:
        """The stored study's user attributes; None when there is no such study (a worker's study
        must exist). Read only; a SQLite file that does not exist yet is not created here."""
        url = self.storage_url
        if url.startswith("sqlite:///") and url != "sqlite:///:memory:" and not Path(url[len("sqlite:///"):]).exists():
            if not self.join:
                return None
            if Path(url[len("sqlite:///"):]).parent.exists():     # (a missing folder: --storage, below)
                raise UserInputError("--study-name", self.study_name, "the name of an existing study in that storage")
        st = self._storage()
        try:
            return st.get_study_user_attrs(st.get_study_id_from_name(self.study_name))
        except KeyError:
            if self.join:
                raise UserInputError("--study-name", self.study_name,
                                     "the name of an existing study in that storage") from None
            return None
        except Exception as e:  # noqa: BLE001
            raise UserInputError("--storage", mask_uri(self.storage_url),
                                 f"a reachable database ({type(e).__name__})") from None

    def _stored_scenario_or_none(self):
        """The stored study's scenario, to show in a conflict (None if it cannot be read)."""
        try:
            attrs = self._attrs_at_start or {}
            return Scenario.model_validate_json(attrs["scenario_json"])
        except (KeyError, TypeError, pydantic.ValidationError):
            return None

    def _check_against(self, stored: dict, before_backend: bool) -> None:
        """Refuse a given option that differs from the stored study's (StudyConflict). In two
        steps: the backend and its options after the backend was built from what was given (a
        given option that is wrong on its own is reported as such first)."""
        given, name = self._given, self.study_name

        def differs(k):
            return given[k] is not None and k in stored and not _same_value(given[k], stored[k])
        if before_backend:
            if differs("scenario_key"):
                raise StudyConflict(SCENARIO_OPTIONS, "scenario", name,
                                    _describe_scenario(self._stored_scenario_or_none(), stored["scenario_key"]),
                                    _describe_scenario(self.scenario, given["scenario_key"]),
                                    leave_out="the scenario options")
            if differs("strategy"):
                raise StudyConflict("--strategy", "strategy", name, repr(stored["strategy"]), repr(given["strategy"]))
            if differs("objectives"):
                raise StudyConflict("--objectives", "set of objectives", name, repr(",".join(stored["objectives"])),
                                    repr(",".join(given["objectives"])))
            if differs("infeasible"):
                raise StudyConflict("--infeasible", "infeasible mode", name, repr(stored["infeasible"]),
                                    repr(given["infeasible"]))
            if differs("categorical_unordered"):
                raise StudyConflict("categorical_unordered", "encoding of unordered knobs", name,
                                    repr(stored["categorical_unordered"]), repr(given["categorical_unordered"]))
            if "strategy_options" in stored:
                _check_options(stored["strategy_options"], given["strategy_options"], name,
                               "strategy option {}", "strategy option {!r}")
            return
        if differs("backend"):
            raise StudyConflict("--backend", "backend", name, repr(stored["backend"]), repr(given["backend"]))
        if "backend_options" in stored and self.backend_name == stored.get("backend"):
            _check_options(stored["backend_options"], given["backend_options"], name,
                           "--backend-option {}", "backend option {!r}")

    def _open_study(self) -> optuna.Study:
        storage = self._storage()
        sampler = make_sampler(self.strategy.sampler_name, self.seed)
        try:
            if self.join:
                study = optuna.load_study(study_name=self.study_name, storage=storage, sampler=sampler)
            else:
                study = optuna.create_study(study_name=self.study_name, storage=storage, sampler=sampler,
                                            directions=["minimize"] * len(self.objectives), load_if_exists=True)
        except KeyError:
            raise UserInputError("--study-name", self.study_name, "the name of an existing study in that storage") \
                from None
        except Exception as e:  # noqa: BLE001
            raise UserInputError("--storage", mask_uri(self.storage_url), f"a reachable database ({type(e).__name__})") from None
        attrs = study.user_attrs
        if self._attrs_at_start is None and attrs:
            # created meanwhile by another process: checked as if it had been there
            stored = stored_fields(attrs, self.study_name)
            self._check_against(stored, before_backend=True)
            self._check_against(stored, before_backend=False)
        if "scenario_key" not in attrs:
            if SPEC_ATTR not in attrs:
                study.set_user_attr(SPEC_ATTR, self.spec.to_attr())
            study.set_user_attr("scenario_key", self.scenario.key)
            study.set_user_attr("scenario_json", self.scenario.model_dump_json())
            study.set_user_attr("strategy", self.strategy.name)
            study.set_user_attr("seed", self.seed)
            study.set_user_attr("backend", self.backend_name)
            study.set_user_attr("objectives", list(self.objectives))
            import warnings
            with warnings.catch_warnings():          # set_metric_names is marked experimental in Optuna 4
                warnings.simplefilter("ignore")
                study.set_metric_names(list(self.objectives))   # Optuna's views name the objective
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
    def _say(self, text: str) -> None:
        """A phase line on stderr while progress is shown (the silent seconds before the first trial)."""
        if self.progress:
            import sys
            print(f"{self.study_name}: {text}", file=sys.stderr, flush=True)

    def run(self) -> dict:
        """Run or resume the study (``_run``); stored data that cannot be read back (a truncated or
        garbled file that SQLite's quick check let through) is one line naming the file, exit 3."""
        import json

        from .errors import StorageCorrupt
        from .sqlitecheck import sqlite_path
        try:
            return self._run()
        except (json.JSONDecodeError, sqlalchemy.exc.DatabaseError) as e:
            where = sqlite_path(self.storage_url) or mask_uri(self.storage_url)
            raise StorageCorrupt("--storage", str(where), f"its stored study cannot be read back ({type(e).__name__}); "
                                 "restore it from a backup") from None

    def _run(self) -> dict:
        t0 = time.perf_counter()
        tracker = None
        if self.track:      # before the study is written: an unreachable tracking store leaves no study behind
            self._say(f"connecting to MLflow at {mask_uri(self.tracking_uri)}")
            tracker = Tracker(self.tracking_uri, self.study_name, self.storage_url,
                              tags={"autotune.strategy": self.strategy.name, "autotune.scenario_key": self.scenario.key})
        self._say(f"opening the study in {mask_uri(self.storage_url)}")
        try:
            study = self._open_study()
        except BaseException:
            if tracker is not None:
                tracker.flush("FAILED")
            raise
        # a trial this worker fails as orphaned is this worker's to log: its runner, if it was in
        # fact alive but slow to record its owner, finds it told by another and logs nothing
        orphaned = set(fail_orphaned_trials(study))
        # interrupted trials are failed but do not use up the budget: the resumed study still
        # reaches the number of finished trials it was asked for
        n_interrupted = sum(map(_interrupted, study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,))))
        if "baselines" not in study.user_attrs and self.known_baselines is None:
            self._say(f"measuring the baselines ({', '.join(self.baseline_names)}; sota searches the "
                      f"network-oblivious space of {self.space.legal_count():,} configurations) with {self.backend_name}")
        base = self._baselines(study)
        self._say(f"starting {self.strategy.name}: {len(study.trials)} trials stored, {self.trials} wanted")
        self.strategy.study = study      # its progress is the study's (a resume or worker continues it)
        self.strategy.bind(self.space, self.encoding, self.seed + len(study.trials))
        if tracker is not None:
            tracker.log_study(params={"model": self.scenario.model.name, "cluster": self.scenario.cluster.name,
                                      "gpus": self.scenario.n_gpus, "strategy": self.strategy.name,
                                      "seed": self.seed, "backend": self.backend_name,
                                      "global_batch_seqs": self.scenario.global_batch_seqs,
                                      "scenario_key": self.scenario.key,
                                      "network": " | ".join(self.scenario.network_lines())})
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
        figures = {k: float(m.extra[k]) for k in TRIAL_FIGURES
                   if isinstance(m.extra.get(k), (int, float)) and math.isfinite(float(m.extra[k]))}
        if figures:
            call(trial.set_user_attr, "figures", figures)
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
            if feasible:
                metrics["tokens_per_s"] = self.scenario.global_batch_seqs * self.scenario.seq_len / value
        for k, v in (t.user_attrs.get("breakdown") or {}).items():
            metrics[k] = v
        metrics.update(t.user_attrs.get("figures") or {})
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

    def _top(self, study, k: int = 10) -> list[dict]:
        """The k fastest distinct feasible configurations (first objective), fastest first."""
        seen, out = set(), []
        for t in sorted(self._feasible(study), key=lambda t: t.values[0]):
            key = tuple(sorted(t.user_attrs["config"].items()))
            if key not in seen:
                seen.add(key)
                out.append({"config": t.user_attrs["config"], "iteration_time_s": t.values[0], "trial": t.number})
            if len(out) == k:
                break
        return out

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
            p0 = Path(tmp) / "scenario.yaml"     # the effective scenario, every preset, file and --set applied
            p0.write_text(yaml.safe_dump(self.scenario.model_dump(mode="json"), sort_keys=False))
            tracker.log_artifact(str(p0))
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
            "top": self._top(study),
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


def run_study(model=None, cluster=None, scenario: Scenario | None = None, strategy: str | None = None,
              trials: int = 100, storage: str | None = None, study_name: str | None = None,
              tracking_uri: str | None = None, seed: int = 0, backend: str | None = None, **kw) -> dict:
    """Run (or resume) a tuning study; returns the summary dict of ``autotune study --json``. An
    option left out (None) is the stored study's when it resumes one (StudyRunner), else the
    default (strategy tpe, backend costmodel); with neither a scenario nor a model, the stored one."""
    scenario_kw = {k: kw.pop(k) for k in list(kw)
                   if k in ("gpus", "global_batch", "seq_len", "precision", "scenario_file", "overrides")}
    if scenario is None and (model is not None or cluster is not None or any(scenario_kw.values()) or not study_name):
        from .specs.presets import build_scenario
        scenario = build_scenario(model=model, cluster=cluster, **scenario_kw)
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
    return _stored_scenario(attrs, study_name), attrs

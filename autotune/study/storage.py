"""The study's Optuna storage: opening it, reading a study's stored attributes without writing,
retrying a lost connection, and creating a trial with a strategy's proposal in one write."""
from __future__ import annotations

import time
import warnings

import optuna
import sqlalchemy.exc

from ..errors import ServiceUnavailable, UserInputError
from ..masking import mask_uri
from ..trials import RUNNING
from .spec import SCENARIO_BLOB

DEFAULT_STORAGE = "sqlite:///autotune.db"
HEARTBEAT_INTERVAL_s = 10
"""Optuna's heartbeat (RDBStorage ``heartbeat_interval``): each running trial's worker writes a
heartbeat this often, on every host."""
HEARTBEAT_GRACE_s = 60
"""Optuna's ``grace_period``: a running trial without a heartbeat for this long belongs to a worker
that died (on any host) and is failed as interrupted by the next worker or resume."""
STORAGE_RETRIES = 4
STORAGE_BACKOFF_s = 0.5
"""A lost storage connection is retried 4 times, waiting 0.5, 1, 2 and 4 s."""
STORAGE_ERRORS = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError,
                  optuna.exceptions.StorageInternalError, optuna.exceptions.UpdateFinishedTrialError)
SCHEMA_RACE_WORDS = ("unique constraint", "duplicate key", "already exists", "database is locked")
"""What the database says when two processes create a new database's tables and version row at
once (RDBStorage's ``create_all`` + ``init_version_info_model``); the loser opens again and finds
the schema in place. Any other error (a host that does not answer, a bad password) is reported
at once."""
TOLD_BY_ANOTHER = object()
"""What a ``tell`` returns when another worker had already finished the same trial."""

optuna.logging.set_verbosity(optuna.logging.ERROR)   # storage errors are reported by autotune, in one line
# the heartbeat is recorded by autotune's own loop (liveness.heartbeat), not by Study.optimize
warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used with Study.optimize")


def open_storage(url: str):
    """An Optuna storage for ``url`` (``memory`` for an in-process one), with Optuna's heartbeat on."""
    if url == "memory":
        return optuna.storages.InMemoryStorage()
    from ..dburl import driver_url, engine_kwargs
    from ..sqlitecheck import check_sqlite_url
    check_sqlite_url(url, "--storage")          # a missing folder, an empty or garbled file: one line, nothing opened
    url = driver_url(url)
    for attempt in range(STORAGE_RETRIES + 1):
        try:
            with warnings.catch_warnings():          # the heartbeat arguments are marked experimental
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs(url),
                                                  heartbeat_interval=HEARTBEAT_INTERVAL_s,
                                                  grace_period=HEARTBEAT_GRACE_s)
        except UserInputError:
            raise
        except (sqlalchemy.exc.DBAPIError, optuna.exceptions.StorageInternalError) as e:
            # Optuna re-raises a failed schema session as StorageInternalError, the database's words in its cause
            said = f"{e} {e.__cause__ or ''}".lower()
            if not any(w in said for w in SCHEMA_RACE_WORDS):
                raise UserInputError("--storage", mask_uri(url),
                                     f"a reachable SQLAlchemy database URL ({type(e).__name__})") from None
            # another process (a parallel worker, a monitor reading the study) created the schema
            # in the same moment: its version row wins, ours is a duplicate; open again
            if attempt == STORAGE_RETRIES:
                raise UserInputError("--storage", mask_uri(url), "a database no other process keeps locked "
                                     f"(schema creation failed {attempt + 1} times)") from None
            time.sleep(STORAGE_BACKOFF_s * 2 ** attempt)
        except Exception as e:  # noqa: BLE001 - unreachable or malformed database URL
            raise UserInputError("--storage", mask_uri(url),
                                 f"a reachable SQLAlchemy database URL ({type(e).__name__})") from None


def stored_attrs(storage, study_name: str) -> dict | None:
    """A study's user attributes, with its stored scenario JSON as ``scenario_json``; None when the
    storage holds no such study. Read only."""
    try:
        sid = storage.get_study_id_from_name(study_name)
    except KeyError:
        return None
    attrs = dict(storage.get_study_user_attrs(sid))
    blob = storage.get_study_system_attrs(sid).get(SCENARIO_BLOB)
    if blob is not None:
        attrs["scenario_json"] = blob
    return attrs


class StorageCalls:
    """Storage calls of one study run: a lost connection is retried STORAGE_RETRIES times with
    doubling waits, then the run stops with ServiceUnavailable (nothing committed is lost)."""

    def __init__(self, storage_url: str, study_name: str):
        self.storage_url, self.study_name = storage_url, study_name

    def __call__(self, fn, *args, **kwargs):
        for attempt in range(STORAGE_RETRIES + 1):
            try:
                with warnings.catch_warnings():   # (the heartbeat warning of ask, see above)
                    warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")
                    return fn(*args, **kwargs)
            except ValueError as e:
                if fn.__name__ == "tell" and "Cannot tell" in str(e):
                    # attempt > 0: our first attempt went through before its error. attempt 0:
                    # another worker popped the same trial a user enqueued (SQLite has no row
                    # locks) and finished it first; it records and logs it, we do not count it twice
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
                time.sleep(STORAGE_BACKOFF_s * 2 ** attempt)


def create_running_trial(study, params: dict, distributions: dict, user_attrs: dict) -> optuna.Trial:
    """A RUNNING trial holding ``params`` (a strategy's proposal) and its user attributes, created in
    one storage write: unlike ``enqueue_trial`` + ``ask``, no other worker can pop it, so no lock
    file is needed beside a SQLite database, and the sampler is not asked for a proposal it would
    throw away."""
    template = optuna.trial.create_trial(state=RUNNING, params=params, distributions=distributions,
                                         user_attrs=user_attrs)
    return optuna.Trial(study, study._storage.create_new_trial(study._study_id, template_trial=template))

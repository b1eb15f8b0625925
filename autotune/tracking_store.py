"""Opening an MLflow tracking store safely (issue 17): fail fast on a store that cannot work, create
a SQLite store's schema under a lock, set aside a schema a kill left half-made, and turn any
failure to open into one masked line. ``tracking.Tracker`` calls these before it logs anything."""
from __future__ import annotations

import contextlib
import logging
import time

from .errors import UserInputError
from .masking import _DB_SCHEMES, mask_uri

DB_CONNECT_TIMEOUT_s = 5
"""How long a tracking database may take to accept a connection before the URI is refused."""


def tracking_option(uri: str) -> str:
    """The option to name in an error about ``uri``: the environment variable where it came from there."""
    import os
    return "--tracking-uri ($MLFLOW_TRACKING_URI)" if (os.environ.get("MLFLOW_TRACKING_URI") or "").strip() == uri \
        else "--tracking-uri"


def probe_tracking_db(uri: str) -> None:
    """Fail fast, in one line, where MLflow would hang or print a traceback: a SQLite file that is
    a folder, in a missing folder, or not a healthy database (sqlitecheck), and a database server
    that does not accept a connection within DB_CONNECT_TIMEOUT_s (MLflow retries for minutes)."""
    from .sqlitecheck import check_sqlite_url
    check_sqlite_url(uri, tracking_option(uri), empty_ok=True)
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme not in _DB_SCHEMES or scheme == "sqlite":
        return
    import sqlalchemy

    from .dburl import driver_url
    try:
        args = {"connect_timeout": DB_CONNECT_TIMEOUT_s} if scheme in ("postgresql", "postgres", "mysql") else {}
        engine = sqlalchemy.create_engine(driver_url(uri), connect_args=args)
        try:
            with engine.connect():
                pass
        finally:
            engine.dispose()
    except Exception as e:  # noqa: BLE001 - unreachable, refused, unknown driver, bad credentials
        raise UserInputError(tracking_option(uri), mask_uri(uri), f"a reachable MLflow database ({type(e).__name__})") \
            from None


def lock_path(path) -> str:
    """The lock file for a database file: in the temporary folder, named by a hash of the file's
    real path (never a stray file beside the user's database). Processes that share a SQLite
    file share a host, hence a temporary folder."""
    import hashlib
    import os
    import tempfile
    digest = hashlib.sha256(os.path.realpath(path).encode()).hexdigest()[:24]
    return os.path.join(tempfile.gettempdir(), f"autotune-{digest}.lock")


@contextlib.contextmanager
def schema_lock(uri: str):
    """Hold an exclusive lock (``lock_path``) on a SQLite tracking database while MLflow opens it: the first
    open creates and migrates the schema, and two commands doing that at once on a fresh file made
    one of them fail (issue 17 item 3). The lock dies with its process, so a kill never leaves it
    held; MLflow resumes its own migrations on the next open. Other stores need no lock."""
    from .sqlitecheck import sqlite_path
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    import fcntl
    with open(lock_path(path), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            _set_aside_interrupted_schema(path)
            from .dburl import use_wal
            use_wal(uri)            # MLflow's own engine then writes in WAL mode too
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _set_aside_interrupted_schema(path) -> None:
    """A kill while MLflow creates or migrates a SQLite database's schema (alembic's batch copies of
    tables, ``_alembic_tmp_*``, or a revision short of MLflow's head) made every later open fail for
    good (issue 17 item 3). Called with the schema lock held, so no other process is migrating it:
    a database that holds no run yet is moved aside (kept, renamed ``*.interrupted-<time>``) for
    MLflow to create afresh; one that holds runs is one line naming the file and the repair."""
    import os
    import sqlite3

    from .errors import StorageCorrupt
    if not path.exists() or path.stat().st_size == 0:
        return
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return
        rev = con.execute("SELECT version_num FROM alembic_version").fetchall() if "alembic_version" in tables else []
        runs = con.execute("SELECT count(*) FROM runs").fetchone()[0] if "runs" in tables else 0
    finally:
        con.close()
    from mlflow.store.db.utils import _get_latest_schema_revision
    interrupted = any(t.startswith("_alembic_tmp_") for t in tables)
    if not interrupted and rev == [(_get_latest_schema_revision(),)]:
        return
    if runs:
        raise StorageCorrupt("--tracking-uri", str(path), "MLflow's schema in it is incomplete (an upgrade was interrupted, "
                             f"revision {rev[0][0] if rev else 'none'}): back it up, drop its _alembic_tmp_* tables "
                             f"and run `mlflow db upgrade sqlite:///{path}`")
    aside = path.with_name(f"{path.name}.interrupted-{int(time.time())}")
    for suffix in ("", "-wal", "-shm"):
        src = path.with_name(path.name + suffix)
        if src.exists():
            os.replace(src, aside.with_name(aside.name + suffix))
    logging.getLogger(__name__).warning("tracking database %s held a half-made MLflow schema and no run: moved "
                                        "to %s, a new one is created", path, aside)


@contextlib.contextmanager
def one_line_errors(uri: str):
    """Any failure to open the tracking store as one masked line (MLflow repeats the URI, password
    included, in its own messages)."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - any failure to reach the tracking store
        raise UserInputError(tracking_option(uri), mask_uri(uri),
                             f"a reachable MLflow tracking store ({type(e).__name__})") from None


def experiment_id(client, name: str) -> str:
    """The experiment's id, creating it if needed; another process creating it at the same moment
    (a server store, where no lock serialises the two) is not an error."""
    exp = client.get_experiment_by_name(name)
    if exp is not None:
        return exp.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # noqa: BLE001 - lost the race: the other process's experiment is the one
        exp = client.get_experiment_by_name(name)
        if exp is None:
            raise
        return exp.experiment_id

"""Database URLs as autotune opens them: the driver behind ``postgresql://`` and SQLite connection
settings, applied to autotune's own engines only (never a listener on SQLAlchemy's global
``Engine`` class, which would switch a user's unrelated SQLite database in the same process)."""
from __future__ import annotations

import importlib.util
import sqlite3

from .sqlitecheck import sqlite_path

SQLITE_BUSY_TIMEOUT_ms = 30_000
"""How long a SQLite connection waits for another writer's lock before it fails."""


def driver_url(url: str) -> str:
    """``postgresql://`` means psycopg2 to SQLAlchemy; autotune's postgres extra ships psycopg 3."""
    if url.startswith(("postgresql", "postgres://")):
        from .extras import missing
        if missing("postgres") and importlib.util.find_spec("psycopg2") is None:
            from .extras import require
            from .masking import mask_uri
            require("postgres", "--storage", mask_uri(url))
    if url.startswith(("postgresql://", "postgres://")):
        if importlib.util.find_spec("psycopg2") is None:
            return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def tuned_sqlite_connection(path: str) -> sqlite3.Connection:
    """A SQLite connection in WAL mode with synchronous=NORMAL: one fsync per checkpoint instead of
    per commit (sqlite.org/wal.html). A committed trial survives a crash or SIGKILL of the process;
    only an OS crash or power loss can drop the last commits. Optuna writes each parameter in its
    own transaction, so this is the difference between ~3 ms and ~0.1 ms per write."""
    con = sqlite3.connect(path, timeout=SQLITE_BUSY_TIMEOUT_ms / 1000, check_same_thread=False)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    con.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_ms}")
    return con


def engine_kwargs(url: str) -> dict:
    """SQLAlchemy ``create_engine`` keyword arguments for one of autotune's engines: a SQLite file
    gets tuned connections through its own ``creator``; other databases a liveness ping."""
    path = sqlite_path(url)
    if path is None:
        return {"pool_pre_ping": True}
    return {"creator": lambda: tuned_sqlite_connection(str(path))}


def use_wal(url: str) -> None:
    """Switch a SQLite file that another library opens (MLflow's store) to WAL. The journal mode is
    stored in the file, so every later connection, whoever makes it, uses it."""
    path = sqlite_path(url)
    if path is not None:
        con = sqlite3.connect(str(path), timeout=SQLITE_BUSY_TIMEOUT_ms / 1000)
        try:
            con.execute("PRAGMA journal_mode=WAL")
        finally:
            con.close()

"""Health of a SQLite file before Optuna or MLflow opens it (issue 17, items 3 and 7).

An empty file would silently become a new, empty database (a truncated study started over), and a
garbled one gives a 100-line traceback deep inside SQLAlchemy or a long hang. ``check_sqlite_url``
answers in milliseconds, reading the file only: a missing folder or a folder where the file should
be is a UserInputError (exit 2); an empty file, a file that is not SQLite, or one that fails
``PRAGMA quick_check`` is a StorageCorrupt (exit 3) naming the file and what to do."""
from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from .errors import StorageCorrupt, UserInputError

SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite 3 database file (sqlite.org/fileformat.html, 1.3)."""

EMPTY_GRACE_S = 2.0
"""How long an empty file may stay empty before it is called truncated: SQLite creates the file on
connect and writes its header with the first schema transaction, so a second worker (or a monitor)
starting at the same moment can see 0 bytes for some milliseconds."""

EMPTY_POLL_S = 0.05
"""Interval between reads of an empty file during the grace period."""


def sqlite_path(url: str) -> Path | None:
    """The file of a ``sqlite:///path`` URL (query string dropped); None for other URLs and for
    in-memory databases."""
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///"):].split("?", 1)[0]
    if path in ("", ":memory:"):
        return None
    return Path(path)


def check_sqlite_url(url: str, option: str, empty_ok: bool = False) -> None:
    """Raise before anything opens the database when its file cannot be a healthy one.
    ``empty_ok``: an empty file is a new database (MLflow creates its schema in it)."""
    path = sqlite_path(url)
    if path is None:
        return
    from .masking import mask_uri
    url = mask_uri(url)
    if path.is_dir():
        raise UserInputError(option, url, "a SQLite file path (this is a folder)")
    if not path.parent.is_dir():
        raise UserInputError(option, url, "a SQLite path in an existing folder")
    if not path.exists():
        return
    head = _head(path, option, url)
    if not head:
        if empty_ok:
            return
        deadline = time.monotonic() + EMPTY_GRACE_S
        while not head and time.monotonic() < deadline:   # another process may be creating it now
            time.sleep(EMPTY_POLL_S)
            head = _head(path, option, url)
    if not head:
        raise StorageCorrupt(option, str(path), "the file is empty (0 bytes; truncated?), so it holds no study; "
                             "restore it from a backup, or delete it to start a new study")
    if head != SQLITE_HEADER:
        raise StorageCorrupt(option, str(path), "not a SQLite database (its first bytes are not SQLite's header); "
                             "point at the right file, or move this one away")
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            rows = con.execute("PRAGMA quick_check").fetchall()
        finally:
            con.close()
    except sqlite3.Error as e:
        if "locked" in str(e).lower():           # a live writer holds it: not a corruption
            return
        raise StorageCorrupt(option, str(path), f"SQLite cannot read it ({type(e).__name__}: {_flat(e)}); "
                             "restore it from a backup") from None
    if rows != [("ok",)]:
        raise StorageCorrupt(option, str(path), f"corrupted (PRAGMA quick_check: {_flat(rows[0][0])}); "
                             "restore it from a backup")


def _head(path: Path, option: str, url: str) -> bytes:
    """The first bytes of the file (as many as SQLite's header)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER))
    except OSError as e:
        raise UserInputError(option, url, f"a readable SQLite file ({e.strerror})") from None


def _flat(text, n: int = 100) -> str:
    """SQLite's multi-line diagnostics on one short line."""
    return " ".join(str(text).split())[:n]

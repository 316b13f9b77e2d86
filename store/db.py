"""Opening the DuckDB store: one file, one writing process at a time (DuckDB's rule).

A command holds the file only for the length of one transaction, so the CLI works while the app is up and the
app keeps working while a long `rlhf sample` runs. Opening retries briefly on the lock, then fails with one line
naming the holder, never a hang and never a raw lock traceback.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

import duckdb

from store.errors import StoreBusy, StoreError

DEFAULT_DB = "rlhf.duckdb"
LOCK_TIMEOUT_S = float(os.environ.get("RLHF_LOCK_TIMEOUT", "10"))


def default_db_path() -> str:
    return os.environ.get("RLHF_DB", DEFAULT_DB)


def _schema_sql() -> str:
    return resources.files("store").joinpath("schema.sql").read_text()


def migrations(folder: Path | None = None) -> list[tuple[int, str]]:
    """Numbered migrations `NNNN_name.sql` after schema version 1, in order, as (version, sql)."""
    folder = folder or Path(str(resources.files("store").joinpath("migrations")))
    found = []
    for path in sorted(folder.glob("*.sql")):
        m = re.match(r"(\d+)_", path.name)
        if not m:
            raise StoreError(f"migration file {path.name} does not start with a version number")
        found.append((int(m.group(1)), path.read_text()))
    return found


def latest_version(folder: Path | None = None) -> int:
    return max([1] + [v for v, _ in migrations(folder)])


def schema_version(con: duckdb.DuckDBPyConnection) -> int:
    """0 for an empty database."""
    has = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'").fetchone()[
        0
    ]
    if not has:
        return 0
    return con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]


def migrate(con: duckdb.DuckDBPyConnection, folder: Path | None = None) -> tuple[int, int]:
    """Bring the schema to the latest version in one transaction; returns (version before, version after)."""
    before = schema_version(con)
    todo = migrations(folder)
    after = max([before, 1] + [v for v, _ in todo])
    if before == after:
        return before, after
    con.execute("BEGIN TRANSACTION")
    try:
        if before == 0:
            con.execute(_schema_sql())
            con.execute("INSERT INTO schema_version (version) VALUES (1)")
        for version, sql in todo:
            if version > max(before, 1):
                con.execute(sql)
                con.execute("INSERT INTO schema_version (version) VALUES (?)", [version])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return before, after


def open_connection(path: str, timeout: float = LOCK_TIMEOUT_S) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        try:
            return duckdb.connect(path)
        except duckdb.IOException as e:
            if "lock" not in str(e).lower():
                raise StoreError(f"cannot open store {path}: {str(e).splitlines()[0]}") from None
            if time.monotonic() >= deadline:
                holder = re.search(r"\(PID (\d+)\)", str(e))
                who = f" (process {holder.group(1)})" if holder else ""
                raise StoreBusy(
                    f"store {path} is in use by another process{who}; tried for {timeout:.0f} s. "
                    "Stop that process or wait for it to finish."
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.25)
        except duckdb.Error as e:
            raise StoreError(f"cannot open store {path}: {str(e).splitlines()[0]}") from None


@contextmanager
def connect(path: str | os.PathLike, *, create: bool = True, timeout: float = LOCK_TIMEOUT_S) -> Iterator:
    """A connection to an up-to-date store, closed (and the file released) on exit.

    create=False refuses a missing file instead of making an empty store (read-only commands use it)."""
    path = str(path)
    if not create and path != ":memory:" and not Path(path).exists():
        raise StoreError(f"no store at {path}: run `rlhf init` (or pass --db)")
    con = open_connection(path, timeout)
    try:
        migrate(con)
        yield con
    finally:
        con.close()


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """All of it lands or none of it does."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


_write_locks: dict[str, threading.Lock] = {}
_write_locks_guard = threading.Lock()


def _write_lock(path: str) -> threading.Lock:
    key = os.path.abspath(path)
    with _write_locks_guard:
        return _write_locks.setdefault(key, threading.Lock())


@contextmanager
def write(path: str | os.PathLike, *, timeout: float = LOCK_TIMEOUT_S) -> Iterator:
    """Open, run one transaction, close: the usual shape of every write.

    Writers in one process (the app's sessions) take turns: DuckDB would otherwise abort one of two concurrent
    transactions that touch the same rows (say, two imports adding the same prompt)."""
    with _write_lock(str(path)), connect(path, timeout=timeout) as con, transaction(con):
        yield con

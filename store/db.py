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

from store.errors import StoreBusy, UserError

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
            raise UserError(f"migration file {path.name} does not start with a version number")
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


def schema_scripts(folder: Path | None = None) -> list[tuple[int, str]]:
    """(version, sql) of every schema step: schema.sql is version 1, then the migrations."""
    return [(1, _schema_sql()), *migrations(folder)]


def migrate(con: duckdb.DuckDBPyConnection, folder: Path | None = None, upto: int | None = None) -> tuple[int, int]:
    """Bring the schema to the latest version (or `upto`) in one transaction; returns (version before, after)."""
    before = schema_version(con)
    todo = [(v, sql) for v, sql in schema_scripts(folder) if v > before and (upto is None or v <= upto)]
    after = max([before] + [v for v, _ in todo])
    if not todo:
        return before, after
    con.execute("BEGIN TRANSACTION")
    try:
        for version, sql in todo:
            con.execute(sql)
            con.execute("INSERT INTO schema_version (version) VALUES (?)", [version])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return before, after


def sql_string(value: str | os.PathLike) -> str:
    """A file path as a quoted SQL string literal, for the statements that take no parameters (COPY ... TO,
    EXPORT DATABASE): the only values the store's SQL ever formats in. The path is the user's own (a --out
    folder, a run folder); quotes are doubled, so it cannot end the literal."""
    return "'" + str(value).replace("'", "''") + "'"


def _handoff_file(path: str) -> Path:
    return Path(path + ".handoff")


def open_connection(path: str, timeout: float = LOCK_TIMEOUT_S, ask: bool = True) -> duckdb.DuckDBPyConnection:
    """Open the file, retrying while another process holds it. A process that keeps the store open (the app,
    see `hold`) is asked to let go through a handoff file next to the store, touched while we wait (ask=False:
    only wait, as the app itself does: commands release the file when they finish)."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    handoff = _handoff_file(path)
    asked = False
    try:
        while True:
            try:
                con = duckdb.connect(path)
                if asked:
                    _asked_by_us.add(path)  # removed when this connection is closed (see connect)
                    asked = False
                return con
            except duckdb.IOException as e:
                if "lock" not in str(e).lower():
                    raise UserError(f"cannot open store {path}: {str(e).splitlines()[0]}") from None
                if time.monotonic() >= deadline:
                    holder = re.search(r"\(PID (\d+)\)", str(e))
                    who = f" (process {holder.group(1)})" if holder else ""
                    raise StoreBusy(
                        f"store {path} is in use by another process{who}; tried for {timeout:.0f} s. "
                        "Stop that process or wait for it to finish."
                    ) from None
                if ask and _key(path) not in _held:
                    handoff.write_text(str(os.getpid()))  # (re)touch: the holder lets go while this is fresh
                    asked = True
                time.sleep(delay)
                delay = min(delay * 2, 0.25)
            except duckdb.Error as e:
                raise UserError(f"cannot open store {path}: {str(e).splitlines()[0]}") from None
    finally:
        if asked:
            handoff.unlink(missing_ok=True)


# --- A process that keeps the store open (the app) -------------------------------------------------------------
# Opening the file costs ~10 ms and closing it ~4 ms, too much for every click of 20 annotators. The app keeps one
# connection open (`hold`), so each transaction reuses the open database (~1 ms). All its store access then takes
# turns on one lock, and before each turn (and every 50 ms in a watcher thread) it checks for a handoff file: another
# process (a CLI command) wants the file, so the app closes it, waits until the handoff file is gone (or stale), and
# opens it again.
HANDOFF_STALE_S = 30.0
_held: dict[str, duckdb.DuckDBPyConnection | None] = {}
_held_locks: dict[str, threading.RLock] = {}
_asked_by_us: set[str] = set()


def _key(path: str | os.PathLike) -> str:
    return os.path.abspath(str(path))


def hold(path: str | os.PathLike) -> None:
    """Keep the store open in this process until `release` (the app calls it at start)."""
    key = _key(path)
    _held_locks.setdefault(key, threading.RLock())
    with _held_locks[key]:
        if _held.get(key) is None:
            con = open_connection(key, ask=False)
            migrate(con)
            _held[key] = con
            threading.Thread(target=_watch, args=(key,), daemon=True, name="store-handoff").start()


def _watch(key: str) -> None:
    """Let go for a waiting command even while the app is idle (no request would otherwise notice)."""
    while key in _held:
        if _handoff_file(key).exists():
            with _held_locks[key]:
                if key in _held:
                    _let_go_if_asked(key)
        time.sleep(0.05)


def release(path: str | os.PathLike) -> None:
    key = _key(path)
    with _held_locks.get(key, threading.RLock()):
        con = _held.pop(key, None)
        if con is not None:
            con.close()


def _let_go_if_asked(key: str) -> None:
    """Called with the process's store lock held, so no other connection of ours is open."""
    handoff = _handoff_file(key)
    try:
        if time.time() - handoff.stat().st_mtime > HANDOFF_STALE_S:  # left by a killed command
            handoff.unlink(missing_ok=True)
            return
    except FileNotFoundError:
        return
    con = _held.get(key)
    if con is not None:
        con.close()
        _held[key] = None
    while True:
        try:
            age = time.time() - handoff.stat().st_mtime
        except FileNotFoundError:
            break
        if age > HANDOFF_STALE_S:
            break
        time.sleep(0.01)
    _held[key] = None
    _held[key] = open_connection(key, ask=False)


@contextmanager
def connect(path: str | os.PathLike, *, create: bool = True, timeout: float = LOCK_TIMEOUT_S) -> Iterator:
    """A connection to an up-to-date store, closed (and, outside a holding process, the file released) on exit.

    create=False refuses a missing file instead of making an empty store (read-only commands use it)."""
    path = str(path)
    if not create and path != ":memory:" and not Path(path).exists():
        raise UserError(f"no store at {path}: run `rlhf init` (or pass --db)")
    key = _key(path)
    if key in _held:
        with _held_locks[key]:
            _let_go_if_asked(key)
            if _held[key] is None:  # a reopen failed earlier: try again now
                _held[key] = open_connection(key, timeout, ask=False)
            con = _held[key].cursor()
            try:
                yield con
            finally:
                con.close()
        return
    con = open_connection(path, timeout)
    try:
        migrate(con)
        yield con
    finally:
        _close(path, con)


def _close(path: str, con: duckdb.DuckDBPyConnection) -> None:
    """Close, and give the file back to a holding process that let go of it for us."""
    con.close()
    if path in _asked_by_us:
        _asked_by_us.discard(path)
        _handoff_file(path).unlink(missing_ok=True)


def init_store(path: str | os.PathLike) -> tuple[int, int]:
    """Create or migrate the store; returns (schema version before, after)."""
    path = str(path)
    con = open_connection(path)
    try:
        return migrate(con)
    finally:
        _close(path, con)


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
    with _write_locks_guard:
        return _write_locks.setdefault(_key(path), threading.Lock())


@contextmanager
def write(path: str | os.PathLike, *, timeout: float = LOCK_TIMEOUT_S) -> Iterator:
    """Open, run one transaction, close: the usual shape of every write.

    Writers in one process (the app's sessions) take turns: DuckDB would otherwise abort one of two concurrent
    transactions that touch the same rows (say, two imports adding the same prompt)."""
    with _write_lock(str(path)), connect(path, timeout=timeout) as con, transaction(con):
        yield con

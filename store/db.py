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
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from importlib import resources
from pathlib import Path
from typing import TypeVar

import duckdb

from store.errors import StoreBusy, UserError
from store.protocol import Connection

T = TypeVar("T")
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


def schema_version(con: Connection) -> int:
    """0 for an empty database."""
    has = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'").fetchone()[
        0
    ]
    if not has:
        return 0
    return con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]


def checked_schema_version(con: Connection, folder: Path | None = None) -> int:
    """schema_version, or a UserError for a store a newer rlhf-studio has migrated past this code's latest version,
    raised before anything writes to it: its tables may hold columns, rows and rules this code does not know, and
    an older writer would break them (rows a newer NOT NULL column lacks, a newer migration's data half kept up).
    Reads are refused too: this code's queries may not mean the same thing on the newer tables."""
    version, latest = schema_version(con), latest_version(folder)
    if version > latest:
        path = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
        raise UserError(
            f"store {path[0] or ':memory:'} has schema version {version}, newer than this rlhf-studio ({latest}): "
            "upgrade rlhf-studio to use it"
        )
    return version


def schema_scripts(folder: Path | None = None) -> list[tuple[int, str]]:
    """(version, sql) of every schema step: schema.sql is version 1, then the migrations."""
    return [(1, _schema_sql()), *migrations(folder)]


def migrate(con: Connection, folder: Path | None = None, upto: int | None = None) -> tuple[int, int]:
    """Bring the schema to the latest version (or `upto`), one transaction per version (a store is always at some
    whole version; DuckDB also cannot delete, in one transaction, rows that rows deleted there referred to, which
    a data migration may need two steps for); returns (version before, after). A store newer than the latest
    version is refused (`checked_schema_version`)."""
    before = checked_schema_version(con, folder)
    todo = [(v, sql) for v, sql in schema_scripts(folder) if v > before and (upto is None or v <= upto)]
    after = max([before] + [v for v, _ in todo])
    for version, sql in todo:
        con.execute("BEGIN TRANSACTION")
        try:
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


def _cores() -> int:
    """The cores this process may run on. DuckDB starts a thread per core of the machine, whatever the process's
    CPU affinity (taskset, a container's cpuset): on a pinned app its spare threads only contend, and every
    short query pays for waking them (a submit took a third more CPU at 2 threads on 1 core)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _handoff_file(path: str) -> Path:
    return Path(path + ".handoff")


def _handoff_state(handoff: Path) -> str:
    """'gone', 'stale' (older than HANDOFF_STALE_S, or its asker's process is gone: a killed command's file no longer
    holds the app up for half a minute) or 'live'."""
    try:
        age = time.time() - handoff.stat().st_mtime
        text = handoff.read_text().strip()
    except FileNotFoundError:
        return "gone"
    except OSError:
        return "stale"
    if age > HANDOFF_STALE_S or (text.isdigit() and not _process_alive(int(text))):
        return "stale"
    return "live"


def _process_alive(pid: int) -> bool:
    """Whether a process has this pid (another user's counts). The store imports nothing of training, where the
    fuller check (zombies, start times) lives: training/runs.py `process_alive`."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # none, or no pid at all
        return False
    except PermissionError:
        return True
    return True


def _open(path: str, timeout: float, ask: bool) -> tuple[duckdb.DuckDBPyConnection, bool]:
    """(connection, asked): open the file, retrying while another process holds it. A process that keeps the store
    open (the app, see `Store.hold`) is asked to let go through a handoff file next to the store, touched while we
    wait; asked=True means the caller got the file that way and must remove the handoff file when it closes (see
    `Store.connect`). ask=False only waits, as a holding process itself does."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    handoff = _handoff_file(path)
    asked = False
    try:
        while True:
            try:
                con = duckdb.connect(path)
                con.execute(f"SET threads = {_cores()}")
                got, asked = asked, False  # the handoff file is the caller's to remove now
                return con, got
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
                if ask:
                    handoff.write_text(str(os.getpid()))  # (re)touch: the holder lets go while this is fresh
                    asked = True
                time.sleep(delay)
                delay = min(delay * 2, 0.25)
            except duckdb.Error as e:
                raise UserError(f"cannot open store {path}: {str(e).splitlines()[0]}") from None
    finally:
        if asked:
            handoff.unlink(missing_ok=True)


# A process that keeps the store open (the app): opening the file costs ~10 ms and closing it ~4 ms, too much for
# every click of 20 annotators. The app's Store keeps one connection open (`hold`), so each transaction reuses the
# open database (~1 ms) through a cursor of it. Cursors are used side by side (DuckDB gives each its own view), so
# a snapshot being copied out does not hold up a submit; only letting the file go needs every cursor closed. Before
# each use (and every 50 ms in a watcher thread) the Store checks for a handoff file: another process (a CLI
# command) wants the file, so the app closes it, waits until the handoff file is gone (or stale), and opens it again.
HANDOFF_STALE_S = 30.0


class SharedLock:
    """Many holders of `shared`, or one of `exclusive`. A thread already holding `shared` may take it again even
    while an `exclusive` waits (no self-deadlock on nested use); a new holder waits behind a waiting `exclusive`,
    so the handoff is not starved by a steady stream of requests."""

    def __init__(self):
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting = 0
        self._mine = threading.local()

    def depth(self) -> int:
        return getattr(self._mine, "depth", 0)

    @contextmanager
    def shared(self) -> Iterator[None]:
        depth = self.depth()
        with self._cond:
            while self._exclusive or (self._waiting and depth == 0):
                self._cond.wait()
            self._shared += 1
        self._mine.depth = depth + 1
        try:
            yield
        finally:
            self._mine.depth = depth
            with self._cond:
                self._shared -= 1
                if not self._shared:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        if self.depth():
            raise RuntimeError("exclusive use of the store asked for inside a shared use by the same thread")
        with self._cond:
            self._waiting += 1
            try:
                while self._exclusive or self._shared:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class Store(os.PathLike):
    """One store file and this process's way into it: its connections, its locks, the handoff to other processes.

    The CLI makes one per command and the app one for its lifetime (`hold`); both pass it down to every store
    function, which take a Store or a path (`store_of`). It is a path-like object (`str(store)`, `Path(store)`,
    `--db store` all give the file), so code that only names the file needs no change. Nothing about the file is
    kept outside it: two Stores of one file in one process share no state (DuckDB shares the open database)."""

    def __init__(self, path: str | os.PathLike, timeout: float = LOCK_TIMEOUT_S):
        self.path = str(path)
        self.timeout = timeout
        self._held: duckdb.DuckDBPyConnection | None = None
        self._holding = False
        self._checked: duckdb.DuckDBPyConnection | None = None  # the held connection whose version was checked
        self._uses = SharedLock()  # cursors of the held connection (shared); opening and letting go (exclusive)
        self._writers = threading.Lock()  # this process's writers take turns (see `write`)

    def __fspath__(self) -> str:
        return self.path

    def __str__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"Store({self.path!r}{', held' if self._holding else ''})"

    # --- keeping the file open (the app) ---
    def hold(self) -> Store:
        """Keep the store open until `release`; a watcher thread lets go whenever another process asks."""
        with self._uses.exclusive():
            if not self._holding:
                con, _ = _open(self.path, self.timeout, ask=False)
                try:
                    migrate(con)
                except BaseException:
                    con.close()
                    raise
                self._held, self._checked, self._holding = con, con, True
                threading.Thread(target=self._watch, daemon=True, name="store-handoff").start()
        return self

    def release(self) -> None:
        with self._uses.exclusive():
            self._holding = False
            if self._held is not None:
                self._held.close()
                self._held = self._checked = None

    def _watch(self) -> None:
        """Let go for a waiting command even while the app is idle (no request would otherwise notice)."""
        while self._holding:
            if _handoff_file(self.path).exists():
                with self._uses.exclusive():
                    if self._holding:
                        try:
                            self._let_go_if_asked()
                        except (StoreBusy, UserError):  # could not reopen: the next use tries again (`connect`)
                            pass
            time.sleep(0.05)

    def _let_go_if_asked(self) -> None:
        """Called with the exclusive use held, so no cursor of ours is open."""
        handoff = _handoff_file(self.path)
        state = _handoff_state(handoff)
        if state != "live":
            if state == "stale":  # left by a killed command
                handoff.unlink(missing_ok=True)
            return
        if self._held is not None:
            self._held.close()
            self._held = None
        while _handoff_state(handoff) == "live":
            time.sleep(0.01)
        self._held = _open(self.path, self.timeout, ask=False)[0]

    # --- connections ---
    @contextmanager
    def connect(self, *, create: bool = True, timeout: float | None = None) -> Iterator:
        """A connection to an up-to-date store, closed (and, unless this Store holds the file, the file released)
        on exit. create=False refuses a missing file instead of making an empty store (read-only commands)."""
        timeout = self.timeout if timeout is None else timeout
        if not create and self.path != ":memory:" and not Path(self.path).exists():
            raise UserError(f"no store at {self.path}: run `rlhf init` (or pass --db)")
        if self._holding:
            if self._uses.depth() == 0 and (self._held is None or _handoff_file(self.path).exists()):
                with self._uses.exclusive():  # another process asked for the file, or a reopen failed earlier
                    self._let_go_if_asked()
                    if self._held is None:
                        self._held = _open(self.path, timeout, ask=False)[0]
            with self._uses.shared():
                if self._held is None:
                    raise StoreBusy(f"store {self.path} is being handed to another process; try again")
                held, con = self._held, self._held.cursor()
                try:
                    if held is not self._checked:  # reopened: a newer rlhf-studio may have migrated it meanwhile
                        checked_schema_version(con)  # on our own cursor: the held connection is not for threads
                        self._checked = held
                    yield con
                finally:
                    con.close()
            return
        con, asked = _open(self.path, timeout, ask=True)
        try:
            migrate(con)
            yield con
        finally:
            _close(self.path, con, asked)

    def read(self, fn: Callable[[Connection], T] | None = None, *, create: bool = True, timeout: float | None = None):
        """`fn(con)` in one read transaction (every query in it sees the store at one moment while writers go on),
        returning its result; without `fn`, that transaction as a context manager (`with store.read() as con:`).
        The store's one door for reads that must agree with each other (datasette's execute_fn)."""
        cm = self._in_transaction(create, timeout, writer=False)
        if fn is None:
            return cm
        with cm as con:
            return fn(con)

    def write(self, fn: Callable[[Connection], T] | None = None, *, timeout: float | None = None):
        """`fn(con)` in one write transaction, returning its result; without `fn`, that transaction as a context
        manager (`with store.write() as con:`). The store's one door for writes (datasette's execute_write_fn).

        Writers sharing this Store (the app's sessions) take turns: DuckDB would otherwise abort one of two
        concurrent transactions that touch the same rows (say, two imports adding the same prompt). The turn is
        taken after the connection, so a writer never waits for its turn while the handoff waits for it."""
        cm = self._in_transaction(True, timeout, writer=True)
        if fn is None:
            return cm
        with cm as con:
            return fn(con)

    @contextmanager
    def _in_transaction(self, create: bool, timeout: float | None, writer: bool) -> Iterator[Connection]:
        with self.connect(create=create, timeout=timeout) as con:
            with self._writers if writer else nullcontext(), transaction(con):
                yield con

    def init(self) -> tuple[int, int]:
        """Create or migrate the store; returns (schema version before, after)."""
        if self._holding:  # migrated when it was opened
            with self.connect() as con:
                version = schema_version(con)
            return version, version
        con, asked = _open(self.path, self.timeout, ask=True)
        try:
            return migrate(con)
        finally:
            _close(self.path, con, asked)


StoreRef = Store | str | os.PathLike  # what every function taking `db` accepts: a Store, or a store file's path


class MemoryStore(Store):
    """A store in memory, the second backend behind the connection protocol: every connection is a cursor of one
    in-memory DuckDB database of its own, migrated when made; no file, no lock, no handoff. For tests that prove
    the store's functions need no more than `store.protocol.Connection` and the two doors, and for scratch work;
    it is gone when the object is."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self._db = duckdb.connect(":memory:")
        migrate(self._db)

    def __repr__(self) -> str:
        return f"MemoryStore(at {id(self):#x})"

    def hold(self) -> Store:
        return self

    def release(self) -> None:
        pass

    @contextmanager
    def connect(self, *, create: bool = True, timeout: float | None = None) -> Iterator:
        con = self._db.cursor()  # a connection of its own to the one database: transactions are per cursor
        try:
            yield con
        finally:
            con.close()

    def init(self) -> tuple[int, int]:
        with self.connect() as con:
            version = schema_version(con)
        return version, version


def _close(path: str, con: Connection, asked: bool) -> None:
    """Close, and give the file back to a holding process that let go of it for us."""
    con.close()
    if asked:
        _handoff_file(path).unlink(missing_ok=True)


def store_of(db: Store | str | os.PathLike) -> Store:
    """The Store passed down, or a one-off Store for a bare path (a single command, a test)."""
    return db if isinstance(db, Store) else Store(db)


def connect(db: Store | str | os.PathLike, *, create: bool = True, timeout: float | None = None):
    """`Store.connect` on db (a Store, or a path for a one-off Store)."""
    return store_of(db).connect(create=create, timeout=timeout)


def write(db: Store | str | os.PathLike, fn: Callable[[Connection], T] | None = None, *, timeout: float | None = None):
    """`Store.write` on db (a Store, or a path for a one-off Store)."""
    return store_of(db).write(fn, timeout=timeout)


def read(db: Store | str | os.PathLike, fn: Callable[[Connection], T] | None = None, *, create: bool = True):
    """`Store.read` on db (a Store, or a path for a one-off Store)."""
    return store_of(db).read(fn, create=create)


def copy_store(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """A consistent copy of the store file src at dst (a new file): taken while holding src, after a checkpoint has
    folded its write-ahead log into the file, so a writer is waited for (or asked to let go) and never copied half."""
    import shutil

    with connect(src, create=False) as con:
        con.execute("CHECKPOINT")
        shutil.copyfile(src, dst)


def init_store(db: Store | str | os.PathLike) -> tuple[int, int]:
    return store_of(db).init()


@contextmanager
def transaction(con: Connection) -> Iterator[Connection]:
    """All of it lands or none of it does."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")

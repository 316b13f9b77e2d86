"""`rlhf backup OUT` and `rlhf restore BACKUP`: the whole store as a folder of Parquet files (DuckDB's EXPORT
DATABASE: schema.sql with the sequences at their positions, load.sql, one Parquet file per table) plus a manifest
of row counts and each file's sha256, and back.

The restore runs no SQL from the backup folder (IMPORT DATABASE would run its schema.sql and load.sql, and a
folder someone handed you can say anything there: `COPY ... TO` any file). It builds our own schema at the backup's
version, reads each of our tables from its Parquet file by a bound parameter, and takes only the sequences'
positions from schema.sql, as numbers.

Both are all or nothing, and on disk once they return: a backup is written beside OUT, fsynced and renamed into
place once complete (store/durable.py); a restore checks every file against its hash, builds the new store beside
its target, checks every table's row count against the manifest and every id sequence against its table's largest
id, then fsyncs it and renames it into place. A restore never overwrites an existing store."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import duckdb

from store.db import StoreRef, connect, latest_version, migrate, schema_scripts, sql_string, transaction
from store.durable import rename_durably
from store.errors import UserError
from store.protocol import Connection

MANIFEST = "manifest.json"


def _counts(con: Connection) -> dict[str, int]:
    tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall()]
    return {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}  # names from the catalog


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _hashes(folder: Path) -> dict[str, str]:
    """{file name: sha256} of every file EXPORT DATABASE wrote (it writes them all directly in the folder)."""
    return {p.name: _sha256(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != MANIFEST}


def backup(db: StoreRef, out: str | os.PathLike) -> dict:
    out = Path(out)
    if out.exists():
        raise UserError(f"{out} already exists: a backup goes into a new folder")
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # a backup that died half-way
    try:
        with connect(db, create=False) as con, transaction(con):  # the counts and the files see the same rows
            counts = _counts(con)
            version = con.execute("SELECT max(version) FROM schema_version").fetchone()[0]
            con.execute(f"EXPORT DATABASE {sql_string(partial.resolve())} (FORMAT parquet)")
        manifest = {
            "source": str(Path(db).resolve()),
            "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "schema_version": version,
            "rows": counts,
            "files": _hashes(partial),
        }
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        rename_durably(partial, out)
    except OSError as e:
        shutil.rmtree(partial, ignore_errors=True)
        raise UserError(f"cannot write the backup {out}: {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return manifest


def restore(backup_dir: str | os.PathLike, db: StoreRef) -> dict:
    folder, target = Path(backup_dir), Path(db)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        expected = {str(k): int(v) for k, v in manifest["rows"].items()}
        version = int(manifest["schema_version"])
        # a manifest from before the hashes has no `files`: it still restores, on its row counts alone
        files = {str(k): str(v) for k, v in manifest.get("files", {}).items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise UserError(f"{folder} is not an rlhf-studio backup: no readable {MANIFEST}") from None
    if not 1 <= version <= latest_version():
        raise UserError(f"{folder} was made by schema version {version}; this rlhf-studio reads 1..{latest_version()}")
    if target.exists():
        raise UserError(f"{target} already exists: restore into a new store file (the old one is never replaced)")
    _check_files(folder, files)
    building = target.with_name(target.name + ".restoring")
    building.unlink(missing_ok=True)
    try:
        con = duckdb.connect(str(building))
        try:
            _rebuild(con, folder.resolve(), version)
            _check_sequences(con)
            got = _counts(con)
            expected["schema_version"] = got.get("schema_version")  # ours: the latest schema's history
        finally:
            con.close()
        # tables a later migration added (a backup of an older schema restores into the latest) hold only what
        # that migration derived from the restored rows (0009's counters), so the manifest cannot name them
        got = {t: n for t, n in got.items() if t in expected}
        if got != expected:
            diff = ", ".join(f"{t}: {got.get(t)} != {n}" for t, n in expected.items() if got.get(t) != n)
            raise UserError(f"the restored store does not match the backup's manifest ({diff or 'tables differ'})")
        rename_durably(building, target)
    except duckdb.Error as e:
        building.unlink(missing_ok=True)
        raise UserError(f"cannot restore {folder}: {str(e).splitlines()[0][:200]}") from None
    except BaseException:
        building.unlink(missing_ok=True)
        raise
    return manifest


def _check_files(folder: Path, files: dict[str, str]) -> None:
    """Every file the manifest lists is there with the sha256 it had when the backup was made: a backup damaged or
    edited after it was written (a Parquet file rewritten with its row count patched to match) restores nothing."""
    for name, digest in sorted(files.items()):
        if Path(name).name != name or name in (".", ".."):  # EXPORT DATABASE writes plain names, nothing elsewhere
            raise UserError(f"{folder} is not an rlhf-studio backup: {MANIFEST} lists a file outside it ({name!r})")
        path = folder / name
        if not path.is_file():
            raise UserError(f"{folder} is not a complete backup: {name} is missing; nothing restored")
        try:
            same = _sha256(path) == digest
        except OSError as e:
            raise UserError(f"cannot read {path}: {e.strerror or e}; nothing restored") from None
        if not same:
            raise UserError(
                f"{folder} has changed since the backup was made: {name} does not match its sha256 in "
                f"{MANIFEST}; nothing restored"
            )


_ID_COLUMN = re.compile(r"(\w+) BIGINT PRIMARY KEY DEFAULT nextval\('(\w+)'\)")


def _id_sequences() -> dict[str, tuple[str, str]]:
    """{sequence: (table, id column)} for every sequence that is the DEFAULT of a table's id, from our own schema."""
    found = {}
    for _, sql in schema_scripts():
        for table, body in re.findall(r"CREATE TABLE (\w+) \((.*?)\n\);", sql, re.S):
            for column, sequence in _ID_COLUMN.findall(body):
                found[sequence] = (table, column)
    return found


def _check_sequences(con: Connection) -> None:
    """Each id sequence would hand out an id above every id already used: its table's, and those in other tables'
    columns of the same name (undone_rankings keeps the ids of rankings it took back). A schema.sql whose START is
    behind the data (edited, or from a DuckDB that wrote it differently) would make a store whose next insert fails
    on its primary key, or hands a new ranking the id an undo record still names."""
    # the next value without taking it: last_value is NULL until the first nextval (our sequences count up by 1)
    next_ids = dict(
        con.execute(
            "SELECT sequence_name, coalesce(last_value + increment_by, start_value) FROM duckdb_sequences()"
        ).fetchall()
    )
    for sequence, (table, column) in sorted(_id_sequences().items()):
        for holder in [table, *(t for t in _tables_with(con, column) if t != table)]:
            largest = con.execute(f"SELECT max({column}) FROM {holder}").fetchone()[0]  # names from our catalog
            if largest is not None and next_ids[sequence] <= largest:
                where = holder if holder == table else f"{holder}.{column}"
                raise UserError(
                    f"the backup's sequence {sequence} would hand out id {next_ids[sequence]}, but {where} already "
                    f"holds ids up to {largest}: the backup is inconsistent; nothing restored"
                )


def _tables_with(con: Connection, column: str) -> list[str]:
    """The tables (not views) that have a column of this name."""
    sql = (
        "SELECT c.table_name FROM duckdb_columns() c JOIN duckdb_tables() t USING (schema_name, table_name) "
        "WHERE c.column_name = ? ORDER BY c.table_name"
    )
    return [t for (t,) in con.execute(sql, [column]).fetchall()]


_SEQUENCE = re.compile(r"CREATE SEQUENCE (\w+) INCREMENT BY 1 MINVALUE 1 MAXVALUE \d+ START (\d+) NO CYCLE")


def _rebuild(con: Connection, folder: Path, version: int) -> None:
    """Our own schema at the backup's version, its rows read from `<table>.parquet` in `folder` (only our tables,
    only files directly in the folder), our migrations after it. Nothing the backup folder says is run as SQL: of
    schema.sql only each sequence's position is read, as a number."""
    tables = [t for v, sql in schema_scripts() if v <= version for t in re.findall(r"CREATE TABLE (\w+)", sql)]
    sequences = {s for _, sql in schema_scripts() for s in re.findall(r"CREATE SEQUENCE IF NOT EXISTS (\w+)", sql)}
    try:
        exported = (folder / "schema.sql").read_text()
    except OSError:
        raise UserError(f"{folder} is not an rlhf-studio backup: no schema.sql") from None
    for name, start in _SEQUENCE.findall(exported):
        if name in sequences:  # a name from our own schema, a position that is a number: neither is the backup's SQL
            con.execute(f"CREATE SEQUENCE {name} START {int(start)}")
    migrate(con, upto=version)
    for table in tables:
        if table == "schema_version":
            continue
        source = folder / f"{table}.parquet"
        if not source.is_file():
            raise UserError(f"{folder} is not a complete backup: {source.name} is missing")
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM read_parquet(?)", [str(source)])
    migrate(con)

"""`rlhf backup OUT` and `rlhf restore BACKUP`: the whole store as a folder of Parquet files (DuckDB's EXPORT
DATABASE: schema.sql with the sequences at their positions, load.sql, one Parquet file per table) plus a manifest
of row counts, and back.

The restore runs no SQL from the backup folder (IMPORT DATABASE would run its schema.sql and load.sql, and a
folder someone handed you can say anything there: `COPY ... TO` any file). It builds our own schema at the backup's
version, reads each of our tables from its Parquet file by a bound parameter, and takes only the sequences'
positions from schema.sql, as numbers.

Both are all or nothing: a backup is written beside OUT and renamed into place once complete; a restore builds the
new store beside its target, checks every table's row count against the manifest, then renames it into place. A
restore never overwrites an existing store."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
from pathlib import Path

import duckdb

from store.db import connect, latest_version, migrate, schema_scripts, sql_string
from store.errors import UserError

MANIFEST = "manifest.json"


def _counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall()]
    return {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}  # names from the catalog


def backup(db: str | os.PathLike, out: str | os.PathLike) -> dict:
    out = Path(out)
    if out.exists():
        raise UserError(f"{out} already exists: a backup goes into a new folder")
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # a backup that died half-way
    try:
        with connect(db, create=False) as con:
            counts = _counts(con)
            version = con.execute("SELECT max(version) FROM schema_version").fetchone()[0]
            con.execute(f"EXPORT DATABASE {sql_string(partial.resolve())} (FORMAT parquet)")
        manifest = {
            "source": str(Path(db).resolve()),
            "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "schema_version": version,
            "rows": counts,
        }
        (partial / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        partial.rename(out)
    except OSError as e:
        shutil.rmtree(partial, ignore_errors=True)
        raise UserError(f"cannot write the backup {out}: {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return manifest


def restore(backup_dir: str | os.PathLike, db: str | os.PathLike) -> dict:
    folder, target = Path(backup_dir), Path(db)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        expected = {str(k): int(v) for k, v in manifest["rows"].items()}
        version = int(manifest["schema_version"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise UserError(f"{folder} is not an rlhf-studio backup: no readable {MANIFEST}") from None
    if not 1 <= version <= latest_version():
        raise UserError(f"{folder} was made by schema version {version}; this rlhf-studio reads 1..{latest_version()}")
    if target.exists():
        raise UserError(f"{target} already exists: restore into a new store file (the old one is never replaced)")
    building = target.with_name(target.name + ".restoring")
    building.unlink(missing_ok=True)
    try:
        con = duckdb.connect(str(building))
        try:
            _rebuild(con, folder.resolve(), version)
            got = _counts(con)
            expected["schema_version"] = got.get("schema_version")  # ours: the latest schema's history
        finally:
            con.close()
        # tables a later migration added (a backup of an older schema restores into the latest) start empty
        got = {t: n for t, n in got.items() if t in expected or n}
        if got != expected:
            diff = ", ".join(f"{t}: {got.get(t)} != {n}" for t, n in expected.items() if got.get(t) != n)
            raise UserError(f"the restored store does not match the backup's manifest ({diff or 'tables differ'})")
        building.rename(target)
    except duckdb.Error as e:
        building.unlink(missing_ok=True)
        raise UserError(f"cannot restore {folder}: {str(e).splitlines()[0][:200]}") from None
    except BaseException:
        building.unlink(missing_ok=True)
        raise
    return manifest


_SEQUENCE = re.compile(r"CREATE SEQUENCE (\w+) INCREMENT BY 1 MINVALUE 1 MAXVALUE \d+ START (\d+) NO CYCLE")


def _rebuild(con: duckdb.DuckDBPyConnection, folder: Path, version: int) -> None:
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

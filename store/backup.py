"""`rlhf backup OUT` and `rlhf restore BACKUP`: the whole store as a folder of Parquet files (DuckDB's EXPORT
DATABASE: schema.sql with the sequences at their positions, load.sql, one Parquet file per table) plus a manifest
of row counts, and back.

The restore replays schema.sql and load.sql itself rather than IMPORT DATABASE: DuckDB 1.x writes views in name
order (`pairs` before the `pair_ids` it reads from), which IMPORT cannot create, and load.sql names the folder
where the export was written, not where the backup lies now.

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

from store.db import connect
from store.errors import StoreError

MANIFEST = "manifest.json"


def _literal(path: Path) -> str:
    """EXPORT/IMPORT DATABASE take no parameters: the folder goes in as a quoted SQL string literal."""
    return "'" + str(path).replace("'", "''") + "'"


def _counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY table_name").fetchall()]
    return {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}  # names from the catalog


def backup(db: str | os.PathLike, out: str | os.PathLike) -> dict:
    out = Path(out)
    if out.exists():
        raise StoreError(f"{out} already exists: a backup goes into a new folder")
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)  # a backup that died half-way
    try:
        with connect(db, create=False) as con:
            counts = _counts(con)
            version = con.execute("SELECT max(version) FROM schema_version").fetchone()[0]
            con.execute(f"EXPORT DATABASE {_literal(partial.resolve())} (FORMAT parquet)")
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
        raise StoreError(f"cannot write the backup {out}: {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return manifest


def restore(backup_dir: str | os.PathLike, db: str | os.PathLike) -> dict:
    folder, target = Path(backup_dir), Path(db)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        expected = {str(k): int(v) for k, v in manifest["rows"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise StoreError(f"{folder} is not an rlhf-studio backup: no readable {MANIFEST}") from None
    if target.exists():
        raise StoreError(f"{target} already exists: restore into a new store file (the old one is never replaced)")
    building = target.with_name(target.name + ".restoring")
    building.unlink(missing_ok=True)
    try:
        con = duckdb.connect(str(building))
        try:
            _replay(con, folder.resolve())
            got = _counts(con)
        finally:
            con.close()
        if got != expected:
            diff = ", ".join(f"{t}: {got.get(t)} != {n}" for t, n in expected.items() if got.get(t) != n)
            raise StoreError(f"the restored store does not match the backup's manifest ({diff or 'tables differ'})")
        building.rename(target)
    except duckdb.Error as e:
        building.unlink(missing_ok=True)
        raise StoreError(f"cannot restore {folder}: {str(e).splitlines()[0][:200]}") from None
    except BaseException:
        building.unlink(missing_ok=True)
        raise
    return manifest


def _statements(path: Path) -> list[str]:
    return [st.strip() for st in path.read_text().split(";\n") if st.strip().rstrip(";")]


def _replay(con: duckdb.DuckDBPyConnection, folder: Path) -> None:
    """schema.sql (views last, each once the views it reads exist), then load.sql with each Parquet file found in
    `folder` by its name. No transaction: a view that fails would abort it, and the file being built is only
    renamed into place once every table's count checks out."""
    schema = _statements(folder / "schema.sql")
    views = [st for st in schema if st.upper().startswith("CREATE VIEW")]
    for st in schema:
        if st not in views:
            con.execute(st)
    for st in _statements(folder / "load.sql"):
        m = re.fullmatch(r"COPY (\S+) FROM '(.*)' (\(.*\));?", st, flags=re.S)
        if not m:
            raise StoreError(f"{folder}/load.sql: unexpected statement {st[:80]!r}")
        source = folder / Path(m.group(2).replace("''", "'")).name
        con.execute(f"COPY {m.group(1)} FROM {_literal(source)} {m.group(3)}")
    while views:
        left = []
        for st in views:
            try:
                con.execute(st)
            except duckdb.CatalogException:
                left.append(st)
        if len(left) == len(views):
            raise StoreError(f"{folder}/schema.sql: views that read missing tables ({left[0][:60]}...)")
        views = left

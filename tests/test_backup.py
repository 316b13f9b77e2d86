"""`rlhf backup` / `rlhf restore`: every row and every id sequence comes back; nothing is overwritten or half-made."""

import hashlib
import json
import re
from pathlib import Path

import duckdb
import pytest

from store.backup import _id_sequences
from store.db import schema_scripts
from tests.conftest import query, store_rows, write_jsonl


def seed(cli, tmp_path: Path) -> None:
    rows = [
        {"prompt": f"Prompt {i}", "responses": [f"a{i}", f"b{i}", f"c{i}"], "ranks": [1, 2, 3], "annotator": "ann"}
        for i in range(5)
    ]
    assert cli("import", str(write_jsonl(tmp_path / "r.jsonl", rows)))[0] == 0


def rehash(bk: Path) -> None:
    """Give an edited backup a manifest that agrees with its files, as whoever edited it could: what is left to catch
    the edit is the restore's own checks."""
    manifest = bk / "manifest.json"
    m = json.loads(manifest.read_text())
    m["files"] = {name: hashlib.sha256((bk / name).read_bytes()).hexdigest() for name in m["files"]}
    manifest.write_text(json.dumps(m))


@pytest.mark.store_file
def test_backup_then_restore_gives_back_every_row_and_continues_the_ids(cli, db, tmp_path):
    seed(cli, tmp_path)
    before = store_rows(db)
    code, out, _ = cli("backup", str(tmp_path / "bk"))
    assert code == 0 and "rankings 5" in out
    manifest = json.loads((tmp_path / "bk" / "manifest.json").read_text())
    assert manifest["rows"]["rankings"] == 5 and manifest["rows"]["ranking_items"] == 15
    # every file of the export and its sha256; the manifest cannot list itself
    written = sorted(p.name for p in (tmp_path / "bk").iterdir() if p.name != "manifest.json")
    assert sorted(manifest["files"]) == written and {"schema.sql", "load.sql", "rankings.parquet"} <= set(written)
    for name, digest in manifest["files"].items():
        assert digest == hashlib.sha256((tmp_path / "bk" / name).read_bytes()).hexdigest()
    restored = str(tmp_path / "restored.duckdb")
    code, out, _ = cli("--db", restored, "restore", str(tmp_path / "bk"))
    assert code == 0, out
    assert store_rows(restored) == before
    assert query(restored, "SELECT count(*) FROM pairs") == query(db, "SELECT count(*) FROM pairs") == [(15,)]
    # new rows after a restore take fresh ids (the sequences came back at their positions)
    rows = [{"prompt": "Prompt new", "responses": ["x", "y"], "ranks": [2, 1], "annotator": "bob"}]
    assert cli("--db", restored, "import", str(write_jsonl(tmp_path / "n.jsonl", rows)))[0] == 0
    assert query(restored, "SELECT count(DISTINCT prompt_id), count(*) FROM prompts") == [(6, 6)]
    assert query(restored, "SELECT max(ranking_id) FROM rankings") == [(6,)]  # 5 backed up, the next is 6


@pytest.mark.store_file
def test_backup_and_restore_refuse_to_overwrite_and_reject_a_folder_that_is_not_a_backup(cli, db, tmp_path):
    seed(cli, tmp_path)
    (tmp_path / "taken").mkdir()
    code, _, err = cli("backup", str(tmp_path / "taken"))
    assert code == 1 and "already exists" in err and not list((tmp_path / "taken").iterdir())
    assert cli("backup", str(tmp_path / "bk"))[0] == 0
    before = store_rows(db)
    code, _, err = cli("restore", str(tmp_path / "bk"))  # into the existing store: refused, store unchanged
    assert code == 1 and "already exists" in err and store_rows(db) == before
    code, _, err = cli("--db", str(tmp_path / "new.duckdb"), "restore", str(tmp_path / "taken"))
    assert code == 1 and "not an rlhf-studio backup" in err and not (tmp_path / "new.duckdb").exists()


def test_a_backup_whose_data_was_tampered_with_restores_nothing(cli, db, tmp_path):
    seed(cli, tmp_path)
    assert cli("backup", str(tmp_path / "bk"))[0] == 0
    manifest = tmp_path / "bk" / "manifest.json"
    m = json.loads(manifest.read_text())
    m["rows"]["rankings"] = 6  # the manifest no longer matches the data
    manifest.write_text(json.dumps(m))
    target = tmp_path / "new.duckdb"
    code, _, err = cli("--db", str(target), "restore", str(tmp_path / "bk"))
    assert code == 1 and "rankings: 5 != 6" in err
    assert not target.exists() and not list(tmp_path.glob("new.duckdb*"))


@pytest.mark.store_file
def test_restore_runs_no_sql_from_the_backup_folder(cli, db, tmp_path, monkeypatch):
    """A backup handed over by someone else: its schema.sql and load.sql ask to write files; the restore builds our
    own schema, reads only our tables' Parquet files, and writes nothing but the new store."""
    monkeypatch.chdir(tmp_path)
    seed(cli, tmp_path)
    before = store_rows(db)
    assert cli("backup", str(tmp_path / "bk"))[0] == 0
    bk = tmp_path / "bk"
    with (bk / "schema.sql").open("a") as f:
        f.write("COPY (SELECT 'pwned') TO 'pwned-schema.csv';\n")
    (bk / "load.sql").write_text("COPY (SELECT 1) TO 'pwned-load.csv';\n")
    rehash(bk)  # whoever hands over a folder writes its manifest too
    code, out, err = cli("--db", str(tmp_path / "restored.duckdb"), "restore", str(bk))
    assert code == 0, err
    assert store_rows(str(tmp_path / "restored.duckdb")) == before
    assert not list(tmp_path.rglob("pwned*"))


def test_a_backup_whose_sequence_is_behind_its_data_restores_nothing(cli, db, tmp_path):
    """schema.sql says ranking_ids starts at 3 while rankings holds ids 1..5: the restored store would hand the next
    ranking id 3, which is taken. The manifest was made to match, so only the sequence check can catch it."""
    seed(cli, tmp_path)
    assert cli("backup", str(tmp_path / "bk"))[0] == 0
    schema = tmp_path / "bk" / "schema.sql"
    edited, n = re.subn(r"(CREATE SEQUENCE ranking_ids .* START )\d+", r"\g<1>3", schema.read_text())
    assert n == 1
    schema.write_text(edited)
    rehash(tmp_path / "bk")
    target = tmp_path / "new.duckdb"
    code, _, err = cli("--db", str(target), "restore", str(tmp_path / "bk"))
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert (
        "the backup's sequence ranking_ids would hand out id 3, but rankings already holds ids up to 5: "
        "the backup is inconsistent; nothing restored" in err
    )
    assert not list(tmp_path.glob("new.duckdb*"))


@pytest.mark.store_file
def test_a_sequence_behind_the_ids_an_undo_record_keeps_restores_nothing(cli, db, tmp_path):
    """Rankings 1..5 and an undo record of a ranking 7, written past ranking_ids (at 6): restored, the store would
    hand out 6 and then 7 again, the id the undo record names."""
    seed(cli, tmp_path)
    with duckdb.connect(db) as con:  # its assignment's id taken from assignment_ids, as the app does
        con.execute(
            "INSERT INTO undone_rankings (ranking_id, assignment_id, prompt_id, annotator, skipped, response_ids, "
            "ranks, ranked_at) "
            "VALUES (7, nextval('assignment_ids'), 1, 'ann', false, [1, 2], [1, 2], current_timestamp)"
        )
    assert cli("backup", str(tmp_path / "bk"))[0] == 0  # ranking_ids at 6: behind the undone ranking 7
    code, _, err = cli("--db", str(tmp_path / "new.duckdb"), "restore", str(tmp_path / "bk"))
    assert (
        code == 1 and "ranking_ids would hand out id 6, but undone_rankings.ranking_id already holds ids up to 7" in err
    )
    assert not list(tmp_path.glob("new.duckdb*"))


def test_a_backup_whose_parquet_file_was_rewritten_restores_nothing(cli, db, tmp_path):
    """rankings.parquet rewritten with a sixth ranking and the manifest's row count patched to 6: the counts agree,
    the file's sha256 does not."""
    seed(cli, tmp_path)
    assert cli("backup", str(tmp_path / "bk"))[0] == 0
    bk = tmp_path / "bk"
    parquet, extra = bk / "rankings.parquet", tmp_path / "extra.parquet"
    with duckdb.connect() as con:
        con.execute(
            "COPY (SELECT * FROM read_parquet($p) UNION ALL "
            "(SELECT * REPLACE (6 AS ranking_id, NULL AS external_key) FROM read_parquet($p) LIMIT 1)) TO $out",
            {"p": str(parquet), "out": str(extra)},
        )
        assert con.execute("SELECT count(*) FROM read_parquet(?)", [str(extra)]).fetchone() == (6,)
    extra.replace(parquet)
    manifest = bk / "manifest.json"
    m = json.loads(manifest.read_text())
    m["rows"]["rankings"] = 6
    manifest.write_text(json.dumps(m))
    code, _, err = cli("--db", str(tmp_path / "new.duckdb"), "restore", str(bk))
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "has changed since the backup was made: rankings.parquet does not match its sha256" in err
    assert "nothing restored" in err and not list(tmp_path.glob("new.duckdb*"))


@pytest.mark.store_file
def test_a_listed_file_that_is_gone_restores_nothing_and_an_old_manifest_still_restores(cli, db, tmp_path):
    seed(cli, tmp_path)
    before = store_rows(db)
    assert cli("backup", str(tmp_path / "bk"))[0] == 0
    bk = tmp_path / "bk"
    (bk / "load.sql").unlink()  # the restore never reads it, but the backup is not whole
    code, _, err = cli("--db", str(tmp_path / "new.duckdb"), "restore", str(bk))
    assert code == 1 and "is not a complete backup: load.sql is missing; nothing restored" in err
    assert not list(tmp_path.glob("new.duckdb*"))
    # a manifest written before the hashes: no `files`, restored on its row counts and sequences
    m = json.loads((bk / "manifest.json").read_text())
    del m["files"]
    (bk / "manifest.json").write_text(json.dumps(m))
    code, _, err = cli("--db", str(tmp_path / "new.duckdb"), "restore", str(bk))
    assert code == 0, err
    assert store_rows(str(tmp_path / "new.duckdb")) == before


def test_every_sequence_of_our_schema_is_the_default_of_one_id_column():
    """The sequence check covers every sequence: none is missed by the pattern that finds them."""
    declared = {s for _, sql in schema_scripts() for s in re.findall(r"CREATE SEQUENCE IF NOT EXISTS (\w+)", sql)}
    pairs = _id_sequences()
    assert set(pairs) == declared
    assert pairs["ranking_ids"] == ("rankings", "ranking_id") and pairs["prompt_ids"] == ("prompts", "prompt_id")
    assert pairs["undo_ids"] == ("undone_rankings", "undo_id")

"""`rlhf backup` / `rlhf restore`: every row and every id sequence comes back; nothing is overwritten or half-made."""

import json
from pathlib import Path

from tests.conftest import query, store_rows, write_jsonl


def seed(cli, tmp_path: Path) -> None:
    rows = [
        {"prompt": f"Prompt {i}", "responses": [f"a{i}", f"b{i}", f"c{i}"], "ranks": [1, 2, 3], "annotator": "ann"}
        for i in range(5)
    ]
    assert cli("import", str(write_jsonl(tmp_path / "r.jsonl", rows)))[0] == 0


def test_backup_then_restore_gives_back_every_row_and_continues_the_ids(cli, db, tmp_path):
    seed(cli, tmp_path)
    before = store_rows(db)
    code, out, _ = cli("backup", str(tmp_path / "bk"))
    assert code == 0 and "rankings 5" in out
    manifest = json.loads((tmp_path / "bk" / "manifest.json").read_text())
    assert manifest["rows"]["rankings"] == 5 and manifest["rows"]["ranking_items"] == 15
    restored = str(tmp_path / "restored.duckdb")
    code, out, _ = cli("--db", restored, "restore", str(tmp_path / "bk"))
    assert code == 0, out
    assert store_rows(restored) == before
    assert query(restored, "SELECT count(*) FROM pairs") == query(db, "SELECT count(*) FROM pairs") == [(15,)]
    # new rows after a restore take fresh ids (the sequences came back at their positions)
    rows = [{"prompt": "Prompt new", "responses": ["x", "y"], "ranks": [2, 1], "annotator": "bob"}]
    assert cli("--db", restored, "import", str(write_jsonl(tmp_path / "n.jsonl", rows)))[0] == 0
    assert query(restored, "SELECT count(DISTINCT prompt_id), count(*) FROM prompts") == [(6, 6)]
    assert query(restored, "SELECT max(ranking_id) FROM rankings") == [(6,)]


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
    code, out, err = cli("--db", str(tmp_path / "restored.duckdb"), "restore", str(bk))
    assert code == 0, err
    assert store_rows(str(tmp_path / "restored.duckdb")) == before
    assert not list(tmp_path.rglob("pwned*"))

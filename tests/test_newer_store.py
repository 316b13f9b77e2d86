"""A store a newer rlhf-studio has migrated past this code's latest schema version is refused on every open, with
one line and before anything is written: an older CLI or app would write rows the newer schema does not expect."""

import hashlib
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from store.db import Store, connect, latest_version
from store.errors import UserError
from store.prompts import add_prompts

ROOT = Path(__file__).resolve().parent.parent


def from_the_future(db: str) -> int:
    """Mark the store as migrated by a newer rlhf-studio (behind our own code's back); returns that version."""
    version = latest_version() + 1
    con = duckdb.connect(db)
    con.execute("INSERT INTO schema_version (version) VALUES (?)", [version])
    con.close()
    return version


def sha256(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def refusal(db: str, version: int) -> str:
    return (
        f"store {db} has schema version {version}, newer than this rlhf-studio ({latest_version()}): "
        "upgrade rlhf-studio to use it"
    )


@pytest.mark.parametrize(
    "args",
    [["prompts", "add", "PROMPTS"], ["pairs", "--stats"], ["init"], ["backup", "OUT"]],
    ids=lambda a: " ".join(a[:2]),
)
@pytest.mark.store_file
def test_every_command_refuses_a_newer_store_with_one_line_and_leaves_it_as_it_was(cli, db, tmp_path, args):
    (tmp_path / "p.txt").write_text("a new prompt\n")
    args = [{"PROMPTS": str(tmp_path / "p.txt"), "OUT": str(tmp_path / "bk")}.get(a, a) for a in args]
    version = from_the_future(db)
    before = sha256(db)
    code, out, err = cli(*args)
    assert (code, out, err) == (1, "", f"error: {refusal(db, version)}\n")
    assert sha256(db) == before and not Path(db + ".wal").exists() and not (tmp_path / "bk").exists()


@pytest.mark.store_file
def test_a_store_one_version_newer_is_refused_and_our_latest_is_not(db):
    with connect(db) as con:  # our own latest: fine
        assert con.execute("SELECT count(*) FROM prompts").fetchone() == (0,)
    version = from_the_future(db)
    with pytest.raises(UserError) as e, connect(db):
        pass
    assert str(e.value) == refusal(db, version)
    with pytest.raises(UserError, match="upgrade rlhf-studio"):
        Store(db).hold()
    duckdb.connect(db).close()  # the refused hold let go of the file


MIGRATE_AHEAD = """
import sys
import duckdb
from store.db import latest_version, write
with write(sys.argv[1], timeout=20) as con:  # a newer rlhf-studio migrating the store while the app holds it
    con.execute("INSERT INTO schema_version (version) VALUES (?)", [latest_version() + 1])
"""


@pytest.mark.integration
def test_an_app_holding_the_store_stops_writing_once_a_newer_rlhf_studio_migrated_it(db):
    store = Store(db).hold()
    try:
        with store.write() as con:
            add_prompts(con, ["before"], "app")
        newer = subprocess.run([sys.executable, "-c", MIGRATE_AHEAD, db], cwd=ROOT, timeout=60)
        assert newer.returncode == 0
        with pytest.raises(UserError) as e, store.write() as con:
            add_prompts(con, ["after"], "app")
        assert str(e.value) == refusal(db, latest_version() + 1)
    finally:
        store.release()
    con = duckdb.connect(db, read_only=True)
    assert con.execute("SELECT text FROM prompts").fetchall() == [("before",)]
    con.close()

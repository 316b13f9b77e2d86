"""The store itself: schema and migrations, prompts, the lock held by another process, stats, snapshots."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from annotation.imports import import_native
from store.db import connect, latest_version, migrate, schema_version, write
from store.errors import UserError
from store.pairs import stats
from store.prompts import pending_count, pending_prompts
from store.snapshot import split_of, verify_snapshot, write_snapshot
from tests.conftest import query, store_rows, write_jsonl


def test_init_creates_then_reports_up_to_date(tmp_path, capsys):
    from app.faces.cli import main

    db = str(tmp_path / "s.duckdb")
    assert main(["--db", db, "init"]) == 0
    v = latest_version()
    assert capsys.readouterr().out.strip() == f"store {db}: created (schema version {v}, latest {v})"
    assert main(["--db", db, "init"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_numbered_migrations_apply_once_in_order(tmp_path):
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "0002_add_note.sql").write_text("ALTER TABLE prompts ADD COLUMN note VARCHAR;")
    (folder / "0003_index.sql").write_text("CREATE INDEX prompts_source ON prompts (source);")
    con = duckdb.connect(str(tmp_path / "m.duckdb"))
    assert migrate(con, tmp_path / "none") == (0, 1)  # schema.sql alone is version 1
    assert migrate(con, folder) == (1, 3)
    assert migrate(con, folder) == (3, 3)
    assert schema_version(con) == 3
    assert "note" in [r[0] for r in con.execute("DESCRIBE prompts").fetchall()]


def test_a_failing_migration_changes_nothing_of_its_own_and_keeps_the_versions_before(tmp_path):
    """Each version is one transaction: the store stops at the last whole version before the broken one."""
    folder = tmp_path / "migrations"
    folder.mkdir()
    (folder / "0002_ok.sql").write_text("ALTER TABLE prompts ADD COLUMN note VARCHAR;")
    (folder / "0003_broken.sql").write_text(
        "ALTER TABLE prompts ADD COLUMN other VARCHAR; ALTER TABLE no_such_table ADD COLUMN x INT;"
    )
    con = duckdb.connect(str(tmp_path / "m.duckdb"))
    migrate(con, tmp_path / "none")
    with pytest.raises(duckdb.Error):
        migrate(con, folder)
    assert schema_version(con) == 2
    columns = [r[0] for r in con.execute("DESCRIBE prompts").fetchall()]
    assert "note" in columns and "other" not in columns


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("p.txt", "What is DNS?\n\n  Name a prime.  \nWhat is DNS?\n", "prompts: 2 added, 1 already in the store"),
        ("p.jsonl", '{"prompt": "a"}\n{"prompt": "b", "id": 3}\n', "prompts: 2 added, 0 already in the store"),
        ("p.csv", 'id,prompt\n1,"a, with comma"\n2,b\n', "prompts: 2 added, 0 already in the store"),
    ],
)
def test_prompts_add(cli, db, tmp_path, name, content, expected):
    (tmp_path / name).write_text(content)
    code, out, err = cli("prompts", "add", str(tmp_path / name))
    assert code == 0, err
    assert out.strip() == expected
    code, out, _ = cli("prompts", "add", str(tmp_path / name))
    assert "0 added" in out


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("p.csv", "id,text\n1,a\n", "the CSV has no 'prompt' column (columns: id, text)"),
        (
            "p.jsonl",
            '{"prompt": "a"}\n{"text": "b"}\n',
            "p.jsonl line 2: needs a 'prompt' field (a string or a conversation) or 'messages'",
        ),
        ("p.jsonl", '{"prompt": "a"\n', "p.jsonl line 1: not valid JSON"),
        ("p.txt", "", "the file is empty"),
        ("p.pdf", "x", "prompts come from .txt, .jsonl or .csv files"),
    ],
)
def test_bad_prompt_files(cli, db, tmp_path, name, content, message):
    before = store_rows(db)
    (tmp_path / name).write_text(content)
    code, _, err = cli("prompts", "add", str(tmp_path / name))
    assert code == 1 and message in err and len(err.strip().splitlines()) == 1
    assert store_rows(db) == before


HOLDER = textwrap.dedent(
    """
    import sys, time, duckdb
    con = duckdb.connect(sys.argv[1])
    print("holding", flush=True)
    time.sleep(60)
    """
)


@pytest.mark.integration
def test_a_store_held_by_another_process_is_one_clear_error(db, tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, db], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        with pytest.raises(UserError, match=rf"store .* is in use by another process \(process {holder.pid}\)"):
            with connect(db, timeout=0.5):
                pass
        env = {**os.environ, "RLHF_LOCK_TIMEOUT": "0.5"}
        r = subprocess.run(
            [sys.executable, "-m", "app.faces.cli", "--db", db, "pairs", "--stats"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 1 and r.stdout == ""
        assert r.stderr.startswith("error: store") and "in use by another process" in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    finally:
        holder.kill()
        holder.wait()
    with connect(db):  # released: usable again
        pass


@pytest.mark.store_file
def test_lock_is_released_between_commands(cli, db, tmp_path):
    """A CLI command holds the file only for its transaction: another connection opens right after."""
    write_jsonl(tmp_path / "r.jsonl", [{"prompt": "p", "responses": ["a", "b"], "ranks": [1, 2]}])
    assert cli("import", str(tmp_path / "r.jsonl"))[0] == 0
    duckdb.connect(db).close()


def test_read_commands_refuse_a_missing_store(tmp_path, capsys):
    from app.faces.cli import main

    missing = tmp_path / "none.duckdb"
    assert main(["--db", str(missing), "pairs", "--stats"]) == 1
    assert capsys.readouterr().err.strip() == f"error: no store at {missing}: run `rlhf init` (or pass --db)"
    assert not missing.exists()


def _fill(db, tmp_path, n_prompts=40):
    rows = [
        {"prompt": f"prompt {i}", "responses": [f"{i}-a", f"{i}-b", f"{i}-c"], "ranks": [1, 2, 3], "annotator": a}
        for i in range(n_prompts)
        for a in ("ann", "bob")
    ]
    rows.append({"prompt": "tied", "responses": ["x", "y"], "ranks": [1, 1]})
    import_native(db, write_jsonl(tmp_path / "r.jsonl", rows))


def test_stats(cli, db, tmp_path):
    _fill(db, tmp_path, n_prompts=2)
    with connect(db) as con:
        s = stats(con)
    # 2 prompts x 2 annotators x C(3,2) = 12 pairs; the tied ranking gives 0 pairs and 1 tied pair
    assert (s["prompts"], s["rankings"], s["pairs"], s["tied_pairs"]) == (3, 5, 12, 1)
    assert s["annotators"][0] == {"annotator": "ann", "rankings": 2, "skipped": 0, "pairs": 6}
    (tmp_path / "new.txt").write_text("a new prompt\nanother\n")
    assert cli("prompts", "add", str(tmp_path / "new.txt"))[0] == 0
    with connect(db) as con:  # the size of the next `rlhf sample`: prompts with no response, at most the limit
        assert pending_count(con) == len(pending_prompts(con)) == stats(con)["prompts_pending"] == 2
        assert pending_count(con, 1) == 1 and pending_count(con, 5) == 2
    code, out, _ = cli("pairs", "--stats")
    assert code == 0 and "pairs 12 (tied pairs left out: 1)" in out


def test_snapshot_is_split_by_prompt_and_hashed(db, tmp_path):
    _fill(db, tmp_path)
    with connect(db) as con:
        folder = write_snapshot(con, tmp_path / "snaps", eval_fraction=0.25, seed=3)
    manifest = verify_snapshot(folder)
    train, evals = (duckdb.sql(f"SELECT * FROM '{folder / f}'").fetchall() for f in ("train.parquet", "eval.parquet"))
    cols = manifest["columns"]
    prompts = {s: {r[cols.index("prompt")] for r in rows} for s, rows in (("train", train), ("eval", evals))}
    assert prompts["train"].isdisjoint(prompts["eval"])
    assert len(train) + len(evals) == 40 * 2 * 3
    assert manifest["splits"]["train"]["pairs"] == len(train) and manifest["splits"]["eval"]["pairs"] == len(evals)
    assert manifest["splits"]["eval"]["prompts"] == len(prompts["eval"]) > 0
    # which side a prompt lands on is a function of the prompt and the seed alone
    assert prompts["eval"] == {f"prompt {i}" for i in range(40) if split_of(f"prompt {i}", 0.25, 3) == "eval"}
    assert query(db, "SELECT content_sha256 FROM snapshots") == [(manifest["content_sha256"],)]
    # every file read-only by its mode bits (os.access says writable to root whatever the mode)
    assert all(f.stat().st_mode & 0o222 == 0 for f in folder.iterdir()), [
        oct(f.stat().st_mode) for f in folder.iterdir()
    ]
    assert oct((folder / "manifest.json").stat().st_mode)[-3:] == "444"


def test_a_changed_snapshot_file_is_detected(db, tmp_path):
    _fill(db, tmp_path, n_prompts=4)
    with connect(db) as con:
        folder = write_snapshot(con, tmp_path / "snaps", eval_fraction=0.5)
    manifest = json.loads((folder / "manifest.json").read_text())
    target = folder / manifest["splits"]["train"]["file"]
    target.chmod(0o644)
    target.write_bytes(target.read_bytes() + b"x")
    with pytest.raises(UserError, match="train file does not match its manifest hash"):
        verify_snapshot(folder)


def test_snapshot_of_an_empty_store(db, tmp_path):
    with connect(db) as con, pytest.raises(UserError, match="no pairs in the store yet"):
        write_snapshot(con, tmp_path / "snaps")
    assert not list((tmp_path / "snaps").iterdir())


WRITER = textwrap.dedent(
    """
    import sys
    from store.db import write
    from store.prompts import add_prompts
    with write(sys.argv[1], timeout=20) as con:
        add_prompts(con, ["from the CLI"], "cli")
    print("written", flush=True)
    """
)


@pytest.mark.integration
def test_a_holding_process_hands_the_store_to_a_command_and_takes_it_back(db):
    """The app keeps the store open for speed; a CLI command still gets its turn (handoff file)."""
    from store.db import Store
    from store.prompts import add_prompts

    store = Store(db).hold()
    try:
        with write(store) as con:
            add_prompts(con, ["from the app"], "app")
        cli = subprocess.Popen(
            [sys.executable, "-c", WRITER, db],
            stdout=subprocess.PIPE,
            text=True,
            cwd=str(Path(__file__).resolve().parent.parent),
        )
        # the app keeps working; at its next turn it sees the handoff file and lets go
        for i in range(200):
            with write(store) as con:
                add_prompts(con, [f"app {i}"], "app")
            if cli.poll() is not None:
                break
        assert cli.wait(timeout=60) == 0 and cli.stdout.read().strip() == "written"
        with write(store) as con:  # and it has the store again
            add_prompts(con, ["after"], "app")
            texts = {t for (t,) in con.execute("SELECT text FROM prompts").fetchall()}
        assert {"from the app", "from the CLI", "after"} <= texts
        assert not Path(db + ".handoff").exists()
    finally:
        store.release()


@pytest.mark.store_file
def test_a_store_object_is_its_path_and_owns_its_locks(db):
    """The CLI and the app pass one Store down; it names its file wherever a path is taken, and no lock or
    connection lives at module level (two Stores of one file share nothing but DuckDB's open database)."""
    import threading

    import store.db as module
    from store.db import Store, store_of
    from store.prompts import add_prompts

    store = Store(db)
    assert str(store) == db and Path(store) == Path(db) and f"{store}" == db and store_of(store) is store
    assert store_of(db) is not store_of(db)  # a bare path is a one-off Store
    kinds = (dict, set, type(threading.Lock()), type(threading.RLock()), duckdb.DuckDBPyConnection)
    assert [n for n, v in vars(module).items() if isinstance(v, kinds) and not n.startswith("__")] == []
    other = Store(db).hold()
    try:
        with store._writers:  # one Store's writer turn does not block another's
            with write(other) as con:
                add_prompts(con, ["through the held store"], "test")
        with connect(store) as con:
            assert con.execute("SELECT count(*) FROM prompts").fetchone() == (1,)
    finally:
        other.release()
    assert other._held is None


def test_a_pairs_file_is_frozen_into_a_snapshot_by_the_stores_split_rule(db, tmp_path, models):
    """`--pairs FILE` trains on a snapshot of the file, made as the store's are: split by prompt with split_of,
    read-only, recorded; margin and ranking_id kept where given; editing the file later changes no run."""
    from app.jobs.training import prepare_pairs_run
    from training.pairwise.pairs import load_pairs
    from training.reward.config import RewardConfig

    rows = [
        {"prompt": f"p{i}", "chosen": f"good {i}", "rejected": f"bad {i}{j}", "margin": j + 1, "ranking_id": i}
        for i in range(30)
        for j in range(2)
    ]
    rows[0] = {"prompt": "p0", "chosen": "good 0", "rejected": "bad 00"}  # no margin, no ranking id
    pairs = write_jsonl(tmp_path / "pairs.jsonl", rows)
    cfg = RewardConfig(model=models["reward"], eval_fraction=0.2, seed=5)
    run = prepare_pairs_run(db, cfg, tmp_path / "runs", str(pairs))
    data = Path(json.loads((run / "config.json").read_text())["data"])
    assert (
        data.parent == (tmp_path / "snapshots").resolve() and oct((data / "train.parquet").stat().st_mode)[-3:] == "444"
    )
    manifest = verify_snapshot(data)
    assert manifest["from"]["file"] == str(pairs.resolve()) and len(manifest["from"]["sha256"]) == 64
    train, evals = load_pairs(str(data))
    assert {r["prompt"] for r in evals} == {f"p{i}" for i in range(30) if split_of(f"p{i}", 0.2, 5) == "eval"}
    assert len(train) + len(evals) == 60 and all(r["source"] == "file" for r in train + evals)
    by_pair = {(r["prompt"], r["rejected"]): r for r in train + evals}
    assert by_pair[("p3", "bad 31")]["margin"] == 2.0 and by_pair[("p3", "bad 31")]["ranking_id"] == 3
    assert by_pair[("p0", "bad 00")]["margin"] is None and by_pair[("p0", "bad 00")]["ranking_id"] is None
    assert query(db, "SELECT path FROM snapshots") == [(str(data),)]
    pairs.write_text("")  # the run's data is the snapshot, not the file
    assert load_pairs(str(data)) == (train, evals)


@pytest.mark.parametrize(
    "row, message",
    [
        ({"prompt": "p", "chosen": "a", "rejected": "b", "margin": "big"}, "row 1: margin must be a number"),
        ({"prompt": "p", "chosen": "a", "rejected": "b", "ranking_id": 1.5}, "ranking_id an integer, where given"),
        ({"prompt": "p", "chosen": 3, "rejected": "b"}, "row 1: prompt, chosen and rejected must be text"),
    ],
)
def test_a_bad_pairs_file_is_one_error_and_no_snapshot(db, tmp_path, models, row, message):
    from app.jobs.training import prepare_pairs_run
    from training.reward.config import RewardConfig

    pairs = write_jsonl(tmp_path / "pairs.jsonl", [row])
    before = store_rows(db)
    with pytest.raises(UserError, match=message):
        prepare_pairs_run(db, RewardConfig(model=models["reward"]), tmp_path / "runs", str(pairs))
    assert store_rows(db) == before and not (tmp_path / "snapshots").exists()

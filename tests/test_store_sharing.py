"""The app's held store is shared, not taken in turns: a snapshot or a pairs export being written (a read) does not
hold up an annotator's submit (a write), and what it writes is the store as it was when it began (issue 26 item 11).
Letting the file go to another process still waits until every use of it has ended."""

import json
import threading
from pathlib import Path

import pytest

import store.snapshot
from annotation.actions import write_pairs_file
from annotation.imports import import_native
from app.jobs.training import prepare_pairs_run
from store.db import Store, connect, write
from store.prompts import add_prompts
from tests.conftest import dead_pid, write_jsonl
from training.reward.config import RewardConfig

WAIT_S = 30  # far longer than a one-row write takes; the old single lock made it wait until the read ended


def _rankings(tmp_path, first: int, n: int, name: str) -> Path:
    rows = [
        {"prompt": f"prompt {i}", "responses": [f"{i}-a", f"{i}-b", f"{i}-c"], "ranks": [1, 2, 3]}
        for i in range(first, first + n)
    ]
    return write_jsonl(tmp_path / name, rows)


def _submit_meanwhile(store_, path: Path, seen: list) -> None:
    """Submit a ranking from another thread (as an annotator's request would) and note whether it landed in time."""
    done = threading.Thread(target=import_native, args=(store_, path), daemon=True)
    done.start()
    done.join(WAIT_S)
    seen.append(not done.is_alive())
    threads.append(done)  # a submit still waiting lands once the read ends: joined after it


threads: list[threading.Thread] = []


def _pairs(store_) -> int:
    with connect(store_) as con:
        return con.execute("SELECT count(*) FROM pairs").fetchone()[0]


def test_a_submit_lands_while_a_training_snapshot_is_written(db, tmp_path, tiny_model_dir, monkeypatch):
    held = Store(db).hold()
    try:
        import_native(held, _rankings(tmp_path, 0, 20, "first.jsonl"))
        before = _pairs(held)
        seen, write_split = [], store.snapshot._write_split

        def slow_split(con, folder, split, where, source="pairs", votes=False):
            if not seen:  # an annotator submits while the first split is being copied out
                _submit_meanwhile(held, _rankings(tmp_path, 100, 1, "during.jsonl"), seen)
            return write_split(con, folder, split, where, source, votes)

        monkeypatch.setattr(store.snapshot, "_write_split", slow_split)
        cfg = RewardConfig(model=str(tiny_model_dir), max_steps=1, eval_fraction=0.2)
        run = prepare_pairs_run(held, cfg, tmp_path / "runs")
        for t in threads:
            t.join()
        assert seen == [True]  # the submit did not wait for the snapshot
        assert _pairs(held) == before + 3  # it landed: 3 pairs from K=3
        manifest = json.loads(
            (Path(json.loads((run / "config.json").read_text())["data"]) / "manifest.json").read_text()
        )
        assert sum(s["pairs"] for s in manifest["splits"].values()) == before  # the snapshot is the store as it began
        with connect(held) as con:
            recorded = con.execute(
                "SELECT s.content_sha256 FROM runs r JOIN snapshots s USING (snapshot_id) WHERE r.run_id = ?",
                [run.name],
            ).fetchone()
        assert recorded == (manifest["content_sha256"],)
    finally:
        held.release()


def test_a_submit_lands_while_a_pairs_export_is_written(db, tmp_path, monkeypatch):
    import store.pairs

    held = Store(db).hold()
    try:
        import_native(held, _rankings(tmp_path, 0, 10, "first.jsonl"))
        before, seen, write_csv = _pairs(held), [], store.pairs._write_csv

        def slow_csv(con, query, path):
            write_csv(con, query, path)  # the file is written; an annotator submits before the export counts it
            _submit_meanwhile(held, _rankings(tmp_path, 100, 1, "during.jsonl"), seen)

        monkeypatch.setattr(store.pairs, "_write_csv", slow_csv)
        line = write_pairs_file(held, tmp_path / "pairs.csv")
        for t in threads:
            t.join()
        assert seen == [True] and _pairs(held) == before + 3
        assert (
            line == f"wrote {before} pairs to {tmp_path / 'pairs.csv'}"
        )  # the count is the file's, not the store's now
        assert len((tmp_path / "pairs.csv").read_text().splitlines()) == before + 1  # and a header
    finally:
        held.release()


@pytest.mark.store_file
def test_the_handoff_waits_for_every_use_and_a_nested_use_never_deadlocks(db):
    held = Store(db).hold()
    handoff = Path(db + ".handoff")
    try:
        with connect(held) as con:
            handoff.write_text("1")  # another process asks for the file while we read
            deadline = threading.Event()
            deadline.wait(0.3)  # the watcher (every 50 ms) is now waiting for our use to end
            assert held._held is not None  # not closed under us
            with write(held) as inner:  # a nested use in the same thread goes ahead
                add_prompts(inner, ["nested"], "test")
            assert con.execute("SELECT count(*) FROM prompts").fetchone() == (1,)
        # our use ended: the watcher lets go of the file while the handoff file is fresh
        for _ in range(200):
            if held._held is None:
                break
            threading.Event().wait(0.05)
        assert held._held is None
        handoff.unlink()
        with write(held) as con:  # and takes it back at the next use
            add_prompts(con, ["after"], "test")
            assert con.execute("SELECT count(*) FROM prompts").fetchone() == (2,)
    finally:
        handoff.unlink(missing_ok=True)
        held.release()


@pytest.mark.store_file
def test_a_dead_commands_handoff_file_does_not_hold_up_the_app(db):
    """Issue 51 item 10: a CLI command killed while it waited for the store left its handoff file, and the app let
    go of the store and waited until the file was 30 s old. The file names its asker's process: one that is gone
    is stale at once, and the app removes it and carries on."""
    dead = dead_pid()
    held = Store(db).hold()
    handoff = Path(db + ".handoff")
    try:
        handoff.write_text(str(dead))
        done = threading.Event()

        def submit():
            with write(held) as con:
                add_prompts(con, ["after a killed command"], "test")
            done.set()

        threading.Thread(target=submit, daemon=True).start()
        assert done.wait(10)  # the old code waited out the 30 s
        assert not handoff.exists()
        assert held._held is not None  # the app kept its connection
    finally:
        handoff.unlink(missing_ok=True)
        held.release()

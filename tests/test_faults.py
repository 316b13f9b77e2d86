"""Faults: kill -9 of the app in the middle of a batch import and of sampling, a second app on the same store, a full
disk under a snapshot and under a checkpoint, a training process killed between two checkpoint files. After each,
the store opens with every acknowledged row and no half-written one, and runs show what really happened."""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gradio_client import handle_file

from app.faces.cli import main
from bench.app_server import ROOT, AppServer
from tests.builders import seed_store, separable_pairs
from tests.conftest import query, store_rows, write_jsonl


def ls_export(path: Path, n: int, first: int = 0) -> Path:
    """A Label Studio JSON export of n Ranker annotations (tasks first, first+1, ...), 4 items each (6 pairs each)."""
    tasks = []
    for t in range(first, first + n):
        items = [{"id": f"i{j}", "body": f"answer {j} to question {t}"} for j in range(4)]
        ranker = {"from_name": "rank", "to_name": "items", "type": "ranker", "value": {"ranker": {"ranked": []}}}
        ranker["value"]["ranker"]["ranked"] = ["i2", "i0", "i3", "i1"]
        ann = {"id": 10_000 + t, "completed_by": 1, "lead_time": 9.0, "result": [ranker]}
        tasks.append({"id": t + 1, "data": {"prompt": f"Question {t}?", "items": items}, "annotations": [ann]})
    path.write_text(json.dumps(tasks))
    return path


# Loaded into the app's process (sitecustomize): once an import has written every row of its transaction, say so in
# a file and wait, so the kill -9 lands inside the transaction, after its writes and before its commit.
IMPORT_HOOK = """
import os, time
import store.rankings as rankings
_insert = rankings.insert_rankings
def insert_rankings(con, items, import_id=None):
    result = _insert(con, items, import_id=import_id)
    if len(items) >= 100:
        open(os.environ["RLHF_TEST_INSIDE"], "w").write(str(result.added))
        time.sleep(120)
    return result
rankings.insert_rankings = insert_rankings
"""


def hooked(tmp_path: Path, code: str) -> str:
    """A PYTHONPATH under which every Python process starts by running `code` (as its sitecustomize), then finds
    this repository."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(code)
    return os.pathsep.join([str(hook), str(ROOT)])


@pytest.mark.integration
def test_kill_9_inside_a_batch_import_leaves_all_of_it_or_none(db, tmp_path):
    """1,000 rankings are written in one transaction; the app is killed after every row is written and before the
    commit. The store then has the ranking acknowledged before, and none of the 1,000."""
    inside = tmp_path / "inside"
    env = {"PYTHONPATH": hooked(tmp_path, IMPORT_HOOK), "RLHF_TEST_INSIDE": str(inside)}
    acked = ls_export(tmp_path / "acked.json", 1, first=5000)
    big = ls_export(tmp_path / "big.json", 1000)
    app = AppServer(db, env=env)
    try:
        client = app.client()
        assert "rankings added 1" in client.predict(handle_file(str(acked)), "", api_name="/import_ls")
        job = client.submit(handle_file(str(big)), "", api_name="/import_ls")
        deadline = time.monotonic() + 120
        while not inside.exists():
            assert time.monotonic() < deadline and not job.done()
            time.sleep(0.05)
        assert inside.read_text() == "1000"  # every row written, not committed
        app.kill(signal.SIGKILL)
    finally:
        app.stop()
    assert query(db, "SELECT count(*) FROM rankings") == [(1,)]
    assert query(db, "SELECT count(*) FROM ranking_items") == [(4,)]
    assert query(db, "SELECT count(*) FROM imports") == [(1,)]
    assert query(db, "SELECT count(*) FROM prompts") == [(1,)]
    # the same file imports whole afterwards
    assert main(["--db", db, "import-ls", str(big)]) == 0
    assert query(db, "SELECT count(*), count(DISTINCT external_key) FROM rankings") == [(1001, 1001)]


@pytest.mark.integration
def test_kill_9_during_sampling_keeps_whole_prompts_and_the_next_run_finishes(db, tmp_path, tiny_model_dir):
    """Sampling writes each batch of prompts in one transaction. Killed after the first batch landed, the store
    has K responses for every sampled prompt and none for the rest; sampling again does only the rest."""
    # two batches of 16 prompts (the app's batch_prompts), 128 tokens each: the first lands, the kill comes before the
    # second; the tiny model's flat distribution makes each batch's top-p sort of its 49,152-token vocabulary slow
    (tmp_path / "p.txt").write_text("".join(f"Write a line about the number {i}.\n" for i in range(32)))
    assert main(["--db", db, "prompts", "add", str(tmp_path / "p.txt")]) == 0
    app = AppServer(db, "--model", str(tiny_model_dir))
    try:
        job = app.client().submit(2, 0, api_name="/sample")
        deadline = time.monotonic() + 240
        while query(db, "SELECT count(*) FROM responses") == [(0,)]:
            assert time.monotonic() < deadline and not job.done()
            time.sleep(0.2)
        app.kill(signal.SIGKILL)
    finally:
        app.stop()
    per_prompt = dict(
        query(
            db,
            "SELECT p.prompt_id, count(r.response_id) FROM prompts p LEFT JOIN responses r "
            "USING (prompt_id) GROUP BY ALL",
        )
    )
    assert set(per_prompt.values()) == {0, 2}  # whole prompts only: K responses or none
    first = query(db, "SELECT response_id, text FROM responses ORDER BY response_id")
    assert 0 < len(first) < 64
    again = AppServer(db, "--model", str(tiny_model_dir))
    try:
        line = again.client().predict(2, 0, api_name="/sample")
    finally:
        again.stop()
    assert line.startswith(f"sampled {64 - len(first)} responses for {32 - len(first) // 2} prompts")
    assert query(db, "SELECT count(*), count(DISTINCT prompt_id) FROM responses") == [(64, 32)]
    assert query(db, f"SELECT response_id, text FROM responses ORDER BY response_id LIMIT {len(first)}") == first


@pytest.mark.integration
def test_a_second_app_on_the_same_store_is_refused_and_the_first_keeps_working(db, tmp_path):
    seed_store(db, 2)
    first = AppServer(db)
    try:
        client = first.client()
        env = {**os.environ, "RLHF_LOCK_TIMEOUT": "3"}
        second = subprocess.run(
            [sys.executable, "-m", "app.faces.cli", "--db", db, "ui", "--port", "1"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 1
        assert second.stderr.strip().startswith(f"error: store {db} is in use by another process (process ")
        assert len(second.stderr.strip().splitlines()) == 1
        acked = ls_export(tmp_path / "acked.json", 1)
        assert "rankings added 1" in client.predict(handle_file(str(acked)), "", api_name="/import_ls")
        first.kill(signal.SIGKILL)
    finally:
        first.stop()
    assert query(db, "SELECT count(*) FROM rankings WHERE source = 'labelstudio'") == [(1,)]


@contextlib.contextmanager
def small_disk(path: Path, size: str):
    """A tmpfs of `size` at `path`: a disk that fills up (needs root, as CI and this machine have)."""
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """Fill the disk up to `leave` bytes free."""
    free = shutil.disk_usage(disk).free
    filler = disk / "filler"
    with filler.open("wb") as f:
        f.write(b"\0" * max(free - leave, 0))
    return filler


@pytest.mark.integration
def test_a_full_disk_under_a_snapshot_is_one_line_and_changes_nothing(cli, db, tmp_path, tiny_model_dir):
    rows = [
        {
            "prompt": f"Prompt {i} " + "word " * 30,
            "responses": [f"{c} {i} " * 20 for c in "abcd"],
            "ranks": [1, 2, 3, 4],
        }
        for i in range(300)
    ]
    assert cli("import", str(write_jsonl(tmp_path / "r.jsonl", rows)))[0] == 0
    before = store_rows(db)
    with small_disk(tmp_path / "disk", "32k") as disk:
        code, out, err = cli("train-rm", "--model", str(tiny_model_dir), "--runs-dir", str(disk / "runs"))
        assert code == 1 and len(err.strip().splitlines()) == 1
        assert err.startswith(f"error: cannot write snapshot under {disk / 'snapshots'}: ")
        assert "No space left on device" in err
        assert list((disk / "snapshots").iterdir()) == []  # the half-written folder went with the error
        assert not (disk / "runs").exists() or list((disk / "runs").iterdir()) == []
    assert store_rows(db) == before  # no snapshot row, no run row


def _train(tmp: Path, model: Path, runs: Path, max_steps: int = 16) -> tuple[Path, subprocess.Popen]:
    from app.jobs.training import prepare_run
    from training.launcher import launch
    from training.reward.config import RewardConfig

    pairs = write_jsonl(tmp / "pairs.jsonl", separable_pairs(160))
    cfg = RewardConfig(model=str(model), max_steps=max_steps, lr=1e-3, eval_fraction=0.25, save_every=4, zero_stage=2)
    run = prepare_run(str(tmp / "s.duckdb"), cfg, runs, str(pairs))
    return run, launch("reward", run)


def _wait_for(cond, proc, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        if proc.poll() is not None:
            return
        time.sleep(0.02)


@pytest.mark.integration
def test_a_full_disk_under_a_checkpoint_fails_honestly_and_resumes(tmp_path, tiny_model_dir):
    """The disk fills up after the first checkpoint: the next save fails, the run says why, the first checkpoint
    is intact, and with space freed the run resumes from it and finishes."""
    from app.jobs.training import resume_run
    from training.runs import effective_status, read_metrics

    with small_disk(tmp_path / "disk", "600m") as disk:
        run, proc = _train(tmp_path, tiny_model_dir, disk / "runs", max_steps=48)
        ckpt = run / "checkpoints"
        # past step 4's checkpoint (DeepSpeed writes `latest`, then copies its recovery scripts beside it); the run
        # goes on meanwhile, so which checkpoint meets the full disk is read from what happened, not assumed
        _wait_for(lambda: any(r.get("step", 0) >= 5 and "loss/rm" in r for r in read_metrics(run)), proc)
        os.killpg(proc.pid, signal.SIGSTOP)  # hold every rank still while the disk fills up
        filler = fill(disk, leave=256 * 1024)
        os.killpg(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=300) != 0
        status = effective_status(run)
        assert status["state"] == "failed", status
        latest = (ckpt / "latest").read_text()
        said = r"No space left on device: checkpoint (step\d+) did not fit in .* \(removed; resume continues from "
        said += r"(step\d+)\)"
        m = re.search(said, status["error"])
        assert m and m.group(2) == latest, status
        assert m.group(1) == latest or not (ckpt / m.group(1)).exists()  # no half checkpoint left
        assert len(list((ckpt / latest).iterdir())) == 2  # the one `latest` names is whole
        filler.unlink()
        final = resume_run(run)
        assert final["state"] == "finished" and final["step"] == 48
        resumed = [r for r in read_metrics(run) if r.get("event") == "resumed"]
        assert resumed and resumed[0]["step"] == int(latest[4:])


HOOK = """
import os, signal, torch
_save = torch.save
_seen = []
def save(obj, f, *args, **kwargs):
    _save(obj, f, *args, **kwargs)
    if "/step8/" in str(f):
        _seen.append(str(f))
        with open(os.environ["RLHF_TEST_SAVED"], "a") as log:
            log.write(str(f) + "\\n")
        os.kill(os.getpid(), signal.SIGKILL)  # right after the first file of the step-8 checkpoint
torch.save = save
"""


@pytest.mark.integration
def test_killed_between_two_checkpoint_files_resumes_from_the_last_whole_one(tmp_path, tiny_model_dir, monkeypatch):
    """ZeRO-2 writes a checkpoint as two files (model states, optimizer states) and then `latest`. The process is
    killed after the first file of step 8: `latest` still names step 4, which is whole, and the resume starts there
    and finishes."""
    from app.jobs.training import resume_run
    from training.runs import effective_status, read_metrics

    saved = tmp_path / "saved.txt"
    monkeypatch.setenv("PYTHONPATH", hooked(tmp_path, HOOK))  # the launcher passes it on to the ranks
    monkeypatch.setenv("RLHF_TEST_SAVED", str(saved))
    run, proc = _train(tmp_path, tiny_model_dir, tmp_path / "runs")
    proc.wait(timeout=300)
    monkeypatch.undo()  # the resume runs without the hook
    (written,) = saved.read_text().splitlines()  # one file of step 8 was written, then the kill
    ckpt = run / "checkpoints"
    assert sorted(p.name for p in (ckpt / "step8").iterdir()) == [Path(written).name]
    assert len(list((ckpt / "step4").iterdir())) == 2 and (ckpt / "latest").read_text() == "step4"
    deadline = time.monotonic() + 30
    while effective_status(run)["state"] != "failed":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    final = resume_run(run)
    assert final["state"] == "finished" and final["step"] == 16
    resumed = [r for r in read_metrics(run) if r.get("event") == "resumed"]
    assert resumed and resumed[0]["step"] == 4
    # step 8 was written whole the second time, then dropped with step 12 once step 16 was down: only the last stays
    assert sorted(p.name for p in ckpt.glob("step*")) == ["step16"] and len(list((ckpt / "step16").iterdir())) == 2

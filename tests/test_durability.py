"""A file or folder renamed into place is on disk first: status files, snapshots, backups and restores fsync what
they wrote before the rename and the folder it lands in after it, so a power cut leaves the old one or the whole new
one, never a name pointing at empty or short files."""

import os
from pathlib import Path

import pytest

from store.backup import backup, restore
from store.db import write
from store.snapshot import write_snapshot
from tests.conftest import write_jsonl
from training.runs import write_json_atomic

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names an fd by /proc/self/fd")


@pytest.fixture
def disk_calls(monkeypatch) -> list[tuple]:
    """Every os.fsync (by the path its fd names) and os.rename/os.replace, in order."""
    calls = []
    real = {name: getattr(os, name) for name in ("fsync", "rename", "replace")}

    def fsync(fd):
        calls.append(("fsync", Path(os.readlink(f"/proc/self/fd/{fd}"))))
        real["fsync"](fd)

    def renamer(name):
        def rename(src, dst, *args, **kwargs):
            calls.append(("rename", Path(src).resolve(), Path(dst).resolve()))
            real[name](src, dst, *args, **kwargs)

        return rename

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", renamer("rename"))
    monkeypatch.setattr(os, "replace", renamer("replace"))
    return calls


def seed(cli, tmp_path: Path) -> None:
    rows = [{"prompt": f"Prompt {i}", "responses": [f"a{i}", f"b{i}"], "ranks": [1, 2]} for i in range(4)]
    assert cli("import", str(write_jsonl(tmp_path / "r.jsonl", rows)))[0] == 0


def assert_durable_rename(calls: list[tuple], src: Path, dst: Path) -> None:
    """One rename src -> dst; everything src holds fsynced before it, and dst's folder after it."""
    renames = [i for i, c in enumerate(calls) if c[0] == "rename" and c[1:] == (src.resolve(), dst.resolve())]
    assert len(renames) == 1, calls
    before = {c[1] for c in calls[: renames[0]] if c[0] == "fsync"}
    after = {c[1] for c in calls[renames[0] + 1 :] if c[0] == "fsync"}
    names = [p.name for p in dst.iterdir()] if dst.is_dir() else []
    assert {src.resolve(), *(src.resolve() / n for n in names)} <= before
    assert dst.parent.resolve() in after


def test_write_json_atomic_fsyncs_the_file_before_the_rename_and_the_folder_after(tmp_path, disk_calls):
    folder = tmp_path.resolve()
    write_json_atomic(folder / "status.json", {"state": "running"})
    tmp, path = folder / ".status.json.tmp", folder / "status.json"
    assert disk_calls == [("fsync", tmp), ("rename", tmp, path), ("fsync", folder)]
    assert path.read_text() == '{\n  "state": "running"\n}\n'


def test_a_snapshot_is_fsynced_file_by_file_before_its_folder_is_renamed_into_place(cli, db, tmp_path, disk_calls):
    seed(cli, tmp_path)
    disk_calls.clear()
    with write(db) as con:
        final = write_snapshot(con, tmp_path / "snaps", eval_fraction=0.5)
    (src,) = {c[1] for c in disk_calls if c[0] == "rename"}
    assert src.parent == final.parent.resolve() and src.name.startswith(".snapshot-")
    assert {p.name for p in final.iterdir()} == {"train.parquet", "eval.parquet", "manifest.json", "README.md"}
    assert_durable_rename(disk_calls, src, final)


def test_a_backup_and_its_restore_are_fsynced_before_they_are_renamed_into_place(cli, db, tmp_path, disk_calls):
    seed(cli, tmp_path)
    out = tmp_path / "bk"
    disk_calls.clear()
    backup(db, out)
    assert_durable_rename(disk_calls, tmp_path / "bk.partial", out)
    assert (tmp_path / "bk.partial" / "manifest.json") in {c[1] for c in disk_calls if c[0] == "fsync"}
    disk_calls.clear()
    restore(out, tmp_path / "restored.duckdb")
    assert_durable_rename(disk_calls, tmp_path / "restored.duckdb.restoring", tmp_path / "restored.duckdb")


def test_pair_exports_label_studio_exports_and_frozen_prompts_are_fsynced_before_their_rename(
    cli, db, tmp_path, disk_calls
):
    from annotation.actions import write_ls_export, write_pairs_file
    from app.jobs.training import frozen_prompts

    seed(cli, tmp_path)
    for name in ("pairs.jsonl", "pairs.csv"):
        disk_calls.clear()
        write_pairs_file(db, tmp_path / name)
        assert_durable_rename(disk_calls, tmp_path / f".{name}.tmp", tmp_path / name)
    disk_calls.clear()
    write_ls_export(db, tmp_path / "ls")
    for name in ("tasks.json", "label_config.xml"):
        assert_durable_rename(disk_calls, tmp_path / "ls" / f".{name}.tmp", tmp_path / "ls" / name)
    (tmp_path / "prompts.txt").write_text("first\nsecond\n")
    disk_calls.clear()
    out = Path(frozen_prompts(str(tmp_path / "prompts.txt"), tmp_path / "snapshots"))
    (src,) = {c[1] for c in disk_calls if c[0] == "rename"}
    assert src.name.startswith(f".{out.name}.")
    assert_durable_rename(disk_calls, src, out)

"""A run folder: config.json, metrics.jsonl, status.json, train.log, checkpoints/, model/. Written by rank 0.

status.json is replaced atomically, so a reader (the CLI, the app) never sees half a file; a run whose process
died shows its last status, and the reader compares the pid (and the process's start time, recorded with it) with
the live processes."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path


def write_json_atomic(path: Path, obj: dict) -> None:
    write_text_atomic(path, json.dumps(obj, indent=2) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Write aside, then rename over path: a reader sees the old file or the new one, never half of either. The
    data is fsynced before the rename and the folder after it, or a power cut could keep the rename but not the
    data it names (an empty status.json) or lose the rename itself."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    """Make a rename in folder durable. (store/durable.py has its twin: training never imports store.)"""
    if os.name == "nt":  # Windows cannot open a folder, and needs no fsync for its renames
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class RunFiles:
    def __init__(self, folder: str | Path, rank: int = 0):
        self.folder = Path(folder)
        self.rank = rank
        self.started = time.time()

    def status(self, state: str, **extra) -> None:
        if self.rank == 0:
            write_json_atomic(
                self.folder / "status.json",
                {
                    "state": state,
                    **pid_record(os.getpid()),
                    "updated_at": time.time(),
                    "started_at": self.started,
                    **extra,
                },
            )

    def metrics(self, row: dict) -> None:
        if self.rank == 0:
            with (self.folder / "metrics.jsonl").open("a") as f:
                f.write(json.dumps({"time": round(time.time() - self.started, 3), **row}) + "\n")


STOP_FILE = "stop"
MEMBERS, ENSEMBLE_FILE = "members", "ensemble.json"  # a reward ensemble's run (training/reward/ensemble.py)


def link_tree(src: Path, dst: Path) -> None:
    """dst as a copy of src made of hard links (the weights once on disk), or a plain copy across file systems."""
    if dst.exists():
        shutil.rmtree(dst)
    try:
        shutil.copytree(src, dst, copy_function=os.link)
    except OSError:
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst)


def ensemble_members(run: str | Path) -> list[Path]:
    """The members' model folders of a reward ensemble's run, in order; [RUN/model] for a single reward model."""
    run = Path(run)
    path = run / ENSEMBLE_FILE
    if not path.is_file():
        return [run / "model"]
    return [run / m["model"] for m in json.loads(path.read_text())["members"]]


def request_stop(folder: str | Path) -> None:
    """Ask a running run to stop at its next step boundary (it checkpoints first, then ends as 'stopped')."""
    (Path(folder) / STOP_FILE).touch()


def stop_requested(folder: str | Path, device=None) -> bool:
    """True on every rank once rank 0 has seen the stop file, so all ranks leave the loop at the same step."""
    import torch

    folder = Path(folder)
    # an ensemble member's folder (RUN/members/i) stops with its run
    seen = (folder / STOP_FILE).exists() or (
        folder.parent.name == "members" and (folder.parent.parent / STOP_FILE).exists()
    )
    if not torch.distributed.is_initialized():
        return seen
    flag = torch.tensor([1 if seen else 0], dtype=torch.int32, device=device)
    torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
    return bool(flag.item())


def read_status(folder: str | Path) -> dict:
    try:
        return json.loads((Path(folder) / "status.json").read_text())
    except (OSError, ValueError):
        return {"state": "unknown"}


def read_metrics(folder: str | Path) -> list[dict]:
    path = Path(folder) / "metrics.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:  # a line being written right now
            break
    return rows


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat from field 3 (the state) on, so field N is [N - 3]; None where there is no
    /proc (not Linux) or no such process. (The command name, field 2, may hold spaces and parentheses.)"""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (field 22 of /proc/PID/stat); None without /proc."""
    fields = _proc_stat(pid)
    return int(fields[22 - 3]) if fields else None


def process_alive(pid: object, start_ticks: object = None) -> bool:
    """The process is there, not a zombie, and (where given) started at `start_ticks`. Without /proc, or without a
    start time, the pid alone is checked."""
    try:
        pid = int(pid)
        os.kill(pid, 0)
    except (OSError, TypeError, ValueError, OverflowError):
        return False
    fields = _proc_stat(pid)
    if fields is None:
        return True
    if fields[0] == "Z":  # a killed process not yet reaped by its parent is a zombie: as dead as it gets
        return False
    return start_ticks is None or start_ticks == int(fields[22 - 3])


def pid_record(pid: int) -> dict:
    """The fields status.json names its process by: the OS hands a dead run's pid to a later process, so the pid
    alone could keep a dead run 'running' forever; the pid and its start time name one process."""
    return {"pid": pid, "pid_start_ticks": process_start(pid)}


def effective_status(folder: str | Path) -> dict:
    """status.json, except that a 'starting' or 'running' run whose process is gone is reported as failed, never
    running forever."""
    status = read_status(folder)
    if status.get("state") in ("starting", "running") and not process_alive(
        status.get("pid"), status.get("pid_start_ticks")
    ):
        return {**status, "state": "failed", "error": "the training process is gone (killed or crashed)"}
    return status

"""Whether a process is still there, by its pid (and, where it was recorded, its start time): a training run's
status, a CLI command waiting for the store (store/db.py's handoff file), an app's private folder
(app/faces/private_files.py). The OS hands a dead process's pid to a later one, so a pid alone can only say
"gone"; the pid and its start time name one process."""

from __future__ import annotations

import os
from pathlib import Path


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

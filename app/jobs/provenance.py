"""What made a results file: the command, the commit (and whether the tree had changes), the date, the machine and
its CPU model (two machines of one architecture and core count can differ twofold in speed), and the GPU where one
is used. Every results file README or docs/ quotes records it (issue 53); bench/ and the demo studies write it."""

from __future__ import annotations

import datetime as dt
import os
import platform
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
_invoked: list[str] | None = None  # the arguments of the `rlhf` command this process runs (app/faces/cli.py::main)


def invoked(argv: list[str]) -> None:
    global _invoked
    _invoked = list(argv)


def cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine() or "unknown"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")


def machine() -> str:
    import torch

    return f"{platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}"


def commit() -> str:
    """The checkout's short commit, with "+changes" where tracked files outside docs/ differ from it (results files
    written there do not change what made them; "unknown" outside git)."""
    git = ["git", "-C", str(ROOT)]
    try:
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        status = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + ("+changes" if status.stdout.strip() else "")


def provenance(argv: list[str] | None = None, program: str = "rlhf") -> dict:
    """The record a results file keeps of what made it; `argv` is the command's arguments after the program (by
    default the `rlhf` command this process runs)."""
    import torch

    if argv is None:
        argv = _invoked if _invoked is not None else ["(not run from the rlhf command)"]
    out = {
        "command": shlex.join([*shlex.split(program), *argv]),
        "commit": commit(),
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": machine(),
        "cpu": cpu_model(),
    }
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
    return out

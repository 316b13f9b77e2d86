"""Folders only the app's own OS user can read: where downloads are written and where Gradio keeps uploads and its
copies of downloads (docs/reliability.md, "Threat model": another local user of a shared host).

A fixed name in /tmp can be planted by anyone (a symlink to a folder of the app user's, which a clean-up would then
empty), so the process's root is made fresh by `mkdtemp` (a random name, mode 700, created atomically) and every
folder under it is checked before use: a real directory, ours, readable by nobody else."""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

from store.errors import UserError
from training.runs import process_alive

_root: Path | None = None
_lock = threading.Lock()


PREFIX = "rlhf-private-"


def private_root() -> Path:
    """This process's private folder (made on first use, removed when the process exits normally; a killed
    process's is removed by the next one to start, `remove_orphans`)."""
    global _root
    with _lock:
        if _root is None:
            _root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
            atexit.register(shutil.rmtree, _root, True)
            remove_orphans(_root.parent)
        return _root


def remove_orphans(tmp: Path) -> list[Path]:
    """Remove the private folders of this user's processes that are gone (named PREFIX<pid>-..., real folders,
    ours); returns them. Anything else there, another user's or a link, is left alone."""
    removed = []
    for entry in tmp.glob(f"{PREFIX}*-*"):
        pid = entry.name[len(PREFIX) :].split("-", 1)[0]
        try:
            info = os.lstat(entry)
        except OSError:
            continue
        ours = pid.isdigit() and stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
        if ours and not process_alive(pid):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def checked_dir(path: Path) -> Path:
    """`path` as a folder only we can read: made (mode 700) if missing; refused in one line if it is a link, not a
    folder, someone else's, or open to group or others."""
    path = Path(path)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise UserError(f"cannot make the private folder {path}: {e.strerror or e}") from None
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise UserError(f"{path} is not a real folder (a link or a file): refusing to keep private files there")
    if info.st_uid != os.geteuid():
        raise UserError(f"{path} belongs to another user (uid {info.st_uid}): refusing to keep private files there")
    if info.st_mode & 0o077:
        raise UserError(
            f"{path} can be read by others (mode {stat.filemode(info.st_mode)}): run chmod 700 {path}, or remove it"
        )
    return path


def remove_own_dirs(root: Path, prefix: str, older_than_s: float, now: float) -> None:
    """Remove the folders under `root` this code made (named `prefix`*, real folders, ours) that are older than
    `older_than_s`; nothing else there is touched."""
    for entry in root.iterdir():
        try:
            info = os.lstat(entry)
        except OSError:  # another session removed it first
            continue
        ours = entry.name.startswith(prefix) and stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
        if ours and now - info.st_mtime > older_than_s:
            shutil.rmtree(entry, ignore_errors=True)

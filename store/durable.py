"""Renaming a written file or folder into place so that it survives a power cut whole.

A rename is atomic for readers but not, by itself, durable: the file system may write the rename to disk before
the data it names (after a crash: a backup or snapshot folder of empty or short files, its manifest saying
otherwise) or lose the rename. So the data is fsynced before the rename and the parent folder after it.
(training/runs.py::write_json_atomic does the same for status files: training never imports store.)"""

from __future__ import annotations

import os
from pathlib import Path


def _fsync(path: Path) -> None:
    # read-only is enough to fsync a file or a folder (and the only way into a file a snapshot made read-only)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: Path) -> None:
    """Make the entries of folder (a rename into it, the files written in it) durable."""
    if os.name != "nt":  # Windows cannot open a folder, and needs no fsync for its renames
        _fsync(folder)


def rename_durably(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Rename src (a file, or a folder of files with no subfolders) to dst: its data reaches the disk first, then
    the rename. Like Path.rename, and so it raises OSError."""
    src, dst = Path(src), Path(dst)
    if src.is_dir():
        for path in sorted(src.iterdir()):
            _fsync(path)
        fsync_dir(src)
    else:
        _fsync(src)
    os.rename(src, dst)
    fsync_dir(dst.parent)

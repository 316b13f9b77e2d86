"""Reading user files: size limits, encodings and one-line errors that name the file."""

from __future__ import annotations

import json
import os
from pathlib import Path

from store.errors import UserError

# Larger files are refused from their size, before a byte is read (the app's upload limit is the same figure).
MAX_FILE_BYTES = int(os.environ.get("RLHF_MAX_UPLOAD_MB", "200")) * 2**20


def read_text(path: str | os.PathLike) -> str:
    """The file as text (UTF-8, a BOM allowed), or a UserError saying why not."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise UserError(f"{path}: {size / 2**20:.0f} MB is over the {MAX_FILE_BYTES // 2**20} MB import limit")
    if size == 0:
        raise UserError(f"{path}: the file is empty")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    if not text.strip():
        raise UserError(f"{path}: the file is empty")
    return text


def loads_json(text: str, where: str) -> object:
    """json.loads with a one-line error, including for input nested too deeply to parse."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{where}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise UserError(f"{where}: JSON nested too deeply") from None

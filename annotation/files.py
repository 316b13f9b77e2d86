"""Reading user files: size limits, encodings and one-line errors that name the file."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from pathlib import Path

from store.errors import UserError

# Larger files are refused from their size, before a byte is read (the app's upload limit is the same figure).
MAX_FILE_BYTES = int(os.environ.get("RLHF_MAX_UPLOAD_MB", "200")) * 2**20
# A CSV cell may be as long as the file. The csv module's own default (131,072 characters) would refuse a Label
# Studio export whose responses are long, which its JSON export of the same project imports; the whole text is in
# memory already, capped by MAX_FILE_BYTES, so a cell cannot cost more than that. (A C long, hence the min.)
MAX_CSV_CELL_CHARS = min(MAX_FILE_BYTES, 2**31 - 1)


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
    """json.loads with a one-line error, including for input nested too deeply to parse and for integers longer
    than Python converts (sys.get_int_max_str_digits(), 4,300 digits by default: the guard against CVE-2020-10735's
    quadratic-time conversion, which we keep)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{where}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise UserError(f"{where}: JSON nested too deeply") from None
    except ValueError:  # the only other ValueError json.loads raises on a str: int() over the digit limit
        raise UserError(f"{where}: a number has more than {sys.get_int_max_str_digits():,} digits") from None


def read_csv(text: str, name: str, delimiter: str = ",") -> tuple[list[str], list[tuple[int, dict]]]:
    """CSV or TSV text as (its header, [(the line each row ends on, the row)]), or a one-line UserError naming the
    file and row. The text is split the way the csv module asks for (newline=""): a quoted cell keeps its line
    breaks, and a lone carriage return ends a row (old Mac spreadsheets end lines so)."""
    csv.field_size_limit(MAX_CSV_CELL_CHARS)
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        header = list(reader.fieldnames or [])
        rows = [(reader.line_num, row) for row in reader]
    except csv.Error as e:  # the inner reader's count: DictReader's own is set only once a row is read
        raise UserError(f"{name} row {reader.reader.line_num}: not readable as CSV ({e})") from None
    return header, rows

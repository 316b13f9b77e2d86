"""Prompt files for `rlhf prompts add`: .txt (one prompt per line), .jsonl (a `prompt` field, a string or a
conversation, or a `messages` field: a conversation, the last turn the user's; store/conversations.py), .csv
(`prompt` column)."""

from __future__ import annotations

import os
from pathlib import Path

from annotation.files import loads_json, read_csv, read_text
from store.conversations import conversation_of, prompt_text
from store.errors import UserError

MAX_PROMPT_CHARS = 20_000


def read_prompts(path: str | os.PathLike) -> list[str]:
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".txt", ".jsonl", ".csv"):
        raise UserError(f"{path.name}: prompts come from .txt, .jsonl or .csv files")
    text = read_text(path)
    if suffix == ".txt":
        prompts = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)]
    elif suffix == ".jsonl":
        prompts = list(_jsonl(text, path.name))
    else:
        prompts = list(_csv(text, path.name))
    prompts = [(n, p) for n, p in prompts if p]
    for n, p in prompts:
        if len(p) > MAX_PROMPT_CHARS:
            raise UserError(f"{path.name} line {n}: prompt of {len(p)} characters is over {MAX_PROMPT_CHARS}")
    if not prompts:
        raise UserError(f"{path.name}: no prompts in the file")
    return [p for _, p in prompts]


def _jsonl(text: str, name: str):
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        obj = loads_json(line, f"{name} line {n}")
        field = "messages" if isinstance(obj, dict) and "messages" in obj and "prompt" not in obj else "prompt"
        if not isinstance(obj, dict) or not isinstance(obj.get(field), str | list):
            raise UserError(f"{name} line {n}: needs a 'prompt' field (a string or a conversation) or 'messages'")
        try:
            text = prompt_text(obj[field], field)
            yield n, text if conversation_of(text) else text.strip()  # one user turn is text, stripped as text
        except UserError as e:
            raise UserError(f"{name} line {n}: {e}") from None


def _csv(text: str, name: str):
    header, rows = read_csv(text, name)
    if "prompt" not in header:
        raise UserError(f"{name}: the CSV has no 'prompt' column (columns: {', '.join(header)})")
    for n, row in rows:
        yield n, (row.get("prompt") or "").strip()

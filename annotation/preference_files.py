"""Preference data in the shapes the ecosystem writes (issue 31), in and out.

In (`rlhf import FILE`, the format detected from each row's fields, or named with --format):
- native: {"prompt", "responses", "ranks"} (annotation/native.py);
- trl: TRL's preference format, {"prompt", "chosen", "rejected"} (explicit prompt), or {"chosen", "rejected"} with
  the prompt implicit in their common beginning (TRL's extract_prompt; for plain text the split is moved back to
  the last "Assistant:" turn marker, HH-RLHF's, else to the last whitespace, so a shared first word of both
  answers stays theirs). Each field a string, or a conversation ([{"role", "content"}, ...]);
- scores: {"prompt", "responses", "scores"}, or UltraFeedback's {"prompt" (or "instruction"), "completions":
  [{"response", "overall_score"}, ...]}: each prompt's responses ranked by score, the highest first, equal scores
  tied.
A conversation as the prompt (system, user and assistant turns, the last the user's) is stored as one prompt
(store/conversations.py); a malformed one is refused with the row named, as is every malformed row; nothing is
imported from a file with a bad row. From .jsonl, .json (a list of rows), .parquet, or a folder
`datasets.Dataset.save_to_disk` wrote.

Out (`rlhf pairs --format trl`): one row per pair, {"prompt", "chosen", "rejected"}, to .jsonl, .parquet, or a
`datasets` folder (a path without a suffix): strings, or TRL's conversational form (the prompt's messages, each
answer one assistant message) when any prompt is a conversation, as a TRL dataset is one or the other.
`--format openrlhf` is always the conversational form: OpenRLHF applies the chat template only to messages
(`--apply_chat_template`), and joins plain strings as they are."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

from annotation.files import MAX_FILE_BYTES, loads_json, read_text
from annotation.native import parse_line
from store.conversations import conversation_of, messages_of, prompt_text
from store.errors import UserError
from store.rankings import RankedItem, RankingIn

FORMATS = ("auto", "native", "trl", "scores")
SOURCE = "dataset"


def read_rows(path: str | os.PathLike) -> list[tuple[int, dict]]:
    """(number, row) of each row of a .jsonl, .json, .parquet file or a `datasets` folder, the rows as dicts (one
    that is not an object is refused with its number). A .jsonl row's number is its line's."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file")
    numbered = None
    if path.is_dir():
        rows = _datasets_rows(path)
    elif path.suffix == ".parquet":
        rows = _parquet_rows(path)
    elif path.suffix == ".json":
        rows = loads_json(read_text(path), path.name)
        if isinstance(rows, dict):
            rows = [rows]
        if not isinstance(rows, list):
            raise UserError(f"{path.name}: expected a list of rows, got {type(rows).__name__}")
    elif path.suffix == ".jsonl":
        text = read_text(path)
        lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        numbered = [(n, loads_json(line, f"{path.name} row {n}")) for n, line in lines]
    else:
        raise UserError(f"{path}: a preference file is .jsonl, .json, .parquet or a datasets folder")
    numbered = numbered if numbered is not None else list(enumerate(rows, 1))
    for n, row in numbered:
        if not isinstance(row, dict):
            raise UserError(f"{path.name} row {n}: expected an object, got {type(row).__name__}")
    if not numbered:
        raise UserError(f"{path.name}: no rows")
    return numbered


def _too_big(path: Path, size: int) -> None:
    if size > MAX_FILE_BYTES:
        raise UserError(f"{path}: {size / 2**20:.0f} MB is over the {MAX_FILE_BYTES // 2**20} MB import limit")


PARQUET_BATCH_ROWS = 64


def _parquet_rows(path: Path) -> list[dict]:
    """The rows, read a few at a time: a small Parquet file can hold far more text than its size (a dictionary page
    repeats one long string for every row; compression does the same), so what it decodes to is counted as it is
    read, and the import stops at the limit a file has (MAX_FILE_BYTES) instead of after decoding all of it."""
    import pyarrow.parquet as pq

    _too_big(path, path.stat().st_size)
    rows, decoded = [], 0
    try:
        with pq.ParquetFile(path) as parquet:
            meta = parquet.metadata
            declared = sum(
                meta.row_group(g).column(c).total_uncompressed_size
                for g in range(meta.num_row_groups)
                for c in range(meta.num_columns)
            )
            if declared > MAX_FILE_BYTES:
                raise UserError(f"{path.name}: decodes to over the {MAX_FILE_BYTES // 2**20} MB import limit")
            for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
                decoded += batch.nbytes
                if decoded > MAX_FILE_BYTES:
                    raise UserError(f"{path.name}: decodes to over the {MAX_FILE_BYTES // 2**20} MB import limit")
                rows += batch.to_pylist()
    except UserError:
        raise
    except Exception as e:  # pyarrow raises several types for a file that is not Parquet
        raise UserError(f"{path.name}: not a readable Parquet file ({str(e).splitlines()[0]})") from None
    return rows


def _check_datasets_folder(path: Path) -> None:
    """A `datasets` folder is read only from inside itself: every entry a plain file or folder (a link could point
    anywhere; a FIFO or device would hang or never end the read), and the data files its state.json names plain
    names of files in it (`datasets` opens whatever names it finds there, `../` included)."""
    total = 0
    for entry in path.rglob("*"):
        info = entry.lstat()
        if stat.S_ISREG(info.st_mode):
            total += info.st_size
        elif not stat.S_ISDIR(info.st_mode):
            raise UserError(f"{path}: {entry.relative_to(path)} is not a plain file or folder (a link, FIFO or device)")
    _too_big(path, total)
    state = path / "state.json"
    if not state.is_file():
        raise UserError(f"{path}: not a folder datasets' save_to_disk wrote (no state.json)")
    try:
        names = [f["filename"] for f in json.loads(state.read_text(encoding="utf-8"))["_data_files"]]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise UserError(f"{path}: state.json does not list its data files") from None
    for name in names:
        if not isinstance(name, str) or Path(name).name != name or name in ("", ".", ".."):
            raise UserError(f"{path}: state.json names a data file outside the folder ({str(name)[:80]!r})")
        if not (path / name).is_file():
            raise UserError(f"{path}: state.json names {name}, which is not in the folder")


def _datasets_rows(path: Path) -> list[dict]:
    _check_datasets_folder(path)
    try:
        from datasets import Dataset, load_from_disk

        data = load_from_disk(str(path))
    except Exception as e:  # FileNotFoundError, or datasets' own errors for a folder it did not write
        raise UserError(f"{path}: not a folder datasets' save_to_disk wrote ({str(e).splitlines()[0]})") from None
    if not isinstance(data, Dataset):
        raise UserError(f"{path}: a DatasetDict (splits {', '.join(data)}): import one split's folder")
    return data.to_list()


def detect(row: dict) -> str:
    """The format a row is in, from its fields (auto)."""
    if "responses" in row and "ranks" in row:
        return "native"
    if "chosen" in row and "rejected" in row:
        return "trl"
    if "completions" in row or ("responses" in row and "scores" in row):
        return "scores"
    raise UserError(
        f"fields {', '.join(sorted(row)) or 'none'}: not a preference row (native: prompt, responses, ranks; trl: "
        "prompt, chosen, rejected; scores: prompt, responses, scores)"
    )


def _is_conversation(x: object) -> bool:
    return isinstance(x, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in x)


def _prompt_text(prompt: object) -> str:
    """A prompt as the store keeps it: a string, or a conversation (store/conversations.py)."""
    if isinstance(prompt, list) and not prompt:
        raise UserError("the prompt is an empty conversation")
    return prompt_text(prompt)


def _answer_text(answer: object, field: str) -> str:
    """A response: a string, or a conversation of one assistant turn."""
    if isinstance(answer, str):
        return answer
    if _is_conversation(answer) and len(answer) == 1 and answer[0]["role"] == "assistant":
        if isinstance(answer[0]["content"], str):
            return answer[0]["content"]
    raise UserError(f"'{field}' must be a string or one assistant message")


def split_implicit(chosen: object, rejected: object) -> tuple[object, object, object]:
    """(prompt, chosen answer, rejected answer) from two texts or conversations that share their beginning."""
    if _is_conversation(chosen) and _is_conversation(rejected):
        n = 0
        while n < min(len(chosen), len(rejected)) and chosen[n] == rejected[n]:
            n += 1
        return chosen[:n], chosen[n:], rejected[n:]
    if isinstance(chosen, str) and isinstance(rejected, str):
        n = 0
        while n < min(len(chosen), len(rejected)) and chosen[n] == rejected[n]:
            n += 1
        marker = chosen.rfind("Assistant:", 0, n)
        if marker >= 0:
            n = marker + len("Assistant:")
        elif n < min(len(chosen), len(rejected)):  # both go on: end the prompt at a word boundary
            n = max(chosen.rfind(" ", 0, n), chosen.rfind("\n", 0, n)) + 1
        return chosen[:n].rstrip(), chosen[n:].strip(), rejected[n:].strip()
    raise UserError("'chosen' and 'rejected' must both be strings or both conversations")


def _trl(row: dict) -> tuple[str, list[str], list[int]]:
    chosen, rejected = row["chosen"], row["rejected"]
    if "prompt" in row and row["prompt"] is not None:
        prompt = row["prompt"]
    else:
        prompt, chosen, rejected = split_implicit(chosen, rejected)
        if not prompt:
            raise UserError("'chosen' and 'rejected' share no beginning to take the prompt from: add a 'prompt'")
    return _prompt_text(prompt), [_answer_text(chosen, "chosen"), _answer_text(rejected, "rejected")], [1, 2]


def ranks_by_score(scores: list[float]) -> list[int]:
    """Dense ranks, 1 = the highest score; equal scores tie."""
    levels = sorted(set(scores), reverse=True)
    return [levels.index(s) + 1 for s in scores]


def _scores(row: dict) -> tuple[str, list[str], list[int]]:
    prompt = row.get("prompt", row.get("instruction"))
    if prompt is None:
        raise UserError("missing field 'prompt'")
    if "completions" in row:
        completions = row["completions"]
        if not isinstance(completions, list) or not all(isinstance(c, dict) for c in completions):
            raise UserError("'completions' must be a list of objects with 'response' and 'overall_score'")
        try:
            texts = [c["response"] for c in completions]
            scores = [c["overall_score"] for c in completions]
        except KeyError as e:
            raise UserError(f"a completion has no {e.args[0]!r}") from None
    else:
        texts, scores = row["responses"], row["scores"]
    if not isinstance(texts, list) or not isinstance(scores, list) or len(texts) != len(scores):
        raise UserError("'responses' and 'scores' must be lists of the same length")
    bad = next((s for s in scores if isinstance(s, bool) or not isinstance(s, int | float) or s != s), None)
    if bad is not None or any(s is None for s in scores):
        raise UserError(f"score {bad!r} is not a number")
    return _prompt_text(prompt), [_answer_text(t, "responses") for t in texts], ranks_by_score(scores)


def _key(prompt: str, texts: list[str], ranks: list[int], annotator: str) -> str:
    canon = json.dumps([prompt, texts, ranks, annotator], ensure_ascii=False)
    return f"{SOURCE}:" + hashlib.sha256(canon.encode()).hexdigest()[:32]


def parse_rows(rows: list[tuple[int, dict]], name: str, fmt: str = "auto", annotator: str = "") -> list[RankingIn]:
    """Every (number, row) as a ranking; the first bad row raises a UserError naming it (nothing is imported then).
    The rows are by the row's annotator, else `annotator`, else the file's name; a ranking's key is its content and
    the annotator the row or `annotator` names (not the file's name: the same rows under another file name are
    the same rankings)."""
    if fmt not in FORMATS:
        raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    out = []
    for n, row in rows:
        where = f"{name} row {n}"
        try:
            kind = detect(row) if fmt == "auto" else fmt
            if kind == "native":
                out.append(parse_line({"annotator": annotator, **row} if annotator else row, where))
                continue
            prompt, texts, ranks = (_trl if kind == "trl" else _scores)(row)
            named = row.get("annotator") or annotator
            if not isinstance(named, str):
                raise UserError("'annotator' must be a string")
            who = named or name
        except KeyError as e:
            raise UserError(f"{where}: missing field {e.args[0]!r}") from None
        except UserError as e:
            raise UserError(e.args[0] if str(e).startswith(where) else f"{where}: {e}") from None
        ranking = RankingIn(
            prompt=prompt,
            items=[
                RankedItem(text=t, rank=r, shown_position=i) for i, (t, r) in enumerate(zip(texts, ranks, strict=True))
            ],
            annotator=who,
            source=SOURCE,
            external_key=_key(prompt, texts, ranks, named),
        )
        if problem := ranking.problem():
            raise UserError(f"{where}: {problem}")
        out.append(ranking)
    return out


def trl_rows(pairs: list[tuple[str, str, str]], conversational: bool = False) -> list[dict]:
    """TRL's rows for (prompt, chosen, rejected) pairs: strings, or all conversational when any prompt is a
    conversation or `conversational` says so."""
    if not conversational and not any(conversation_of(p) for p, _, _ in pairs):
        return [{"prompt": p, "chosen": c, "rejected": r} for p, c, r in pairs]
    said = lambda text: [{"role": "assistant", "content": text}]  # noqa: E731
    return [{"prompt": messages_of(p), "chosen": said(c), "rejected": said(r)} for p, c, r in pairs]


def write_trl(rows: list[dict], out: str | os.PathLike) -> Path:
    """TRL-format rows to OUT: .jsonl, .parquet, or a `datasets` folder (no suffix); the file or folder appears
    whole (written aside, then renamed)."""
    from store.durable import rename_durably

    out = Path(out)
    if not out.parent.is_dir():
        raise UserError(f"cannot write {out}: folder {out.parent} does not exist")
    if out.exists() and out.is_dir():
        raise UserError(f"{out} exists: name a new folder for the dataset")
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        if out.suffix == ".jsonl":
            tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        elif out.suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(rows, schema=_trl_schema(rows)), tmp)
        elif out.suffix == "":
            from datasets import Dataset

            Dataset.from_dict({k: [r[k] for r in rows] for k in ("prompt", "chosen", "rejected")}).save_to_disk(
                str(tmp)
            )
        else:
            raise UserError(f"{out}: TRL pairs go to .jsonl, .parquet or a folder (a datasets dataset)")
        rename_durably(tmp, out)
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or e}") from None
    finally:
        if tmp.is_dir():
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
    return out


def _trl_schema(rows: list[dict]):
    """The Parquet schema of these TRL rows: three strings, or three lists of messages (conversational)."""
    import pyarrow as pa

    conversational = bool(rows) and isinstance(rows[0]["prompt"], list)
    column = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])) if conversational else pa.string()
    return pa.schema([("prompt", column), ("chosen", column), ("rejected", column)])

"""Prompts for the trainers on prompts: read from a prompts file (.jsonl with a "prompt" field, as `rlhf train-ppo`
freezes a user's file after reading it with `rlhf prompts add`'s reader; .txt, one per line, as older runs name) or
a store snapshot (the distinct prompts of its train split), wrapped in the actor's chat template, tokenised once and
batched per rollout. Used by PPO and the next trainer on prompts, and by app/jobs/training.py, which checks that a
snapshot folder given as prompts reads.

Prompts longer than max_prompt_length tokens are skipped and counted (DeepSpeed-Chat filters them too): cutting
a chat-templated prompt from the left would drop its template's start."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow.parquet as pq

from training.models import DataError, chat_prompt
from training.pairwise.pairs import snapshot_file


def jsonl_texts(path: Path, key: str) -> list[str]:
    """The `key` field of every line of a .jsonl file (DataError unless each line has it as a string)."""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not all(isinstance(r, dict) and isinstance(r.get(key), str) for r in rows):
        raise DataError(f"{path}: every line needs a text '{key}' field")
    return [r[key] for r in rows]


def file_texts(path: Path, key: str) -> list[str] | None:
    """The texts of a .jsonl file (field `key` of each line) or a .txt file (one per line); None for other paths."""
    if path.suffix == ".jsonl" and path.is_file():
        return jsonl_texts(path, key)
    if path.suffix == ".txt" and path.is_file():
        return path.read_text(encoding="utf-8").splitlines()
    return None


def guarded(source: str, what: str, read) -> list[str]:
    """read(), with an unreadable file turned into one DataError line naming it."""
    try:
        return read()
    except DataError:
        raise
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read {what} from {source}: {str(e).splitlines()[0][:200]}") from None


def read_prompts(source: str) -> list[str]:
    """Distinct non-empty prompts, in file order."""
    path = Path(source)

    def read() -> list[str]:
        if path.is_dir():
            return pq.read_table(snapshot_file(path, "train"), columns=["prompt"]).column(0).to_pylist()
        texts = file_texts(path, "prompt")
        if texts is not None:
            return texts
        if path.exists():  # never a CSV read line by line, header and all
            raise DataError(f"{source}: prompts for training come from a .jsonl or .txt file or a snapshot folder")
        raise DataError(f"{source}: no such prompts file or snapshot folder")

    texts = guarded(source, "prompts", read)
    out = list(dict.fromkeys(t.strip() for t in texts if t and t.strip()))
    if not out:
        raise DataError(f"{source}: no prompts")
    return out


def encode_prompts(tokenizer, prompts: list[str], max_prompt_length: int) -> tuple[list[list[int]], int]:
    """(token ids of the prompts that fit, number skipped as too long)."""
    kept, skipped = [], 0
    for p in prompts:
        ids = tokenizer(chat_prompt(tokenizer, p), add_special_tokens=False)["input_ids"]
        if len(ids) > max_prompt_length:
            skipped += 1
        else:
            kept.append(ids)
    return kept, skipped


def fitted_batch(n_prompts: int, batch_size: int, world: int, buffers: int = 1) -> int:
    """Prompts per rank per rollout batch: batch_size, or fewer where the prompts do not fill `buffers` batches for
    every rank (then every prompt is used in each epoch's one buffer); 0 where there is not one prompt a rank."""
    return min(batch_size, n_prompts // (world * buffers))


def prompt_batches(n: int, batch_size: int, world: int, seed: int, epoch: int) -> list[list[int]]:
    """Prompt indices per rollout batch, a deterministic order for (seed, epoch) so a resumed run sees the same
    batches. Each batch holds batch_size x world indices; rank r takes [r::world]. A short last batch is dropped."""
    order = list(range(n))
    random.Random(f"{seed}:{epoch}").shuffle(order)
    size = batch_size * world
    return [order[i : i + size] for i in range(0, n - size + 1, size)]

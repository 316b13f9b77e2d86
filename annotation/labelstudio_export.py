"""`rlhf export-ls`: Label Studio tasks for the Ranker template plus its labeling config, so a team can label in
Label Studio and import the result back with `rlhf import-ls`.

Items are shuffled per task (seeded), so a ranking left in the order shown is detectable on import. Item ids are
'r<response id>', which lets the import map each item back to its stored response. The prompt shows as a dialogue
(Label Studio's Paragraphs), so a conversation prompt carries its turns."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from annotation.questions import ls_controls
from store.conversations import messages_of
from store.durable import rename_durably
from store.errors import UserError
from store.responses import RankableSet

RANKER_VIEW = """<View>
  <Header value="Rank the responses: drag the best to the top"/>
  <Paragraphs name="prompt" value="$turns" layout="dialogue" nameKey="role" textKey="content"/>
  <List name="answers" value="$items" title="Responses"/>
  <Ranker name="rank" toName="answers"/>
{questions}</View>
"""


def ranker_config(k: int) -> str:
    """The Ranker template for tasks of up to k responses, with the controls of every question asked beside the
    order (annotation/questions/: how much better each step is, a correction of the best, tags), each optional."""
    return RANKER_VIEW.format(questions=ls_controls(k))


RANKER_CONFIG = ranker_config(4)  # the template for K = 4, as docs/labelstudio.md shows it


def ranker_tasks(sets: list[RankableSet], seed: int = 0) -> list[dict]:
    """One task per prompt with at least two distinct, non-empty responses (`store.responses.rankable_sets`)."""
    tasks = []
    for s in sets:
        items = [{"id": f"r{i}", "title": "", "body": t} for i, t in zip(s.response_ids, s.texts, strict=True)]
        random.Random(f"{seed}:{s.prompt_id}").shuffle(items)
        for n, item in enumerate(items, 1):
            item["title"] = f"Response {n}"
        # `prompt` is the stored prompt, what the import matches; `turns` is what the page shows: a text prompt as
        # one user turn, a conversation turn by turn (store/conversations.py)
        data = {"prompt": s.prompt, "prompt_id": s.prompt_id, "turns": messages_of(s.prompt), "items": items}
        tasks.append({"data": data})
    return tasks


def export_ls(sets: list[RankableSet], out: str | os.PathLike, seed: int = 0) -> tuple[Path, Path, int]:
    """Write OUT/tasks.json and OUT/label_config.xml for these prompts' responses; returns (tasks file, config file,
    number of tasks)."""
    out = Path(out)
    tasks = ranker_tasks(sets, seed)
    if not tasks:
        raise UserError("no prompt has two or more sampled responses yet: run `rlhf sample` first")
    try:
        out.mkdir(parents=True, exist_ok=True)
        files = {
            out / "tasks.json": json.dumps(tasks, ensure_ascii=False, indent=1),
            out / "label_config.xml": ranker_config(max(len(t["data"]["items"]) for t in tasks)),
        }
        for path, text in files.items():
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text, encoding="utf-8")
            rename_durably(tmp, path)
    except OSError as e:
        raise UserError(f"cannot write Label Studio export to {out}: {e.strerror}") from None
    return out / "tasks.json", out / "label_config.xml", len(tasks)

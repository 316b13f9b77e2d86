"""The native ranking format, one JSON object per line:

    {"prompt": str, "responses": [str, ...], "ranks": [int, ...], "annotator": str (optional),
     "strengths": [int, ...] (optional), "edit": str (optional), "tags": [[str, ...], ...] (optional),
     "all_bad": bool (optional)}

prompt: a string, or a conversation ([{"role", "content"}, ...], the last turn the user's; store/conversations.py).
ranks[i] is the rank of responses[i]; 1 = best; equal numbers are a tie. strengths: how much better each group of
equal rank is than the next one down, best first (one fewer than the distinct ranks), each a level 0..3
(annotation/questions/strength.py: negligibly better or unsure, slightly better, better, significantly better). edit:
the annotator's correction of the best-ranked response, stored ranked above all of them (store/edits.py). tags: one
list per response, of unsafe, factually wrong, off topic, other (store/guidelines.py). all_bad: none of the responses
is good; without an edit the line ranks nothing (kept as a skip), with one the responses tie below the edit (its
ranks are then not read). These are the questions of annotation/questions/, read by their modules."""

from __future__ import annotations

import hashlib
import json

from annotation.files import loads_json
from annotation.questions import Shown, from_native, settle
from store.conversations import prompt_text
from store.errors import UserError
from store.rankings import RankedItem, RankingIn

DEFAULT_ANNOTATOR = "unknown"


def _key(obj: dict) -> str:
    """Identical lines are the same ranking: re-importing a file adds nothing."""
    canon = json.dumps([obj["prompt"], obj["responses"], obj["ranks"], obj.get("annotator")], ensure_ascii=False)
    return "native:" + hashlib.sha256(canon.encode()).hexdigest()[:32]


def parse_line(obj: object, where: str) -> RankingIn:
    if not isinstance(obj, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in ("prompt", "responses", "ranks") if k not in obj]
    if missing:
        raise UserError(f"{where}: missing field {', '.join(repr(m) for m in missing)}")
    prompt, responses, ranks = obj["prompt"], obj["responses"], obj["ranks"]
    try:
        prompt = prompt_text(prompt)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None
    if not isinstance(responses, list) or not all(isinstance(r, str) for r in responses):
        raise UserError(f"{where}: 'responses' must be a list of strings")
    if not isinstance(ranks, list):
        raise UserError(f"{where}: 'ranks' must be a list of integers")
    if len(ranks) != len(responses):
        raise UserError(f"{where}: {len(ranks)} ranks for {len(responses)} responses")
    annotator = obj.get("annotator", DEFAULT_ANNOTATOR)
    if not isinstance(annotator, str) or not annotator.strip():
        raise UserError(f"{where}: 'annotator' must be a non-empty string")
    ranking = RankingIn(
        prompt=prompt,
        items=[
            RankedItem(text=t, rank=r, shown_position=i) for i, (t, r) in enumerate(zip(responses, ranks, strict=True))
        ],
        annotator=annotator,
        source="native",
        external_key=_key(obj),
    )
    if problem := ranking.problem():  # the ranking first: the answers below are checked against it
        raise UserError(f"{where}: {problem}")
    shown = Shown(texts=list(responses), ranks=list(ranks))
    for name, answer in from_native(obj, shown, where).items():  # strengths, edit, tags, all_bad (questions/)
        ranking.answers[name] = answer
    settle(ranking, where)
    problem = ranking.problem()
    if problem:
        raise UserError(f"{where}: {problem}")
    return ranking


def parse_native(text: str, name: str = "input") -> list[RankingIn]:
    """All rankings of a native JSONL file; the first bad line raises a UserError naming it."""
    rankings = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        obj = loads_json(line, f"{name} line {n}")
        rankings.append(parse_line(obj, f"{name} line {n}"))
    if not rankings:
        raise UserError(f"{name}: no rankings in the file")
    return rankings

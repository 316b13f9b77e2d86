"""The ranking widget's value <-> ranks, as pure functions (the widget itself is app/faces/ranker_widget.py).

The widget's value is {"items": [{"id": the item's id, "text": str, "html": str, "pos": shown position, "rank": int,
"tags": [tag, ...]}, ...]}: `html` is the text as Markdown rendered on the server (annotation/response_html.py),
what the card shows. A fresh task starts ranked in the order shown (1..K), as Label Studio's Ranker does;
submitting it unchanged is flagged and asks for a confirmation first. An item's id is opaque (`item_ids`: random,
new for each task shown): a response's store id would tell an annotator which responses are old (a gold task's).
The answers to the questions asked with the ranking (strengths, the edit, tags) are read from the value by their
modules (annotation/questions/)."""

from __future__ import annotations

import secrets

from annotation.questions import QUESTIONS
from annotation.response_html import response_html
from store.errors import UserError
from store.guidelines import TAGS


def item_ids(k: int) -> list[str]:
    """Fresh ids for a task's K shown responses; the server keeps which is which (the Annotate tab's task state)."""
    return [secrets.token_hex(6) for _ in range(k)]


def widget_value(
    ids: list[str],
    texts: list[str],
    ranks: list[int] | None = None,
    ask_strength: bool = False,
    edit_ok: bool = False,
    edit: str | None = None,
    tags: list[list[str]] | None = None,
    answers: dict[str, object] | None = None,
) -> dict:
    """ask_strength: the widget asks how much better each group is than the next (annotation/questions/strength.py);
    edit_ok: it offers to correct the best response (store/edits.py), starting from `edit` (an undone answer's); tags:
    each response's tags so far (store/guidelines.py; an undone answer's), in shown order. ids: the items' ids
    (`item_ids`), in shown order."""
    ranks = ranks or list(range(1, len(ids) + 1))
    tags = tags or [[] for _ in ids]
    return {
        "items": [
            {"id": rid, "text": text, "html": response_html(text), "pos": pos, "rank": rank, "tags": list(given)}
            for pos, (rid, text, rank, given) in enumerate(zip(ids, texts, ranks, tags, strict=True))
        ],
        "tag_names": list(TAGS),
        "ask": ask_strength,
        "strengths": [None] * (len(set(ranks)) - 1) if ask_strength else [],
        "edit_ok": edit_ok,
        "edit": edit or "",
        # every other question the widget asks as a row of choices (annotation/questions/, widget_choices)
        "more": [
            {"name": q.name, "title": q.title, "choices": list(q.widget_choices)} for q in QUESTIONS if q.widget_choices
        ],
    } | {
        q.name: (q.to_widget or str)(answers[q.name])
        for q in QUESTIONS
        if q.widget_choices and (answers or {}).get(q.name) is not None
    }


def ranks_from_value(value: dict | None, ids: list[str]) -> list[int]:
    """Ranks in shown order from the widget's value (ids: the task's item ids, in shown order); refuses a value that
    does not match the task."""
    items = (value or {}).get("items") or []
    by_id = {}
    for it in items:
        try:
            by_id[str(it["id"])] = int(it["rank"])
        except (KeyError, TypeError, ValueError):
            raise UserError("the ranking widget sent an unreadable value; reload the page") from None
    if sorted(by_id) != sorted(ids) or len(items) != len(ids):
        raise UserError("the ranking does not match the task shown; reload the page")
    return [by_id[i] for i in ids]


def is_shown_order(ranks: list[int]) -> bool:
    return len(set(ranks)) == len(ranks) and ranks == sorted(ranks)

"""The ranking widget's value <-> ranks, as pure functions (the widget itself is app/faces/ranker_widget.py).

The widget's value is {"items": [{"id": response id, "text": str, "html": str, "pos": shown position, "rank": int,
"tags": [tag, ...]}, ...]}: `html` is the text as Markdown rendered on the server (annotation/response_html.py),
what the card shows. A fresh task starts ranked in the order shown (1..K), as Label Studio's Ranker does;
submitting it unchanged is flagged and asks for a confirmation first."""

from __future__ import annotations

from annotation.response_html import response_html
from store.errors import UserError
from store.guidelines import TAGS, tags_problem


def widget_value(
    response_ids: list[int],
    texts: list[str],
    ranks: list[int] | None = None,
    ask_strength: bool = False,
    edit_ok: bool = False,
    edit: str | None = None,
    tags: list[list[str]] | None = None,
) -> dict:
    """ask_strength: the widget asks how much better each group is than the next (store/strengths.py); edit_ok: it
    offers to correct the best response (store/edits.py), starting from `edit` (an undone answer's); tags: each
    response's tags so far (store/guidelines.py; an undone answer's), in shown order."""
    ranks = ranks or list(range(1, len(response_ids) + 1))
    tags = tags or [[] for _ in response_ids]
    return {
        "items": [
            {"id": rid, "text": text, "html": response_html(text), "pos": pos, "rank": rank, "tags": list(given)}
            for pos, (rid, text, rank, given) in enumerate(zip(response_ids, texts, ranks, tags, strict=True))
        ],
        "tag_names": list(TAGS),
        "ask": ask_strength,
        "strengths": [None] * (len(set(ranks)) - 1) if ask_strength else [],
        "edit_ok": edit_ok,
        "edit": edit or "",
    }


def edit_from_value(value: dict | None, edit_ok: bool) -> str | None:
    """The annotator's edit of the best response (None: none, or only blanks); an edit where the campaign takes
    none, or one that is not text, is a UserError."""
    edit = (value or {}).get("edit") or ""
    if not isinstance(edit, str):
        raise UserError("the ranking widget sent an unreadable edit; reload the page")
    if not edit.strip():
        return None
    if not edit_ok:
        raise UserError("this campaign takes no edits of the responses (the app was started without --edits)")
    return edit


def tags_from_value(value: dict | None, response_ids: list[int]) -> list[list[str]] | None:
    """Each shown response's tags from the widget's value, in shown order (None: no response has any); anything but
    the known tags is a UserError."""
    items = (value or {}).get("items") or []
    by_id = {}
    for it in items:
        try:
            by_id[int(it["id"])] = it.get("tags") or []
        except (KeyError, TypeError, ValueError, AttributeError):
            raise UserError("the ranking widget sent an unreadable value; reload the page") from None
    tags = [by_id.get(rid, []) for rid in response_ids]
    if not any(tags):
        return None
    if problem := tags_problem(tags, len(response_ids)):
        raise UserError(f"the tags do not fit the task: {problem}; reload the page")
    return [sorted(given, key=TAGS.index) for given in tags]


def strengths_from_value(value: dict | None, ranks: list[int]) -> list[int] | None:
    """The strengths the annotator gave with `ranks` (None: none given: the question is optional); some but not
    all of them is a UserError, as is anything but a level 0..3 for each step."""
    from store.strengths import steps_problem

    given = (value or {}).get("strengths") or []
    if not any(s is not None for s in given):
        return None
    if any(s is None for s in given) or len(given) != len(set(ranks)) - 1:
        raise UserError("say how much better for every step between your ranks (0-3), or for none")
    problem = steps_problem(ranks, list(given))
    if problem:
        raise UserError(f"the strengths do not fit the ranking: {problem}; reload the page")
    return list(given)


def ranks_from_value(value: dict | None, response_ids: list[int]) -> list[int]:
    """Ranks in shown order from the widget's value; refuses a value that does not match the task."""
    items = (value or {}).get("items") or []
    by_id = {}
    for it in items:
        try:
            by_id[int(it["id"])] = int(it["rank"])
        except (KeyError, TypeError, ValueError):
            raise UserError("the ranking widget sent an unreadable value; reload the page") from None
    if sorted(by_id) != sorted(response_ids):
        raise UserError("the ranking does not match the task shown; reload the page")
    return [by_id[rid] for rid in response_ids]


def is_shown_order(ranks: list[int]) -> bool:
    return len(set(ranks)) == len(ranks) and ranks == sorted(ranks)

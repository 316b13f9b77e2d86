"""Tags on single responses (unsafe, factually wrong, off topic, other; store/guidelines.py), stored per ranking and
counted on the dashboard. Pairs: none; a tag changes no pair."""

from __future__ import annotations

from annotation.questions.base import Campaign, Question, Shown, Written, choices_of
from store.errors import UserError
from store.guidelines import TAGS, add_tags
from store.protocol import Connection


def tags_problem(tags: list[list[str]], k: int) -> str | None:
    """Why `tags` (one list per shown response, in shown order) cannot go with a ranking of k responses."""
    if len(tags) != k:
        return f"tags for {len(tags)} responses, but {k} were shown"
    for i, given in enumerate(tags, 1):
        if not isinstance(given, list):
            return f"the tags of response {i} are not a list"
        bad = next((t for t in given if t not in TAGS), None)
        if bad is not None:
            return f"response {i}: {bad!r} is not a tag ({', '.join(TAGS)})"
        if len(set(given)) != len(given):
            return f"response {i} has a tag twice"
    return None


def from_widget(value: dict | None, shown: Shown, campaign: Campaign) -> list[list[str]] | None:
    """Each shown response's tags from the widget's value, in shown order (None: no response has any); anything but
    the known tags is a UserError."""
    items = (value or {}).get("items") or []
    by_id = {}
    for it in items:
        try:
            by_id[str(it["id"])] = it.get("tags") or []
        except (KeyError, TypeError, ValueError, AttributeError):
            raise UserError("the ranking widget sent an unreadable value; reload the page") from None
    tags = [by_id.get(item, []) for item in shown.item_ids]
    if not any(tags):
        return None
    if problem := tags_problem(tags, len(shown.item_ids)):
        raise UserError(f"the tags do not fit the task: {problem}; reload the page")
    return [sorted(given, key=TAGS.index) for given in tags]


def from_native(value: object, shown: Shown) -> list[list[str]] | None:
    if not isinstance(value, list):
        raise UserError("'tags' must be a list with one list of tags per response")
    if problem := tags_problem(value, len(shown.texts)):
        raise UserError(problem)
    return [sorted(given, key=TAGS.index) for given in value] if any(value) else None


def ls_controls(k: int) -> str:
    """One multiple-choice question per response, by the title the task gives it ("Response n")."""
    choices = "".join(f'<Choice value="{tag}"/>' for tag in TAGS)
    return "".join(
        f'  <Choices name="tags_{n}" toName="answers" choice="multiple" showInline="true">'
        f'<Header value="Response {n}: tags (optional)"/>{choices}</Choices>\n'
        for n in range(1, k + 1)
    )


def from_ls(results: dict[str, dict], shown: Shown) -> list[list[str]] | None:
    """tags_n: the tags of the task's item titled "Response n" (an item left unranked keeps none)."""
    numbers = shown.numbers or list(range(1, len(shown.texts) + 1))
    return from_native([choices_of(results.get(f"tags_{n}"), f"tags_{n}") for n in numbers], shown)


def write(con: Connection, answered: list[tuple[Written, list[list[str]]]]) -> None:
    """One row per (shown response, tag) of each ranking (response_tags), in one INSERT."""
    add_tags(
        con,
        [
            (w.ranking_id, rid, tag)
            for w, tags in answered
            for rid, given in zip(w.response_ids, tags, strict=True)
            for tag in given
        ],
    )


def check(tags: object, shown: Shown, answers: dict) -> str | None:
    return tags_problem(tags, len(shown.ranks))


QUESTION = Question(
    name="tags",
    title="Tag a response: unsafe, factually wrong, off topic, other (optional)",
    from_widget=from_widget,
    from_native=from_native,
    ls_controls=ls_controls,
    from_ls=from_ls,
    pairs="none: tags are counted per annotator and response (response_tags), never a pair",
    ls_names=r"tags_[1-9][0-9]*",
    ls_kind="choices",
    write=write,
    check=check,
)

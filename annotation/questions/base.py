"""The shapes every question module shares (annotation/questions/__init__.py says what a question is)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from store.errors import UserError
from store.protocol import Connection
from store.rankings import RankingIn


@dataclass(frozen=True)
class Shown:
    """What an answer is checked against: the ranked responses' texts and their ranks, in the order shown."""

    texts: list[str]
    ranks: list[int]
    item_ids: list[str] = field(default_factory=list)  # the widget's ids of the shown responses (the Annotate tab)
    numbers: list[int] = field(default_factory=list)  # each one's "Response n" in a Label Studio task (1, 2, ...)


@dataclass(frozen=True)
class Campaign:
    """What the campaign asks (the app's flags): strengths (`--strength`), edits (`--edits`). Tags are always
    offered."""

    ask_strength: bool = True
    allow_edits: bool = True


@dataclass(frozen=True)
class Written:
    """A ranking as stored, for a question's `write`: its id, who gave it, and its shown responses' ids with their
    ranks, in the ranking's items' order (an edit, stored with them, is not among them)."""

    ranking_id: int
    annotator: str
    response_ids: list[int]
    ranks: list[int]


def kept_in_ranking(con: Connection, answered: list[tuple[Written, object]]) -> None:
    """The `write` of a question whose answer the ranking's own rows hold (an edit is one of its items, all bad a
    column of rankings): nothing more to write."""


@dataclass(frozen=True)
class Question:
    """One kind of answer. Every reader returns the answer, or None where it was not given (each question is
    optional), and raises UserError for one that is malformed."""

    name: str  # the key in the widget's value, in a native line and in RankingIn.answers
    title: str  # what the question asks, in a sentence
    from_widget: Callable[[dict | None, Shown, Campaign], object]
    from_native: Callable[[object, Shown], object]  # the native line's value (not None) -> the answer
    ls_controls: Callable[[int], str]  # labeling-config XML that asks it, for tasks of up to k responses
    from_ls: Callable[[dict[str, dict], Shown], object]  # Label Studio results by control name
    pairs: str  # what an answer does to the pairs (the SQL rule it feeds), for docs/questions.md
    ls_names: str = ""  # a regex of its Label Studio control names (JSON_MIN and CSV flatten them into the record)
    ls_kind: str = "choices"  # those controls' kind: choices or textarea
    # what the answer does to the ranking it came with, once every answer is in (all_bad.py: ties or a skip)
    settle: Callable[[RankingIn], None] | None = None
    alone: bool = False  # an answer that needs no order beside it (all_bad.py: a Label Studio Ranker left empty)
    # the rows the answers add once their rankings are stored, given (ranking as stored, answer) for every ranking
    # of a submit or an import that answered it, so that an import writes each table once (None: one JSON row in
    # ranking_answers under `name`, which the pairs view carries as `answers`; annotation/judgement.py calls it)
    write: Callable[[Connection, list[tuple[Written, object]]], None] | None = None
    # a question the ranking widget asks as one row of choices (its value's key `name` holds the chosen text, or
    # null); empty: the widget has a control of its own for it (strengths, edit, tags, all bad)
    widget_choices: tuple[str, ...] = ()
    # a stored answer as the widget's choice again (an undone submission reopened); None: its text (str(answer))
    to_widget: Callable[[object], str] | None = None
    # why an answer cannot go with the shown responses and ranks, and the ranking's other answers (None: it can);
    # checked once every answer is in (annotation/questions/__init__.py::check_answers: the Annotate tab's submit,
    # every parser after `settle`, and annotation/judgement.py before it writes)
    check: Callable[[object, Shown, dict], str | None] | None = None


def choices_of(result: dict | None, control: str) -> list[str]:
    """The choices a Label Studio Choices result holds (none: no result)."""
    if result is None:
        return []
    got = (result.get("value") or {}).get("choices")
    if not isinstance(got, list) or not all(isinstance(c, str) for c in got):
        raise UserError(f"the {control} result holds no list of choices")
    return got

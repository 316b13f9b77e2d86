"""The questions a ranking task asks besides the order (issue 30's "answers as kinds"): how much better each step down
the order is (strength.py), a correction of the best response (edit.py), tags on single responses (tags.py), whether
the best one is good as it is (best_good.py), and the outcome "none of them is good" (all_bad.py). Each kind is one
module holding one `Question`: how its answer is read from the ranking widget's value, from a native line and from a
Label Studio annotation, the labeling-config controls that ask it in Label Studio, the check of an answer against the
ranking it goes with, what it does to the ranking once every answer is in (`settle`), and what it does to pairs. The
Annotate tab, the native importer (annotation/native.py) and the Label Studio importer and exporter
(annotation/labelstudio*.py) go through QUESTIONS and know no kind by name; annotation/judgement.py is the one write
path, where each question's `write` adds its answer's rows (or, without one, a JSON row in ranking_answers that the
pairs view carries as `answers`). docs/questions.md is the recipe for the next kind.

The ranking itself (ranks, ties, skips) is the answer every task has, and a Compare vote's outcome (left, right,
tie, both bad) is stored apart from rankings (store/compare.py)."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from contextlib import contextmanager

from annotation.questions import all_bad, best_good, edit, strength, tags
from annotation.questions.base import Campaign, Question, Shown
from store.errors import UserError
from store.rankings import RankingIn

# every question a task asks, in the order the files and the widget list them; `register` adds one (a list kept in
# place, so every module that imported it sees the same questions)
QUESTIONS: list[Question] = [strength.QUESTION, edit.QUESTION, tags.QUESTION, best_good.QUESTION, all_bad.QUESTION]
__all__ = [
    "QUESTIONS",
    "load_questions",
    "register",
    "Campaign",
    "answered_alone",
    "check_answers",
    "Question",
    "Shown",
    "from_ls",
    "from_native",
    "from_widget",
    "ls_controls",
    "settle",
]


# keys a native line or the ranking widget's value use for the ranking itself: no question may be called so
RESERVED = frozenset(
    {"prompt", "responses", "ranks", "annotator", "id", "key", "items", "tag_names", "ask", "edit_ok", "more"}
)


def _name_problem(question: Question) -> str | None:
    if question.name in RESERVED:
        return f"a question cannot be called {question.name!r}: the ranking itself uses that key"
    if any(q.name == question.name and q is not question for q in QUESTIONS):
        return f"a question called {question.name!r} is already asked"
    return None


@contextmanager
def register(question: Question) -> Iterator[Question]:
    """Ask one more question while the block runs (a plugin, or a test's toy question), then stop asking it; a name
    already asked, or one the ranking itself uses, is refused."""
    if problem := _name_problem(question):
        raise ValueError(problem)
    QUESTIONS.append(question)
    try:
        yield question
    finally:
        QUESTIONS.remove(question)


def load_questions(spec: str) -> list[Question]:
    """Ask a team's own questions from now on: `spec` is "module:NAME" entries, comma-separated, each naming a
    Question (the `RLHF_QUESTIONS` variable of every `rlhf` command: the app, its imports and exports alike). One
    that cannot be loaded, or whose name is taken, is one UserError line; the same one loaded again is left as it
    is."""
    loaded = []
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        module, colon, name = entry.partition(":")
        if not colon or not module or not name:
            raise UserError(f"RLHF_QUESTIONS: {entry!r} is not module:NAME")
        try:
            question = getattr(importlib.import_module(module), name)
        except Exception as e:  # noqa: BLE001 - a team's module: whatever it raises is one line
            raise UserError(f"RLHF_QUESTIONS: cannot load {entry!r} ({type(e).__name__}: {e})") from None
        if not isinstance(question, Question):
            raise UserError(f"RLHF_QUESTIONS: {entry!r} is a {type(question).__name__}, not a Question")
        if problem := _name_problem(question):
            raise UserError(f"RLHF_QUESTIONS: {entry!r}: {problem}")
        if question not in QUESTIONS:
            QUESTIONS.append(question)
        loaded.append(question)
    return loaded


def from_widget(value: dict | None, shown: Shown, campaign: Campaign) -> dict[str, object]:
    """Every question's answer in the widget's value (None: not given)."""
    return {q.name: q.from_widget(value, shown, campaign) for q in QUESTIONS}


def from_native(obj: dict, shown: Shown, where: str) -> dict[str, object]:
    """Every question's answer in a native line (None: the line has no such key, or null)."""
    out = {}
    for q in QUESTIONS:
        try:
            out[q.name] = None if obj.get(q.name) is None else q.from_native(obj[q.name], shown)
        except UserError as e:
            raise UserError(f"{where}: {e}") from None
    return out


def from_ls(results: list[dict], shown: Shown, where: str) -> dict[str, object]:
    """Every question's answer in one Label Studio annotation's results."""
    by_name = {str(r.get("from_name", "")): r for r in results if isinstance(r, dict)}
    out = {}
    for q in QUESTIONS:
        try:
            out[q.name] = q.from_ls(by_name, shown)
        except UserError as e:
            raise UserError(f"{where}: {e}") from None
    return out


def settle(ranking: RankingIn, where: str) -> None:
    """Each answer's effect on the ranking it came with (RankingIn), once all of them are set on it; then every
    answer checked against the ranking as settled (check_answers)."""
    for q in QUESTIONS:
        if q.settle is not None:
            try:
                q.settle(ranking)
            except UserError as e:
                raise UserError(f"{where}: {e}") from None
    if not ranking.skipped:
        shown = Shown(texts=[it.text for it in ranking.items], ranks=[it.rank for it in ranking.items])
        check_answers(ranking.answers, shown, where)


def check_answers(answers: dict[str, object], shown: Shown, where: str = "") -> None:
    """The one check of every answer against the ranking it goes with, once all of them are in (the readers check
    their shape): the Annotate tab's submit, and each parser after `settle`. An answer no question asks is refused
    too. where: the line or task a parser's error names."""
    asked = {q.name: q for q in QUESTIONS}
    for name, answer in answers.items():
        if answer is None:
            continue
        problem = f"no question is called {name!r} (asked: {', '.join(asked)})" if name not in asked else None
        if problem is None and asked[name].check is not None:
            problem = asked[name].check(answer, shown, answers)
        if problem:
            raise UserError(f"{where}: {problem}" if where else problem)


def answered_alone(results: list[dict], where: str) -> bool:
    """Whether a Label Studio annotation answers a question that needs no order beside it (its Ranker may be empty
    or missing). Such a question's reader looks at no shown response."""
    by_name = {str(r.get("from_name", "")): r for r in results if isinstance(r, dict)}
    nothing_shown = Shown(texts=[], ranks=[])
    try:
        return any(q.alone and q.from_ls(by_name, nothing_shown) is not None for q in QUESTIONS)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None


def ls_controls(k: int) -> str:
    """The labeling-config controls of every question, for tasks of up to k responses."""
    return "".join(q.ls_controls(k) for q in QUESTIONS)


def flat_result(name: str, value: object) -> dict | None:
    """A question's answer as JSON_MIN and CSV exports flatten it (a choice as its text, several as {"choices": [...]},
    a text area's text), as the JSON export's result; None for a name no question's control has, or no answer."""
    q = next((q for q in QUESTIONS if q.ls_names and re.fullmatch(q.ls_names, name)), None)
    if q is None or value in ("", None, []):
        return None
    key = "text" if q.ls_kind == "textarea" else "choices"
    if isinstance(value, dict) and key in value:
        return {"from_name": name, "value": value}
    if isinstance(value, str):
        return {"from_name": name, "value": {key: [value]}}
    raise UserError(f"the {name} answer {value!r:.60} is neither text nor {{{key!r}: [...]}}")

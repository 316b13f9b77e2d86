"""The one write path of a judgement (a ranking with its answers), for the Annotate tab and every import: the
store writes the ranking itself (store/rankings.py: prompt, responses, items, an edit among them), then each
question's `write` adds what its answer means (annotation/questions/: strengths per pair, tags per response, ...),
and an answer of a question with no `write` lands in ranking_answers, which the pairs view carries as `answers`.
A question registered here therefore reaches the store and the pairs without a change to a tab, the session or a
store signature (tests/test_toy_question.py)."""

from __future__ import annotations

from annotation.questions import QUESTIONS, check_answers
from annotation.questions.base import Shown, Written
from store.answers import add_answers
from store.errors import UserError
from store.protocol import Connection
from store.rankings import InsertResult, RankingIn, insert_rankings


def write_answers(con: Connection, answered: list[tuple[Written, dict[str, object]]]) -> None:
    """Every given answer's rows for rankings just stored, inside the caller's transaction: each question's `write`
    once with all the rankings that answered it (an import of a thousand rankings with strengths is one INSERT), the
    answers of questions without one in one INSERT into ranking_answers. An answer no question asks is refused
    (UserError), never dropped."""
    asked = {q.name for q in QUESTIONS}
    for _, answers in answered:
        unknown = sorted(n for n, a in answers.items() if a is not None and n not in asked)
        if unknown:
            raise UserError(f"no question is called {unknown[0]!r} (asked: {', '.join(sorted(asked))})")
    generic = []
    for q in QUESTIONS:
        mine = [(w, answers[q.name]) for w, answers in answered if answers.get(q.name) is not None]
        if not mine:
            continue
        if q.write is None:
            generic += [(w.ranking_id, q.name, answer) for w, answer in mine]
        else:
            q.write(con, mine)
    add_answers(con, generic)


def write_rankings(con: Connection, rankings: list[RankingIn], import_id: int | None = None) -> InsertResult:
    """Imported rankings (store/rankings.py::insert_rankings: new keys only) with every answer's rows, each
    ranking's answers checked against it first (the parsers check them where they read them: this is for rankings
    made in code)."""
    for ranking in rankings:
        if not ranking.skipped:
            shown = Shown(texts=[it.text for it in ranking.items], ranks=[it.rank for it in ranking.items])
            check_answers(ranking.answers, shown)
    result = insert_rankings(con, rankings, import_id=import_id)
    write_answers(
        con,
        [
            (Written(ranking_id, r.annotator, response_ids, [it.rank for it in r.items]), r.answers)
            for r, ranking_id, response_ids in result.written
            if not r.skipped
        ],
    )
    return result

"""The one write path of a judgement (a ranking with its answers), for the Annotate tab and every import: the
store writes the ranking itself (store/rankings.py: prompt, responses, items, an edit among them), then each
question's `write` adds what its answer means (annotation/questions/: strengths per pair, tags per response, ...),
and an answer of a question with no `write` lands in ranking_answers, which the pairs view carries as `answers`.
A question registered here therefore reaches the store and the pairs without a change to a tab, the session or a
store signature (tests/test_toy_question.py)."""

from __future__ import annotations

from annotation.questions import QUESTIONS
from annotation.questions.base import Written
from store.answers import add_answers
from store.protocol import Connection
from store.rankings import InsertResult, RankingIn, insert_rankings


def write_answers(con: Connection, written: Written, answers: dict[str, object]) -> None:
    """Every given answer's rows for a ranking just stored, inside the caller's transaction."""
    generic = []
    for q in QUESTIONS:
        answer = answers.get(q.name)
        if answer is None:
            continue
        if q.write is None:
            generic.append((written.ranking_id, q.name, answer))
        else:
            q.write(con, written, answer)
    add_answers(con, generic)


def write_rankings(con: Connection, rankings: list[RankingIn], import_id: int | None = None) -> InsertResult:
    """Imported rankings (store/rankings.py::insert_rankings: new keys only) with every answer's rows."""
    result = insert_rankings(con, rankings, import_id=import_id)
    for ranking, ranking_id, response_ids in result.written:
        if not ranking.skipped:
            ranks = [it.rank for it in ranking.items]
            write_answers(con, Written(ranking_id, ranking.annotator, response_ids, ranks), ranking.answers)
    return result

"""Handing prompts to annotators (migration 0002). All functions run inside the caller's transaction."""

from __future__ import annotations

import random
from dataclasses import dataclass

from store.protocol import Connection
from store.tasks import count_assignment, refresh_tasks, uncount_ranking

# Responses an annotator can rank: not an identical repeat of another sample, not empty, not an annotator's edit
# (store/edits.py). ltrim, not trim: the same test (blank = spaces only), but it stops at the first other character
# where trim reads every text to its end, and this runs over every response twice per submit (10x less CPU on
# 10,000 responses). The edits test is a lookup by primary key.
RANKABLE = (
    "r.duplicate_of IS NULL AND ltrim(r.text) <> '' "
    "AND NOT EXISTS (SELECT 1 FROM edits e WHERE e.response_id = r.response_id)"
)


def open_assignment(con: Connection, annotator: str) -> tuple | None:
    """(assignment_id, prompt_id, shown_order, seconds since assigned) of the annotator's open assignment."""
    return con.execute(
        """SELECT assignment_id, prompt_id, shown_order,
                  date_diff('millisecond', assigned_at, current_timestamp::TIMESTAMP) / 1000.0
           FROM assignments WHERE annotator = ? AND status = 'open' ORDER BY assignment_id LIMIT 1""",
        [annotator],
    ).fetchone()


@dataclass
class Claimed:
    """A newly assigned task: the prompt and its responses in the order this annotator sees them."""

    assignment_id: int
    prompt_id: int
    order: list[int]
    prompt: str
    texts: list[str]


def claim_next(
    con: Connection, annotator: str, overlap: int, rng: random.Random, gold_rate: float = 0.0
) -> Claimed | None:
    """Assign the next prompt this annotator has not had and fewer than `overlap` annotators have had; with
    probability `gold_rate`, a gold prompt (store/gold.py) they have not had instead, whatever its overlap, shown as
    any task is (nothing tells the two apart).

    Every browser ranking comes from an assignment, so assignments alone say who has (had) a prompt. A prompt asked
    again in a later round (store/rounds.py) is a new task: only its latest round's responses are shown, and only
    that round's assignments count. Prompts with the fewest annotators go first, then the newest round's, in the
    order its selection chose them, then the oldest. Returns the task, or None."""
    if gold_rate > 0 and rng.random() < gold_rate:
        gold = _gold_task(con, annotator)
        if gold is not None:
            return _assign(con, annotator, *gold, rng)
    mine = (  # at overlap 1 a task handed to anyone is not handed out again, so it cannot be this annotator's
        ""
        if overlap <= 1
        else """AND NOT EXISTS (SELECT 1 FROM assignments a
                                WHERE a.annotator = $annotator AND a.prompt_id = t.prompt_id AND a.round = t.round)"""
    )
    while True:
        task = con.execute(  # the kept counters (store/tasks.py): a scan of one small row per prompt, no joins
            f"""SELECT t.prompt_id, t.round FROM tasks t
                WHERE t.rankable >= 2 AND t.assigned < $overlap {mine}
                ORDER BY t.assigned, t.round DESC, t.position NULLS LAST, t.prompt_id LIMIT 1""",
            {"overlap": overlap, **({"annotator": annotator} if mine else {})},
        ).fetchone()
        if task is None:
            return None
        # its texts by a constant prompt id, which skips the other prompts' blocks of responses (as a join would not:
        # it read every response's text, and the store's size showed in every submit)
        row = con.execute(
            f"""SELECT r.prompt_id, coalesce(x.round, 1), p.text, list(r.response_id ORDER BY r.response_id),
                       list(r.text ORDER BY r.response_id)
                FROM responses r JOIN prompts p USING (prompt_id) LEFT JOIN response_rounds x USING (response_id)
                WHERE r.prompt_id = ? AND coalesce(x.round, 1) = ? AND {RANKABLE}
                GROUP BY ALL""",
            list(task),
        ).fetchone()
        if row is not None:
            break
        refresh_tasks(con, [task[0]])  # the counters said rankable and the responses do not: mend, pick again
    return _assign(con, annotator, *row, rng)


def _gold_task(con: Connection, annotator: str) -> tuple | None:
    """(prompt id, round, prompt, response ids, texts) of a gold prompt the annotator has neither been handed nor
    ranked (the gold ranking's author included): the responses its gold ranking ranked. Each annotator meets the
    gold prompts in an order of their own."""
    return con.execute(
        """SELECT g.prompt_id, coalesce(min(x.round), 1), p.text, list(r.response_id ORDER BY r.response_id),
                  list(r.text ORDER BY r.response_id)
           FROM gold g JOIN prompts p USING (prompt_id) JOIN ranking_items i ON i.ranking_id = g.ranking_id
           JOIN responses r ON r.response_id = i.response_id
           LEFT JOIN response_rounds x ON x.response_id = r.response_id
           WHERE NOT EXISTS (SELECT 1 FROM assignments a WHERE a.annotator = $a AND a.prompt_id = g.prompt_id)
             AND NOT EXISTS (SELECT 1 FROM edits e WHERE e.response_id = r.response_id)
             AND NOT EXISTS (SELECT 1 FROM rankings k WHERE k.annotator = $a AND k.prompt_id = g.prompt_id)
           GROUP BY g.prompt_id, p.text ORDER BY hash(g.prompt_id, $a) LIMIT 1""",
        {"a": annotator},
    ).fetchone()


def _assign(
    con: Connection,
    annotator: str,
    prompt_id: int,
    round_: int,
    prompt: str,
    ids: list,
    texts: list,
    rng: random.Random,
) -> Claimed:
    """Hand the prompt's responses to the annotator in an order of their own; counted in `tasks`."""
    shown = list(zip(ids, texts, strict=True))
    rng.shuffle(shown)  # each annotator sees their own order; it is stored with the ranking
    ids = [i for i, _ in shown]
    assignment_id = con.execute(
        """INSERT INTO assignments (prompt_id, annotator, shown_order, round) VALUES (?, ?, ?, ?)
           RETURNING assignment_id""",
        [prompt_id, annotator, ids, round_],
    ).fetchone()[0]
    count_assignment(con, prompt_id, round_, assigned=1, done=0)
    return Claimed(assignment_id, prompt_id, ids, prompt, [t for _, t in shown])


def assignment_round(con: Connection, assignment_id: int) -> int:
    """The round of the task an assignment was for (1 for assignments made before rounds were recorded)."""
    return con.execute(
        "SELECT coalesce(round, 1) FROM assignments WHERE assignment_id = ?", [assignment_id]
    ).fetchone()[0]


def get_assignment(con: Connection, assignment_id: int) -> tuple | None:
    """(annotator, prompt_id, shown_order, status, ranking_id, seconds since assigned)."""
    return con.execute(
        """SELECT annotator, prompt_id, shown_order, status, ranking_id,
                  date_diff('millisecond', assigned_at, current_timestamp::TIMESTAMP) / 1000.0
           FROM assignments WHERE assignment_id = ?""",
        [assignment_id],
    ).fetchone()


def close_assignment(con: Connection, assignment_id: int, ranking_id: int) -> None:
    row = con.execute(
        """UPDATE assignments SET status = 'done', ranking_id = ?, closed_at = current_timestamp
           WHERE assignment_id = ? AND status = 'open' RETURNING prompt_id, round""",
        [ranking_id, assignment_id],
    ).fetchone()
    if row is not None:
        count_assignment(con, *row, assigned=0, done=1)


def last_closed(con: Connection, annotator: str) -> tuple | None:
    """(assignment_id, ranking_id) of the annotator's most recently closed assignment."""
    return con.execute(
        """SELECT assignment_id, ranking_id FROM assignments
           WHERE annotator = ? AND status = 'done' ORDER BY closed_at DESC, assignment_id DESC LIMIT 1""",
        [annotator],
    ).fetchone()


def reopen(con: Connection, assignment_id: int) -> None:
    """Back to 'open' (for undo/edit): the clock for the lead time starts again."""
    row = con.execute(
        """UPDATE assignments SET status = 'open', ranking_id = NULL, closed_at = NULL,
                  assigned_at = current_timestamp
           WHERE assignment_id = ? AND status = 'done' RETURNING prompt_id, round""",
        [assignment_id],
    ).fetchone()
    if row is not None:
        count_assignment(con, *row, assigned=0, done=-1)


def drop_assignment(con: Connection, assignment_id: int) -> None:
    """Give an open task back to the pool (the one an annotator holds when they undo their last answer)."""
    row = con.execute(
        "DELETE FROM assignments WHERE assignment_id = ? RETURNING prompt_id, round, ranking_id", [assignment_id]
    ).fetchone()
    if row is not None:
        count_assignment(con, row[0], row[1], assigned=-1, done=-(row[2] is not None))


def is_undone(con: Connection, assignment_id: int) -> bool:
    """Whether this open task is one an undo handed back (a second undo would reach the answer before it)."""
    return (
        con.execute("SELECT count(*) FROM undone_rankings WHERE assignment_id = ?", [assignment_id]).fetchone()[0] > 0
    )


def undos_in_last_hour(con: Connection, annotator: str) -> int:
    """How many answers `annotator` took back in the last hour (each undo keeps a copy: the count bounds the store's
    growth through Undo)."""
    return con.execute(
        "SELECT count(*) FROM undone_rankings WHERE annotator = ? AND undone_at > current_timestamp - INTERVAL 1 HOUR",
        [annotator],
    ).fetchone()[0]


def keep_undone(con: Connection, ranking_id: int, assignment_id: int) -> None:
    """Copy a ranking (or skip) about to be undone into undone_rankings, in the caller's transaction."""
    con.execute(
        """INSERT INTO undone_rankings (ranking_id, assignment_id, prompt_id, annotator, skipped, skip_reason,
                                        response_ids, ranks, ranked_at, all_bad)
           SELECT r.ranking_id, ?, r.prompt_id, r.annotator, r.skipped, r.skip_reason,
                  coalesce(list(i.response_id ORDER BY i.shown_position) FILTER (i.response_id IS NOT NULL), []),
                  coalesce(list(i.rank ORDER BY i.shown_position) FILTER (i.response_id IS NOT NULL), []),
                  r.created_at, r.all_bad
           FROM rankings r LEFT JOIN ranking_items i USING (ranking_id) WHERE r.ranking_id = ?
           GROUP BY ALL""",
        [assignment_id, ranking_id],
    )


@dataclass
class Undone:
    """One undone answer, as `rlhf undone` lists it."""

    undo_id: int
    annotator: str
    prompt_id: int
    ranking_id: int
    skipped: bool
    skip_reason: str | None
    response_ids: list[int]
    ranks: list[int]
    ranked_at: str
    undone_at: str
    all_bad: bool = False  # the answer said none of the shown responses was good (annotation/questions/all_bad.py)


def undone(con: Connection, annotator: str | None = None) -> list[Undone]:
    """Every undone answer (one annotator's with `annotator`), oldest first."""
    rows = con.execute(
        """SELECT undo_id, annotator, prompt_id, ranking_id, skipped, skip_reason, response_ids, ranks,
                  strftime(ranked_at, '%Y-%m-%d %H:%M:%S'), strftime(undone_at, '%Y-%m-%d %H:%M:%S'), all_bad
           FROM undone_rankings WHERE ? IS NULL OR annotator = ? ORDER BY undo_id""",
        [annotator, annotator],
    ).fetchall()
    return [Undone(*row) for row in rows]


def delete_ranking(con: Connection, ranking_id: int) -> None:
    from store.gold import unmark_ranking

    uncount_ranking(con, ranking_id)
    unmark_ranking(con, ranking_id)  # an undone gold ranking is its prompt's gold no more
    con.execute("DELETE FROM ranking_items WHERE ranking_id = ?", [ranking_id])
    con.execute("DELETE FROM pair_strengths WHERE ranking_id = ?", [ranking_id])
    con.execute("DELETE FROM response_tags WHERE ranking_id = ?", [ranking_id])
    con.execute("DELETE FROM ranking_answers WHERE ranking_id = ?", [ranking_id])
    con.execute("DELETE FROM rankings WHERE ranking_id = ?", [ranking_id])


def annotation_counts(con: Connection, annotator: str, source: str, overlap: int) -> tuple:
    """(rankings by this annotator, rankings by everyone, prompts still needing rankings, pairs in the store);
    one query over the kept counters (store/tasks.py), since it runs after every submission. A prompt waits while
    its latest round (store/rounds.py) has fewer than `overlap` answers (rankings or skips) from assignments."""
    return con.execute(
        """SELECT
              (SELECT coalesce(sum(rankings), 0) FROM ranking_counts WHERE source = $source AND annotator = $annotator),
              (SELECT coalesce(sum(rankings), 0) FROM ranking_counts WHERE source = $source),
              (SELECT count(*) FROM tasks WHERE rankable >= 2 AND done < $overlap),
              (SELECT coalesce(sum(pairs), 0) FROM ranking_counts)""",
        {"source": source, "annotator": annotator, "overlap": overlap},
    ).fetchone()

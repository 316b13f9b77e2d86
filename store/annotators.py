"""What each annotator did, for the lead's dashboard (annotation/dashboard.py): answers, lead times and flags per
annotator, and answers over time. Each is one aggregate query over the rankings; none reads responses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from store.protocol import Connection


@dataclass(frozen=True)
class AnnotatorWork:
    """One annotator's answers (rankings and skips, any source)."""

    annotator: str
    rankings: int  # not skipped
    skipped: int
    timed: int  # answers with a lead time (the Annotate tab's and Label Studio's have one; native imports may not)
    median_s: float | None  # their median lead time
    total_s: float  # the sum of those lead times
    fast: int  # rankings made in under the fast threshold, or flagged 'fast' by their source
    shown_order: int  # rankings identical to the order the responses were shown in
    edited: int = 0  # rankings holding the annotator's edit of the best response (store/edits.py)
    all_bad: int = 0  # answers saying none of the shown responses was good (annotation/questions/all_bad.py)


def annotator_work(con: Connection, fast_s: float) -> list[AnnotatorWork]:
    """Every annotator's answers, by name."""
    rows = con.execute(
        """SELECT annotator,
                  count(*) FILTER (WHERE NOT skipped),
                  count(*) FILTER (WHERE skipped),
                  count(lead_time_s),
                  median(lead_time_s),
                  coalesce(sum(lead_time_s), 0),
                  count(*) FILTER (WHERE NOT skipped AND (lead_time_s < ? OR list_contains(flags, 'fast'))),
                  count(*) FILTER (WHERE NOT skipped AND list_contains(flags, 'shown_order')),
                  (SELECT count(*) FROM ranking_items i JOIN edits e USING (response_id)
                   WHERE i.ranking_id IN (SELECT ranking_id FROM rankings k WHERE k.annotator = r.annotator)),
                  count(*) FILTER (WHERE all_bad)
           FROM rankings r GROUP BY annotator ORDER BY annotator""",
        [fast_s],
    ).fetchall()
    return [
        AnnotatorWork(a, n, s, t, None if m is None else float(m), float(tot), f, o, e, b)
        for a, n, s, t, m, tot, f, o, e, b in rows
    ]


def answers_over_time(con: Connection, bucket: str) -> list[tuple[str, datetime, int]]:
    """(annotator, start of the hour or day, answers in it), in time order. bucket: 'hour' or 'day'."""
    if bucket not in ("hour", "day"):
        raise ValueError(f"bucket must be hour or day, got {bucket}")
    return con.execute(
        "SELECT annotator, date_trunc(?, created_at) AS t, count(*) FROM rankings GROUP BY ALL ORDER BY t, annotator",
        [bucket],
    ).fetchall()


def answer_span_s(con: Connection) -> float:
    """Seconds from the first answer stored to the last (0 with fewer than two)."""
    span = con.execute("SELECT epoch(max(created_at)) - epoch(min(created_at)) FROM rankings").fetchone()[0]
    return float(span or 0.0)

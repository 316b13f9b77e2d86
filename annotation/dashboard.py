"""The lead's view of a labeling campaign (`rlhf annotators`, the Data tab): per annotator, how much (rankings, all
bad answers, skips), how fast (median seconds a task, tasks an hour of lead time), how well (agreement with the
others on shared prompts, Kendall tau-b, with how many prompts it rests on; agreement with the newest reward model
scored, `rlhf rm-agreement`) and how carefully (rankings made too fast to have read the responses, rankings left in
the order shown), and the reasons, if any, to look at someone's work.

The reasons (`watch`) are fixed rules, stated here so that a lead knows what they mean:
- fast: at least WATCH_FAST_SHARE of their rankings took under FAST_S seconds;
- shown order: at least WATCH_SHOWN_SHARE of their rankings are the order the responses were shown in (a random
  order of K = 4 distinct ranks is the shown one 1 time in 24);
- gold: an accuracy under WATCH_GOLD_ACCURACY on at least WATCH_MIN_GOLD gold prompts (annotation/gold.py: the
  share of each gold ranking's ordered pairs they ordered the same way, a tie counting half);
- low agreement: a mean tau more than WATCH_TAU_GAP below the median of the other annotators' (each one's mean
  tau takes in their comparisons with everyone, a poor annotator's included), on at least WATCH_MIN_PROMPTS shared
  prompts."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from annotation.agreement import agreement_by_annotator
from annotation.gold import gold_accuracy
from annotation.labelstudio import FAST_LEAD_TIME_S
from store.annotators import annotator_work, answer_span_s, answers_over_time
from store.answers import answer_counts
from store.db import StoreRef, read
from store.gold import gold_answers
from store.guidelines import TAGS, tag_counts
from store.pairs import rankings_for_agreement
from store.rm_scores import rm_agreement, scored_runs

FAST_S = FAST_LEAD_TIME_S  # the same threshold as Label Studio imports' 'fast' flag
WATCH_FAST_SHARE = 0.2
WATCH_SHOWN_SHARE = 0.25
WATCH_TAU_GAP = 0.3
WATCH_MIN_PROMPTS = 5
WATCH_GOLD_ACCURACY = 0.7
WATCH_MIN_GOLD = 3
HEADERS = [  # who to look at, and why, first: the table is wider than a screen
    "annotator",
    "look at",
    "rankings",
    "skips",
    "all bad",
    "edits",
    "tags",
    "answers",
    "median s",
    "tasks/h",
    "agreement",
    "shared",
    "fast",
    "shown order",
    "gold",
    "gold n",
    "RM agree",
]


@dataclass
class AnnotatorRow:
    annotator: str
    rankings: int
    skipped: int
    median_s: float | None  # median lead time of their answers (None: no answer has one)
    tasks_per_hour: float | None  # 3600 x answers with a lead time / the sum of those lead times
    agreement: float | None  # mean tau_b against the others' rankings of the same prompts (None: no shared prompt)
    shared_prompts: int
    fast_share: float | None  # of their rankings (None: no rankings)
    shown_order_share: float | None
    gold_accuracy: float | None = None  # against the gold rankings of the gold prompts they ranked (None: none)
    gold_tasks: int = 0
    edits: int = 0  # rankings with their edit of the best response (store/edits.py)
    all_bad: int = 0  # answers saying none of the shown was good (with or without an edit; a skip's count too)
    tags: dict[str, int] = field(default_factory=dict)  # tag -> responses they gave it (store/guidelines.py)
    # question -> rankings that answered it, for the questions with no table of their own (store/answers.py: best_good,
    # a team's own)
    answers: dict[str, int] = field(default_factory=dict)
    rm_agreement: float | None = None  # share of their pairs the newest scored reward model orders as they did
    rm_pairs: int = 0  # the pairs it rests on (`rlhf rm-agreement` scores them)
    watch: list[str] = field(default_factory=list)


def watch_reasons(row: AnnotatorRow, others_tau: float | None) -> list[str]:
    """Why a lead should look at this annotator's work (the module's rules); empty: nothing to see.
    others_tau: the median agreement of the other annotators (None: no other has any)."""
    reasons = []
    if row.fast_share is not None and row.fast_share >= WATCH_FAST_SHARE:
        reasons.append(f"fast: {row.fast_share:.0%} of rankings under {FAST_S:g} s")
    if row.shown_order_share is not None and row.shown_order_share >= WATCH_SHOWN_SHARE:
        reasons.append(f"shown order: {row.shown_order_share:.0%} of rankings")
    if row.gold_accuracy is not None and row.gold_tasks >= WATCH_MIN_GOLD and row.gold_accuracy < WATCH_GOLD_ACCURACY:
        reasons.append(f"gold: {row.gold_accuracy:.0%} right on {row.gold_tasks} gold prompts")
    if (
        row.agreement is not None
        and others_tau is not None
        and row.shared_prompts >= WATCH_MIN_PROMPTS
        and row.agreement < others_tau - WATCH_TAU_GAP
    ):
        reasons.append(
            f"low agreement: tau {row.agreement:.2f} on {row.shared_prompts} prompts, others {others_tau:.2f}"
        )
    return reasons


def annotator_rows(db: StoreRef) -> list[AnnotatorRow]:
    """One row per annotator who answered anything, by name."""
    with read(db, create=False) as con:
        work = annotator_work(con, FAST_S)
        agreement = agreement_by_annotator(rankings_for_agreement(con))
        gold = gold_accuracy(gold_answers(con))
        tags = tag_counts(con)
        answered = answer_counts(con)
        scored = scored_runs(con)
        rm = rm_agreement(con, scored[0][0]) if scored else {}
    rows = []
    for w in work:
        tau, shared = agreement.get(w.annotator, (None, 0))
        row = AnnotatorRow(
            annotator=w.annotator,
            rankings=w.rankings,
            skipped=w.skipped,
            median_s=w.median_s,
            tasks_per_hour=3600 * w.timed / w.total_s if w.total_s > 0 else None,
            agreement=tau,
            shared_prompts=shared,
            fast_share=w.fast / w.rankings if w.rankings else None,
            shown_order_share=w.shown_order / w.rankings if w.rankings else None,
            gold_accuracy=gold.get(w.annotator, (None, 0))[0],
            gold_tasks=gold.get(w.annotator, (None, 0))[1],
            edits=w.edited,
            all_bad=w.all_bad,
            tags=tags.get(w.annotator, {}),
            answers=answered.get(w.annotator, {}),
            rm_agreement=rm.get(w.annotator, (None, 0))[0],
            rm_pairs=rm.get(w.annotator, (None, 0))[1],
        )
        rows.append(row)
    for row in rows:
        others = [r.agreement for r in rows if r is not row and r.agreement is not None]
        row.watch = watch_reasons(row, statistics.median(others) if others else None)
    return rows


def table(rows: list[AnnotatorRow]) -> list[list]:
    """The rows as HEADERS says, numbers rounded for reading; '' where a number is undefined."""

    def num(x, digits):
        return "" if x is None else round(x, digits)

    def share(x):
        return "" if x is None else f"{x:.0%}"

    return [
        [
            r.annotator,
            "; ".join(r.watch),
            r.rankings,
            r.skipped,
            r.all_bad,
            r.edits,
            tag_line(r.tags),
            ", ".join(f"{q} {n}" for q, n in sorted(r.answers.items())),
            num(r.median_s, 1),
            "" if r.tasks_per_hour is None else round(r.tasks_per_hour),
            num(r.agreement, 2),
            r.shared_prompts,
            share(r.fast_share),
            share(r.shown_order_share),
            share(r.gold_accuracy),
            r.gold_tasks,
            share(r.rm_agreement),
        ]
        for r in rows
    ]


def tag_line(tags: dict[str, int]) -> str:
    """'unsafe 2, off topic 1': the tags an annotator gave, in TAGS' order ('' for none)."""
    return ", ".join(f"{t} {tags[t]}" for t in TAGS if tags.get(t))


def as_json(rows: list[AnnotatorRow]) -> list[dict]:
    return [asdict(r) for r in rows]


def text_table(rows: list[AnnotatorRow]) -> str:
    """The table as aligned text (`rlhf annotators`), the reasons to look last (each row's longest cell)."""
    last = [0, *range(2, len(HEADERS)), 1]
    cells = [[row[i] for i in last] for row in [HEADERS] + [[str(c) for c in r] for r in table(rows)]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADERS))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)


def over_time(db: StoreRef) -> tuple[str, list[tuple[str, object, int]]]:
    """(bucket, [(annotator, start of the bucket, answers in it)]): per hour for a campaign under three days so
    far, else per day."""
    with read(db, create=False) as con:
        bucket = "hour" if answer_span_s(con) < 3 * 86400 else "day"
        return bucket, answers_over_time(con, bucket)

"""Ranking in the browser, as plain functions: next prompt, submit, skip, undo, progress.

The app's Annotate tab wires these to its buttons; tests call them directly. Every call is one short write
transaction, so any number of annotators can work at once and a killed app loses nothing acknowledged."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from annotation.judgement import write_answers
from annotation.questions import check_answers
from annotation.questions.all_bad import ALL_BAD
from annotation.questions.base import Shown, Written
from annotation.ranker_view import is_shown_order
from store.answers import answers_of
from store.assignments import (
    annotation_counts,
    assignment_round,
    claim_next,
    close_assignment,
    delete_ranking,
    drop_assignment,
    get_assignment,
    is_undone,
    keep_undone,
    last_closed,
    open_assignment,
    reopen,
    undos_in_last_hour,
)
from store.db import StoreRef, read, write
from store.edits import add_edit, edit_in
from store.errors import UserError
from store.guidelines import current_guideline, tags_of
from store.prompts import prompt_text
from store.rankings import add_ranking, add_skip, ranks_of, said_all_bad
from store.responses import response_texts

SOURCE = "ui"
MAX_REASON_CHARS = 300  # a skip reason is a line (the store keeps it, and a copy on every undo)


@dataclass
class Task:
    """One prompt for one annotator, responses in the order this annotator sees them."""

    assignment_id: int
    prompt_id: int
    prompt: str
    response_ids: list[int]
    responses: list[str]
    previous_ranks: list[int] | None = None  # set when the task is an undone submission being edited
    previous_edit: str | None = None  # that submission's edit of its best response (store/edits.py), if it had one
    previous_tags: list[list[str]] | None = None  # that submission's tags, per response in shown order
    guideline: tuple[int, str] | None = None  # (version, Markdown) of the campaign's guideline when it was handed out
    previous_all_bad: bool = False  # that submission said none of the responses was good (the All bad button)
    # that submission's answers kept in ranking_answers (best_good, a registered question's), by question
    previous_answers: dict[str, object] = field(default_factory=dict)


@dataclass
class Progress:
    mine: int
    team: int
    pending: int
    pairs: int

    def line(self, waiting: bool = True) -> str:
        """waiting=False leaves out the prompts waiting: with gold tasks on, it drops after a new prompt's task and
        not after a gold one's, so an annotator could tell the two apart (the app shows it to admins only then)."""
        pending = f" · prompts waiting: {self.pending}" if waiting else ""
        return f"you: {self.mine} ranked · team: {self.team}{pending} · pairs: {self.pairs}"


def _task(con, assignment_id: int, prompt_id: int, order: list[int], previous=None, edit=None, tags=None) -> Task:
    texts = response_texts(con, order)
    shown = [texts[i] for i in order]
    return Task(
        assignment_id,
        prompt_id,
        prompt_text(con, prompt_id),
        list(order),
        shown,
        previous,
        edit,
        tags,
        current_guideline(con),
    )


def next_task(
    db: StoreRef, annotator: str, overlap: int = 1, seed: int | None = None, gold_rate: float = 0.0
) -> Task | None:
    """The annotator's open task (the same one again after a reload), or a newly assigned one; None when done.
    gold_rate: the share of new tasks that are gold prompts (store/gold.py), when any is left for them."""
    _check_annotator(annotator)
    with write(db) as con:
        return _next(con, annotator, overlap, seed, gold_rate=gold_rate)


def _next(
    con, annotator: str, overlap: int, seed: int | None = None, holds: bool = True, gold_rate: float = 0.0
) -> Task | None:
    """holds=False: the annotator is known to hold no open task (they just answered it), so none is looked up."""
    row = open_assignment(con, annotator) if holds else None
    if row is None:
        claimed = claim_next(con, annotator, overlap, random.Random(seed), gold_rate)
        if claimed is None:
            return None
        return Task(
            claimed.assignment_id,
            claimed.prompt_id,
            claimed.prompt,
            claimed.order,
            claimed.texts,
            guideline=current_guideline(con),
        )
    assignment_id, prompt_id, order = row[:3]
    return _task(con, assignment_id, prompt_id, order)


def _check_annotator(annotator: str) -> None:
    if not annotator or not annotator.strip():
        raise UserError("enter your name (or log in) before ranking")


def _own_open(con, annotator: str, assignment_id: int) -> tuple:
    row = get_assignment(con, assignment_id)
    if row is None or row[0] != annotator:
        raise UserError(f"task {assignment_id} is not assigned to {annotator}")
    return row


def check_ranks(ranks: list[int], k: int) -> None:
    """ranks[i] is the rank of the i-th response as shown; 1 = best; ties allowed; every response ranked."""
    if len(ranks) != k:
        raise UserError(f"rank all {k} responses (got {len(ranks)} ranks)")
    for i, r in enumerate(ranks, 1):
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= k:
            raise UserError(f"rank of response {i} must be a number from 1 to {k}, got {r!r}")
    if len(set(ranks)) == 1 and k > 1:
        raise UserError("all responses tie: that ranking gives no pairs; skip the prompt instead")


def submit(db: StoreRef, annotator: str, assignment_id: int, ranks: list[int]) -> int:
    """Store a ranking of the shown responses (ranks in shown order); returns its ranking id.

    Submitting the same task twice (a double click, a retried request) stores it once."""
    with write(db) as con:
        return _submit(con, annotator, assignment_id, ranks)[0]


def submit_and_next(
    db: StoreRef,
    annotator: str,
    assignment_id: int,
    ranks: list[int],
    overlap: int = 1,
    gold_rate: float = 0.0,
    answers: dict[str, object] | None = None,
    guideline_version: int | None = None,
) -> tuple[Task | None, Progress]:
    """What the Submit button does, in one transaction: store the ranking with its answers (by question name, as
    annotation/questions/ reads them from the widget: strengths, the edit of its best response, tags, all bad, and
    any other registered question's) and the guideline version shown with the task (None: the current one), hand
    out the next task, count. answers["all_bad"]: the All bad button with an edit (the shown tie below it)."""
    with write(db) as con:
        _, stored_now = _submit(con, annotator, assignment_id, ranks, answers or {}, guideline_version)
        # an annotator holds one open task at a time: having just answered it, they hold none (a repeated submit
        # of an answered task may find the one handed out after it)
        task = _next(con, annotator, overlap, holds=not stored_now, gold_rate=gold_rate)
        return task, Progress(*annotation_counts(con, annotator, SOURCE, overlap))


def _submit(
    con,
    annotator: str,
    assignment_id: int,
    ranks: list[int],
    answers: dict[str, object] | None = None,
    guideline_version: int | None = None,
) -> tuple[int, bool]:
    """(ranking id, whether it was stored now: False for a task already answered). The edit: the annotator's
    correction of the response they ranked best (blank: none), stored as a response ranked above all
    (store/edits.py); every other answer is written by its question (annotation/judgement.py)."""
    _, prompt_id, order, status, ranking_id, lead_time = _own_open(con, annotator, assignment_id)
    if status == "done":
        return ranking_id, False
    answers = {name: a for name, a in (answers or {}).items() if a is not None}
    edit, all_bad = answers.get("edit"), bool(answers.get("all_bad"))
    if edit is not None and not edit.strip():
        answers.pop("edit")
        edit = None
    if all_bad:  # the shown tie below the edit: the one ranking where all of them tie
        if edit is None or ranks != [1] * len(order) or answers.get("strengths") is not None:
            raise UserError("all bad with a ranking takes an edit, and the shown responses tie below it")
    else:
        check_ranks(ranks, len(order))
    texts = response_texts(con, order)
    check_answers(answers, Shown(texts=[texts[i] for i in order], ranks=list(ranks)))
    version = _guideline_version(con, guideline_version)
    edit_id = _edit(con, annotator, assignment_id, prompt_id, order, ranks, edit) if edit else None
    flags = ["shown_order"] if is_shown_order(ranks) else []  # an edit is no flag: --drop-flagged keeps its pairs
    key = f"ui:{assignment_id}"
    ranking_id = add_ranking(
        con, prompt_id, annotator, SOURCE, key, lead_time, order, ranks, flags, edit_id, version, all_bad
    )
    write_answers(con, [(Written(ranking_id, annotator, list(order), list(ranks)), answers)])
    close_assignment(con, assignment_id, ranking_id)
    return ranking_id, True


def _guideline_version(con, shown: int | None) -> int | None:
    """The guideline version a ranking records: the one shown with its task, checked to exist (None: the current
    one, or None when no guideline is set)."""
    current = current_guideline(con)
    if shown is None:
        return current[0] if current else None
    if isinstance(shown, bool) or not isinstance(shown, int) or current is None or not 1 <= shown <= current[0]:
        raise UserError(f"guideline version {shown!r} was never set; reload the page")
    return shown


def _edit(
    con,
    annotator: str,
    assignment_id: int,
    prompt_id: int,
    order: list[int],
    ranks: list[int],
    edit: str,
) -> int:
    """Store the edit of the best-ranked response (checked with the other answers: annotation/questions/edit.py;
    all bad: of the first shown, as they tie); returns its response id."""
    best = order[ranks.index(min(ranks))]
    return add_edit(con, prompt_id, best, annotator, edit.strip(), assignment_round(con, assignment_id))


def skip(
    db: StoreRef,
    annotator: str,
    assignment_id: int,
    reason: str,
    guideline_version: int | None = None,
    all_bad: bool = False,
) -> int:
    """Close the task without a ranking; the reason is kept (a skipped ranking gives no pairs), with the guideline
    version shown (None: the current one). all_bad: the All bad button without an edit (its reason: ALL_BAD, unless
    the annotator wrote one)."""
    reason = (reason or "").strip() or (ALL_BAD if all_bad else "")
    if not reason:
        raise UserError("say why you skip (e.g. 'cannot judge'; none of them good is the All bad button)")
    if len(reason) > MAX_REASON_CHARS:
        raise UserError(f"a skip reason has at most {MAX_REASON_CHARS} characters; this one has {len(reason):,}")
    with write(db) as con:
        _, prompt_id, _, status, ranking_id, lead_time = _own_open(con, annotator, assignment_id)
        if status == "done":
            return ranking_id
        version = _guideline_version(con, guideline_version)
        key = f"ui:{assignment_id}"
        ranking_id = add_skip(con, prompt_id, annotator, SOURCE, key, lead_time, reason, version, all_bad)
        close_assignment(con, assignment_id, ranking_id)
        return ranking_id


def undo_last(db: StoreRef, annotator: str, max_per_hour: int | None = None) -> Task:
    """Take back the annotator's last submission or skip and hand its task back for editing; what was taken back is
    kept in undone_rankings (`rlhf undone`). Only the last one: while its task is open again, Undo refuses (the
    answers before it stay as they are). max_per_hour: undos a login may make in an hour (each keeps a copy).

    The prompt the annotator holds meanwhile (if any) goes back to the pool."""
    _check_annotator(annotator)
    with write(db) as con:
        current = open_assignment(con, annotator)
        if current is not None and is_undone(con, current[0]):
            raise UserError("only your last answer can be undone, and it is open now: submit or skip it first")
        if max_per_hour is not None and undos_in_last_hour(con, annotator) >= max_per_hour:
            raise UserError(f"this server takes {max_per_hour} undos an hour per login; try again later")
        last = last_closed(con, annotator)
        if last is None:
            raise UserError("nothing to undo yet")
        assignment_id, ranking_id = last
        ranks = ranks_of(con, ranking_id)
        tags = tags_of(con, ranking_id)
        all_bad = said_all_bad(con, ranking_id)
        answers = answers_of(con, ranking_id)
        if current is not None:
            drop_assignment(con, current[0])
        keep_undone(con, ranking_id, assignment_id)
        delete_ranking(con, ranking_id)
        reopen(con, assignment_id)
        _, prompt_id, order, *_ = get_assignment(con, assignment_id)
        edit = edit_in(con, list(ranks))  # an edit was ranked 1 above the shown responses' own ranks + 1
        previous = [ranks[i] - (1 if edit else 0) for i in order] if ranks else None
        previous_tags = [tags.get(i, []) for i in order] if tags else None
        task = _task(con, assignment_id, prompt_id, order, previous, edit[1] if edit else None, previous_tags)
        task.previous_all_bad, task.previous_answers = all_bad, answers
        return task


def progress(db: StoreRef, annotator: str, overlap: int = 1) -> Progress:
    with read(db) as con:
        return Progress(*annotation_counts(con, annotator, SOURCE, overlap))

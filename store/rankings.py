"""Rankings and their items. Parsers (native JSONL, Label Studio, the UI) produce `RankingIn` (`insert_rankings`),
the Annotate tab submits and skips one at a time (`add_ranking`, `add_skip`); this module is the one place that
writes them, always inside the caller's transaction, keeping the counters of store/tasks.py with them. Both go
through annotation/judgement.py, which then writes what each question's answer adds (its `write`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from store.edits import EDIT_MODEL, add_edit_row, ranks_with_edit
from store.prompts import next_ids, prompt_ids
from store.protocol import Connection
from store.tasks import count_rankings, pairs_of_ranks, refresh_tasks


@dataclass
class RankedItem:
    """One response inside a ranking. rank 1 = best; equal ranks are a tie."""

    text: str
    rank: int
    shown_position: int | None = None
    response_id: int | None = None  # known when the response came from this store (UI, export-ls round trip)


class _Answer:
    """A question's answer read and set by name on RankingIn.answers (a name set to None is dropped)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, ranking: RankingIn | None, owner: type | None = None):
        return self if ranking is None else ranking.answers.get(self.name)

    def __set__(self, ranking: RankingIn, value: object) -> None:
        if value is None:
            ranking.answers.pop(self.name, None)
        else:
            ranking.answers[self.name] = value


@dataclass
class RankingIn:
    prompt: str
    items: list[RankedItem]
    annotator: str
    source: str  # 'native', 'labelstudio', 'ui', 'compare'
    external_key: str | None = None
    # LIKE patterns (`\` escapes) of keys an earlier import may hold this same ranking under, for when the key
    # cannot say everything about where the ranking comes from (an older key scheme, a file that does not name
    # its server): a stored ranking of the same prompt under such a key, with equal content, is this one.
    same_as: list[str] = field(default_factory=list)
    # of those, the patterns under which a stored ranking of the same prompt is this one whatever its content (the
    # same task and annotation ids where one side does not know its origin): other content there is this ranking
    # edited since, a conflict, not a second judgement
    same_whatever: list[str] = field(default_factory=list)
    lead_time_s: float | None = None
    flags: list[str] = field(default_factory=list)
    skipped: bool = False
    skip_reason: str | None = None
    # every question's answer by name (annotation/questions/; None or absent: not given). The store reads the edit
    # (an item of its own) and all bad (a column of rankings) by name; annotation/judgement.py writes the rest of
    # what each answer means once the ranking is stored
    answers: dict[str, object] = field(default_factory=dict)

    strengths = _Answer()  # how much better, per step down the order (annotation/questions/strength.py)
    edit = _Answer()  # a correction of the best-ranked item, stored ranked above all (store/edits.py)
    tags = _Answer()  # each item's tags, in items' order (store/guidelines.py)
    # none of the shown responses is good (annotation/questions/all_bad.py): a skip without an edit, else the shown
    # tie below the edit
    all_bad = _Answer()

    def problem(self) -> str | None:
        """Why this ranking cannot be stored, or None: the ranking itself (its answers are checked by their
        questions, annotation/judgement.py::check_answers). Parsers prefix it with the line or task it came from."""
        if not self.prompt.strip():
            return "the prompt is empty"
        if self.skipped:  # a skip answers nothing: no items, no strengths, edit or tags
            answered = self.items or any(v is not None for q, v in self.answers.items() if q != "all_bad")
            return "a skipped prompt has no ranking or answers" if answered else None
        if self.all_bad and (self.edit is None or len({it.rank for it in self.items}) > 1):
            return "an all-bad answer ranks nothing: without an edit it is a skip, with one the shown responses tie"
        k = len(self.items)
        if k < 2:
            return f"a ranking needs at least 2 responses, got {k}"
        seen: dict[str, int] = {}
        for i, it in enumerate(self.items, 1):
            if not it.text.strip():
                return f"response {i} is empty"
            if it.text in seen:
                return f"responses {seen[it.text]} and {i} are identical"
            seen[it.text] = i
            if isinstance(it.rank, bool) or not isinstance(it.rank, int) or not 1 <= it.rank <= k:
                return f"rank {it.rank!r} of response {i} is out of range 1..{k}"
        return None

    def stored_items(self) -> list[tuple[str, int]]:
        """(text, rank) of every item as stored: with an edit, the edit ranked 1 and the items below it."""
        texts, ranks = [it.text for it in self.items], [it.rank for it in self.items]
        if self.edit is None:
            return list(zip(texts, ranks, strict=True))
        return list(zip([*texts, self.edit], ranks_with_edit(ranks), strict=True))

    @property
    def n_pairs(self) -> int:
        """Pairs this ranking expands to: every i, j with rank_i < rank_j (same rule as the SQL view)."""
        if self.skipped:
            return 0
        ranks = [rank for _, rank in self.stored_items()]
        return sum(1 for a in ranks for b in ranks if a < b)


@dataclass
class InsertResult:
    added: int = 0
    already: int = 0  # stored before under its key, or under a `same_as` key with equal content (a re-import)
    conflicts: list[str] = field(default_factory=list)  # keys stored with other content; the stored one stays
    pairs: int = 0
    flagged: int = 0
    # each ranking written now: (the ranking, its id, its items' response ids in items' order), for the answers'
    # own rows (annotation/judgement.py)
    written: list[tuple[RankingIn, int, list[int]]] = field(default_factory=list)


def _stored_responses(con: Connection, pids: list[int]) -> tuple[dict, dict, dict]:
    """For these prompts: (prompt, text) -> first response id, response id -> (prompt, text), and
    prompt -> its next free position."""
    rows = con.execute(
        "SELECT prompt_id, text, response_id, position FROM responses WHERE prompt_id IN (SELECT unnest(?::BIGINT[])) "
        "ORDER BY response_id",
        [pids],
    ).fetchall()
    by_text, by_id, next_pos = {}, {}, {}
    for pid, text, rid, pos in rows:
        by_text.setdefault((pid, text), rid)
        by_id[rid] = (pid, text)
        next_pos[pid] = max(next_pos.get(pid, 0), pos + 1)
    return by_text, by_id, next_pos


def insert_rankings(con: Connection, rankings: list[RankingIn], import_id: int | None = None) -> InsertResult:
    """Write rankings whose external key is new; re-imported ones are counted in `already` and left alone, and a
    key already stored with other content (prompt, response texts or ranks) is a conflict: listed in
    `conflicts`, never overwritten.

    Each item is matched to a stored response of its prompt (by id when given and the text agrees, else by text),
    and the rest become new responses. Everything is planned in Python first and written in four statements
    (prompts, responses, rankings, items), whatever the number of rankings (then, through annotation/judgement.py,
    one per answered question's table): a 1,000-ranking import is one short write inside the caller's transaction."""
    result = InsertResult()
    todo = _not_yet_stored(con, rankings, result)
    if not todo:
        return result
    ids = prompt_ids(con, [r.prompt for r in todo], source=f"import:{todo[0].source}")
    new_responses, items = _plan_items(con, todo, ids, result)
    response_ids = next_ids(con, "response_ids", len(new_responses))
    if new_responses:
        con.execute(
            "INSERT INTO responses (response_id, prompt_id, text, model_id, position) "
            "SELECT unnest(?::BIGINT[]), unnest(?::BIGINT[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), "
            "unnest(?::INTEGER[])",
            [response_ids, *map(list, zip(*new_responses, strict=True))],
        )
    ranking_ids = _write_rankings(con, todo, ids, import_id)
    if items:
        con.execute(
            "INSERT INTO ranking_items (ranking_id, response_id, rank, shown_position) "
            "SELECT unnest(?::BIGINT[]), unnest(?::BIGINT[]), unnest(?::INTEGER[]), unnest(?::INTEGER[])",
            [
                [ranking_ids[n] for n, _, _, _ in items],
                [response_ids[-rid - 1] if rid < 0 else rid for _, rid, _, _ in items],
                [rank for _, _, rank, _ in items],
                [pos for _, _, _, pos in items],
            ],
        )
    resolved = [(n, response_ids[-rid - 1] if rid < 0 else rid) for n, rid, _, _ in items]
    by_ranking: dict[int, list[int]] = {}  # each ranking's items' response ids, in its items' order (then the edit)
    for n, rid in resolved:
        by_ranking.setdefault(n, []).append(rid)
    _add_edits(con, todo, by_ranking)
    result.written = [(r, ranking_ids[n], by_ranking.get(n, [])[: len(r.items)]) for n, r in enumerate(todo)]
    count_rankings(con, [(r.annotator, r.source, r.skipped, r.n_pairs) for r in todo])
    refresh_tasks(con, {pid for pid, *_ in new_responses})
    return result


def _add_edits(con: Connection, todo: list, by_ranking: dict) -> None:
    """Each imported edit's row (store/edits.py): its response and item are written with the others, last."""
    for n, r in enumerate(todo):
        if r.edit is not None and not r.skipped:
            shown = by_ranking[n][: len(r.items)]
            best = shown[[it.rank for it in r.items].index(min(it.rank for it in r.items))]
            add_edit_row(con, by_ranking[n][-1], best, r.annotator)


def add_pair_strengths(con: Connection, rows: list[tuple[int, int, int, int]]) -> int:
    """(ranking id, chosen response id, rejected response id, level) rows into pair_strengths, one INSERT (the
    strength question's rows: annotation/questions/strength.py); returns the rows written."""
    if rows:
        con.execute(
            "INSERT INTO pair_strengths SELECT unnest(?::BIGINT[]), unnest(?::BIGINT[]), unnest(?::BIGINT[]), "
            "unnest(?::INTEGER[])",
            [list(col) for col in zip(*rows, strict=True)],
        )
    return len(rows)


def _not_yet_stored(con: Connection, rankings: list[RankingIn], result: InsertResult) -> list:
    """The rankings to write: those whose key (if any) is neither stored nor earlier in the batch, and that no
    `same_as` key holds with equal content. A known key with equal content counts in result.already, with other
    content in result.conflicts."""
    stored = _contents(_rows_by_key(con, [r.external_key for r in rankings if r.external_key]))
    stored = {key: content for (_, key), content in stored.items()}
    wanted = [(n, r) for n, r in enumerate(rankings) if r.external_key not in stored]
    aliased = _contents(_rows_by_alias(con, wanted))
    alias_contents = {(n, content) for (n, _), content in aliased.items()}
    edited = {n: key for n, key in _rows_by_alias(con, wanted, whatever=True)}  # n -> a stored key it is
    todo = []
    for n, r in enumerate(rankings):
        key = r.external_key
        if key in stored:
            if stored[key] == _content(r):
                result.already += 1
            else:
                result.conflicts.append(key)
        elif (n, _content(r)) in alias_contents:
            result.already += 1
        elif n in edited:
            result.conflicts.append(edited[n])
        else:
            if key:
                stored[key] = _content(r)
            todo.append(r)
    return todo


def _content(r: RankingIn) -> tuple:
    """What makes two rankings the same judgement: the prompt, whether it said all bad (a skip without items is
    either a pass or that), and each response text with its rank (an edit among them)."""
    return r.prompt, bool(r.all_bad), tuple(sorted(r.stored_items()))


def _contents(rows: list[tuple]) -> dict[tuple, tuple]:
    """(tag, key, prompt, all bad, response text, rank) rows -> {(tag, key): content as `_content` gives it}. A
    ranking without items (a skip) has one row whose text is NULL."""
    heads, items = {}, {}
    for tag, key, prompt, all_bad, text, rank in rows:
        heads[(tag, key)] = (prompt, bool(all_bad))
        items.setdefault((tag, key), []).extend([(text, rank)] if text is not None else [])
    return {k: (*heads[k], tuple(sorted(items[k]))) for k in heads}


def _rows_by_key(con: Connection, keys: list[str]) -> list[tuple]:
    """The stored rankings under these keys, as `_contents` reads them (tagged with their key)."""
    if not keys:
        return []
    return con.execute(
        """SELECT k.external_key, k.external_key, p.text, k.all_bad, r.text, i.rank
           FROM rankings k JOIN prompts p ON p.prompt_id = k.prompt_id
           LEFT JOIN ranking_items i ON i.ranking_id = k.ranking_id
           LEFT JOIN responses r ON r.response_id = i.response_id
           WHERE k.external_key IN (SELECT unnest(?::VARCHAR[]))""",
        [keys],
    ).fetchall()


def _rows_by_alias(con: Connection, wanted: list[tuple[int, RankingIn]], whatever: bool = False) -> list[tuple]:
    """Stored rankings of the same prompt under a key that one of the ranking's `same_as` patterns matches, as
    `_contents` reads them (tagged with the ranking's index). Joined through the prompt text, so the pattern is
    only tried on the few rankings of that prompt. whatever: (index, stored key) of those a `same_whatever`
    pattern matches."""
    asked = [(n, r.prompt, pattern) for n, r in wanted for pattern in (r.same_whatever if whatever else r.same_as)]
    if not asked:
        return []
    if whatever:
        return con.execute(
            """SELECT DISTINCT q.n, k.external_key
               FROM (SELECT unnest(?::BIGINT[]) AS n, unnest(?::VARCHAR[]) AS prompt, unnest(?::VARCHAR[]) AS pattern) q
               JOIN prompts p ON p.text = q.prompt
               JOIN rankings k ON k.prompt_id = p.prompt_id AND k.external_key LIKE q.pattern ESCAPE '\\'""",
            [list(col) for col in zip(*asked, strict=True)],
        ).fetchall()
    return con.execute(
        """SELECT q.n, k.external_key, p.text, k.all_bad, r.text, i.rank
           FROM (SELECT unnest(?::BIGINT[]) AS n, unnest(?::VARCHAR[]) AS prompt, unnest(?::VARCHAR[]) AS pattern) q
           JOIN prompts p ON p.text = q.prompt
           JOIN rankings k ON k.prompt_id = p.prompt_id AND k.external_key LIKE q.pattern ESCAPE '\\'
           LEFT JOIN ranking_items i ON i.ranking_id = k.ranking_id
           LEFT JOIN responses r ON r.response_id = i.response_id""",
        [list(col) for col in zip(*asked, strict=True)],
    ).fetchall()


def _plan_items(con: Connection, todo: list, ids: dict, result: InsertResult) -> tuple[list, list]:
    """(new responses (prompt_id, text, model_id, position), items (ranking index, response id, rank, shown
    position)): each item's stored response, or a new one whose id is a placeholder -1, -2, ... until allocated."""
    by_text, by_id, next_pos = _stored_responses(con, sorted({ids[r.prompt] for r in todo}))
    new_responses, items = [], []
    for n, r in enumerate(todo):
        pid = ids[r.prompt]
        below = 1 if r.edit is not None else 0  # an edit is ranked 1, the items below it
        for it in r.items:
            if it.response_id is not None and by_id.get(it.response_id) == (pid, it.text):
                rid = it.response_id
            elif (pid, it.text) in by_text:
                rid = by_text[(pid, it.text)]
            else:
                position = next_pos.get(pid, 0)
                next_pos[pid] = position + 1
                new_responses.append((pid, it.text, f"import:{r.source}", position))
                rid = by_text[(pid, it.text)] = -len(new_responses)
            items.append((n, rid, it.rank + below, it.shown_position))
        if r.edit is not None and not r.skipped:  # a response of its own, as an edit made in the Annotate tab
            position = next_pos.get(pid, 0)
            next_pos[pid] = position + 1
            new_responses.append((pid, r.edit, EDIT_MODEL, position))
            items.append((n, -len(new_responses), 1, None))
        result.added += 1
        result.pairs += r.n_pairs
        result.flagged += bool(r.flags)
    return new_responses, items


def _write_rankings(con: Connection, todo: list, ids: dict, import_id: int | None) -> list[int]:
    """One INSERT of the rankings' rows; returns their new ids, in order."""
    ranking_ids = next_ids(con, "ranking_ids", len(todo))
    con.execute(
        """INSERT INTO rankings (ranking_id, prompt_id, annotator, source, external_key, import_id, lead_time_s,
                                 skipped, skip_reason, flags, all_bad)
           SELECT unnest(?::BIGINT[]), unnest(?::BIGINT[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]),
                  unnest(?::VARCHAR[]), ?, unnest(?::DOUBLE[]), unnest(?::BOOLEAN[]), unnest(?::VARCHAR[]),
                  unnest(?::VARCHAR[][]), unnest(?::BOOLEAN[])""",
        [
            ranking_ids,
            [ids[r.prompt] for r in todo],
            [r.annotator for r in todo],
            [r.source for r in todo],
            [r.external_key for r in todo],
            import_id,
            [r.lead_time_s for r in todo],
            [r.skipped for r in todo],
            [r.skip_reason for r in todo],
            [list(r.flags) for r in todo],
            [bool(r.all_bad) for r in todo],
        ],
    )
    return ranking_ids


def add_ranking(
    con: Connection,
    prompt_id: int,
    annotator: str,
    source: str,
    external_key: str,
    lead_time_s: float | None,
    response_ids: list[int],
    ranks: list[int],
    flags: list[str],
    edit_id: int | None = None,
    guideline_version: int | None = None,
    all_bad: bool = False,
) -> int:
    """One ranking of stored responses as they were shown (ranks[i] is the rank of response_ids[i], shown at
    position i), counted in ranking_counts; returns its id. The Annotate tab's submit: two statements whatever K, as
    DuckDB's fixed cost per statement is most of a small insert; the answers' own rows (strengths, tags, ...) are
    annotation/judgement.py's to write after it.

    edit_id: the annotator's edit of their best response (store/edits.py), ranked above all of them (after the shown
    responses, at position K). guideline_version: the guideline shown with the task. all_bad: none of the shown was
    good, so they tie below the edit."""
    ranking_id = con.execute(
        """INSERT INTO rankings (prompt_id, annotator, source, external_key, lead_time_s, flags, guideline_version,
                                 all_bad)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING ranking_id""",
        [prompt_id, annotator, source, external_key, lead_time_s, flags, guideline_version, all_bad],
    ).fetchone()[0]
    ids, all_ranks = (response_ids, ranks) if edit_id is None else ([*response_ids, edit_id], ranks_with_edit(ranks))
    con.execute(
        "INSERT INTO ranking_items (ranking_id, response_id, rank, shown_position) "
        "SELECT ?, unnest(?::BIGINT[]), unnest(?::INTEGER[]), unnest(?::INTEGER[])",
        [ranking_id, ids, all_ranks, list(range(len(ids)))],
    )
    count_rankings(con, [(annotator, source, False, pairs_of_ranks(all_ranks))])
    return ranking_id


def add_skip(
    con: Connection,
    prompt_id: int,
    annotator: str,
    source: str,
    external_key: str,
    lead_time_s: float | None,
    reason: str,
    guideline_version: int | None = None,
    all_bad: bool = False,
) -> int:
    """A skipped prompt: a ranking without items that keeps the reason (it gives no pairs); returns its id. all_bad:
    the answer was "none of these is good", not a pass."""
    ranking_id = con.execute(
        """INSERT INTO rankings (prompt_id, annotator, source, external_key, lead_time_s, skipped, skip_reason,
                                 guideline_version, all_bad)
           VALUES (?, ?, ?, ?, ?, true, ?, ?, ?) RETURNING ranking_id""",
        [prompt_id, annotator, source, external_key, lead_time_s, reason, guideline_version, all_bad],
    ).fetchone()[0]
    count_rankings(con, [(annotator, source, True, 0)])
    return ranking_id


def said_all_bad(con: Connection, ranking_id: int) -> bool:
    """Whether the answer said none of the shown responses was good (annotation/questions/all_bad.py)."""
    row = con.execute("SELECT all_bad FROM rankings WHERE ranking_id = ?", [ranking_id]).fetchone()
    return bool(row and row[0])


def ranks_of(con: Connection, ranking_id: int) -> dict[int, int]:
    """response id -> rank in this ranking (empty for a skip)."""
    return dict(
        con.execute("SELECT response_id, rank FROM ranking_items WHERE ranking_id = ?", [ranking_id]).fetchall()
    )


def items_by_ranking(con: Connection) -> list[tuple[int, list[int], list[int]]]:
    """(ranking id, its response ids, their ranks) of every ranking, items by response id: what a Python loop
    expanding pairs starts from (bench/pairs.py times one against the `pair_ids` view; tuples, as the loop unpacks
    them)."""
    return con.execute(
        "SELECT ranking_id, list(response_id ORDER BY response_id), list(rank ORDER BY response_id) "
        "FROM ranking_items GROUP BY ranking_id"
    ).fetchall()


@dataclass(frozen=True)
class SourceTotals:
    """What one source's rankings hold."""

    rankings: int
    prompts: int  # distinct prompts ranked
    keys: int  # distinct external keys
    items: int  # ranking items of those rankings


def source_totals(con: Connection, source: str) -> SourceTotals:
    row = con.execute(
        """WITH these AS (SELECT * FROM rankings WHERE source = ?)
           SELECT count(*), count(DISTINCT prompt_id), count(DISTINCT external_key),
                  (SELECT count(*) FROM ranking_items WHERE ranking_id IN (SELECT ranking_id FROM these))
           FROM these""",
        [source],
    ).fetchone()
    return SourceTotals(*row)

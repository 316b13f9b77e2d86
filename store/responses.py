"""Sampled responses: one row per sample, with the model, sampling parameters and seed that made it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from store.assignments import RANKABLE
from store.protocol import Connection
from store.tasks import refresh_tasks


@dataclass
class Sample:
    """One generated response for one prompt."""

    prompt_id: int
    text: str
    position: int  # sample index within the prompt's K samples
    n_tokens: int
    finish_reason: str  # 'eos' or 'length'
    seed: int
    params: dict = field(default_factory=dict)


def samples_from(prompt_ids: list[int], generated: list[list], seed: int, params: dict, first: int = 0) -> list[Sample]:
    """Rows for each prompt's generated replies (objects with .text, .n_tokens, .finish_reason), positions from
    `first` on."""
    return [
        Sample(
            prompt_id=pid,
            text=g.text,
            position=first + j,
            n_tokens=g.n_tokens,
            finish_reason=g.finish_reason,
            seed=seed,
            params=params,
        )
        for pid, gens in zip(prompt_ids, generated, strict=True)
        for j, g in enumerate(gens)
    ]


def add_samples(con: Connection, samples: list[Sample], model_id: str, round_: int | None = None) -> int:
    """Store samples, marking each exact repeat of an earlier sample of the same prompt as a duplicate. With a
    round, the samples belong to it (store/rounds.py) and only a repeat within that round is a duplicate: a round
    ranks its own responses, whatever earlier rounds drew.

    Returns how many were duplicates. Runs inside the caller's transaction."""
    duplicates = 0
    first: dict[tuple[int, str], int] = {}
    for s in samples:
        key = (s.prompt_id, s.text)
        dup = first.get(key)
        if dup is None:
            row = con.execute(
                "SELECT min(response_id) FROM responses WHERE prompt_id = ? AND text = ?"
                if round_ is None
                else "SELECT min(response_id) FROM response_round JOIN responses USING (response_id, prompt_id) "
                "WHERE prompt_id = ? AND text = ? AND round = ?",
                list(key) if round_ is None else [*key, round_],
            ).fetchone()
            dup = row[0]
        new_id = con.execute(
            """INSERT INTO responses (prompt_id, text, model_id, params, seed, position, n_tokens,
                                      finish_reason, duplicate_of)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING response_id""",
            [s.prompt_id, s.text, model_id, json.dumps(s.params), s.seed, s.position, s.n_tokens, s.finish_reason, dup],
        ).fetchone()[0]
        if round_ is not None:
            con.execute("INSERT INTO response_rounds (response_id, round) VALUES (?, ?)", [new_id, round_])
        if dup is None:
            first[key] = new_id
        else:
            duplicates += 1
    refresh_tasks(con, [s.prompt_id for s in samples])
    return duplicates


def sampled_prompts(con: Connection, prompt_ids: list[int]) -> set[int]:
    """Those of these prompts that have a response already."""
    rows = con.execute(
        "SELECT DISTINCT prompt_id FROM responses WHERE prompt_id IN (SELECT unnest(?::BIGINT[]))", [prompt_ids]
    ).fetchall()
    return {p for (p,) in rows}


def response_texts(con: Connection, response_ids: list[int]) -> dict[int, str]:
    """response id -> text, for these responses."""
    rows = con.execute(
        "SELECT response_id, text FROM responses WHERE response_id IN (SELECT unnest(?::BIGINT[]))", [response_ids]
    ).fetchall()
    return dict(rows)


@dataclass(frozen=True)
class PromptResponse:
    """One response with its prompt's text."""

    prompt: str
    response_id: int
    text: str


def responses_by_prompt(con: Connection, round_: int | None = None) -> list[PromptResponse]:
    """Every response (with a round, that round's only), prompt by prompt, each prompt's in sampling order."""
    rows = con.execute(
        "SELECT p.text, r.response_id, r.text FROM responses r JOIN prompts p USING (prompt_id) "
        "JOIN response_round x USING (response_id) WHERE ? IS NULL OR x.round = ? "
        "ORDER BY r.prompt_id, r.position",
        [round_, round_],
    ).fetchall()
    return [PromptResponse(*row) for row in rows]


@dataclass(frozen=True)
class RankableSet:
    """A prompt with two or more responses an annotator can rank (`RANKABLE`), in sampling order."""

    prompt_id: int
    prompt: str
    response_ids: list[int]
    texts: list[str]


def rankable_sets(con: Connection) -> list[RankableSet]:
    """Every prompt with at least two distinct, non-empty responses, by prompt id."""
    rows = con.execute(
        f"""SELECT p.prompt_id, p.text, list(r.response_id ORDER BY r.position, r.response_id),
                  list(r.text ORDER BY r.position, r.response_id)
           FROM prompts p JOIN responses r USING (prompt_id)
           WHERE {RANKABLE}
           GROUP BY p.prompt_id, p.text HAVING count(*) >= 2 ORDER BY p.prompt_id"""
    ).fetchall()
    return [RankableSet(*row) for row in rows]

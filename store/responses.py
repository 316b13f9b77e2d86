"""Sampled responses: one row per sample, with the model, sampling parameters and seed that made it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import duckdb

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


def add_samples(con: duckdb.DuckDBPyConnection, samples: list[Sample], model_id: str, round_: int | None = None) -> int:
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

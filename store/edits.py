"""Edits (migration 0012; Llama 3's edited > chosen > rejected): an annotator's correction of the response they
ranked best becomes a response of its own, ranked first in their ranking (store/rankings.py::add_ranking's
`edit_id`). The queue never hands an edit out (store/assignments.py::RANKABLE). All functions run inside the
caller's transaction."""

from __future__ import annotations

from store.protocol import Connection

EDIT_MODEL = "edit"  # an edit's model_id: what the pairs view's policy columns show for it


def add_edit(con: Connection, prompt_id: int, edit_of: int, annotator: str, text: str, round_: int) -> int:
    """Store the edit as a response of the prompt (in the round of the task it was made in); returns its id."""
    position = con.execute(
        "SELECT coalesce(max(position), -1) + 1 FROM responses WHERE prompt_id = ?", [prompt_id]
    ).fetchone()[0]
    response_id = con.execute(
        "INSERT INTO responses (prompt_id, text, model_id, position) VALUES (?, ?, ?, ?) RETURNING response_id",
        [prompt_id, text, EDIT_MODEL, position],
    ).fetchone()[0]
    add_edit_row(con, response_id, edit_of, annotator)
    if round_ > 1:  # no row reads as round 1
        con.execute("INSERT INTO response_rounds VALUES (?, ?)", [response_id, round_])
    return response_id


def ranks_with_edit(ranks: list[int]) -> list[int]:
    """The ranks of a ranking's items as stored with an edit: each shown one a place lower, the edit (last) first."""
    return [r + 1 for r in ranks] + [1]


def add_edit_row(con: Connection, response_id: int, edit_of: int, annotator: str) -> None:
    """Mark the stored response `response_id` as `annotator`'s edit of response `edit_of`."""
    con.execute(
        "INSERT INTO edits (response_id, edit_of, annotator) VALUES (?, ?, ?)", [response_id, edit_of, annotator]
    )


def edit_in(con: Connection, response_ids: list[int]) -> tuple[int, str] | None:
    """(response id, text) of the edit among these responses (a ranking's items), if one is."""
    return con.execute(
        """SELECT r.response_id, r.text FROM edits e JOIN responses r USING (response_id)
           WHERE e.response_id IN (SELECT unnest(?::BIGINT[]))""",
        [response_ids],
    ).fetchone()

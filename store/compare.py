"""Blind side-by-side votes from the Compare tab (migration 0006), kept apart from the annotation data: a vote adds
no prompt to the annotators' queue and no response to a stored prompt; it reaches training only when a run asks for
it (`--with-votes`: the decided votes as pairs, the `vote_pairs` view)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from store.protocol import Connection

CHOICES = ("left", "right", "tie", "both_bad")


@dataclass
class Vote:
    """One vote: what both sides answered (the message, or the whole conversation when both sides had the same
    earlier turns: store/conversations.py), each side's conversation before it, the two replies with the model that
    wrote each, and the choice."""

    annotator: str
    prompt: str
    replies: list[tuple[str, str]]  # [(text, model id) of left, right]
    choice: str
    params: dict
    seed: int
    context: list[list[dict]] | None = None  # [left messages, right messages] before the replies
    flags: list[str] | None = None


def record_vote(con: Connection, vote: Vote) -> int:
    """Store one vote; returns its id. Identical replies are stored as a tie (they give no pair)."""
    if vote.choice not in CHOICES:
        raise ValueError(f"unknown vote {vote.choice!r}: one of {', '.join(CHOICES)}")
    (left, left_model), (right, right_model) = vote.replies
    choice = "tie" if left == right and vote.choice in ("left", "right") else vote.choice
    return con.execute(
        """INSERT INTO votes (annotator, prompt, context, left_text, left_model, right_text, right_model, choice,
                              params, seed, flags)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING vote_id""",
        [
            vote.annotator,
            vote.prompt,
            json.dumps(vote.context or []),
            left,
            left_model,
            right,
            right_model,
            choice,
            json.dumps(vote.params),
            vote.seed,
            list(vote.flags or []),
        ],
    ).fetchone()[0]


def compare_votes(con: Connection) -> list[tuple[str, str, str]]:
    """(model of the left reply, model of the right reply, outcome) for every vote, oldest first; outcome is
    'left', 'right', 'tie' or 'both_bad'."""
    return con.execute("SELECT left_model, right_model, choice FROM votes ORDER BY vote_id").fetchall()

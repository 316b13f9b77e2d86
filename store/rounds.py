"""Rounds (migration 0004): which policy each round sampled, which prompts it asked in which order, and what came of
it. Every response no round sampled belongs to round 1, so a store from before rounds reads as one round. All
functions run inside the caller's transaction."""

from __future__ import annotations

import json

from store.protocol import Connection
from store.tasks import refresh_tasks


def latest_round(con: Connection) -> int:
    """The newest round: the highest recorded one, 1 where only untagged responses exist, 0 in an empty store."""
    recorded = con.execute("SELECT coalesce(max(round), 0) FROM rounds").fetchone()[0]
    untagged = con.execute(
        "SELECT count(*) > 0 FROM responses r WHERE NOT EXISTS "
        "(SELECT 1 FROM response_rounds x WHERE x.response_id = r.response_id)"
    ).fetchone()[0]
    return max(recorded, 1 if untagged else 0)


def round_policies(con: Connection, round_: int) -> tuple[str | None, str | None]:
    """(policy, previous policy) of a recorded round; for an unrecorded round 1, the model id most of its responses
    came from (and no previous policy)."""
    row = con.execute("SELECT policy, previous_policy FROM rounds WHERE round = ?", [round_]).fetchone()
    if row:
        return row[0], row[1]
    row = con.execute(
        "SELECT model_id FROM response_round WHERE round = ? "
        "GROUP BY model_id ORDER BY count(*) DESC, model_id LIMIT 1",
        [round_],
    ).fetchone()
    return (row[0] if row else None), None


def record_round(
    con: Connection,
    round_: int,
    policy: str,
    previous_policy: str | None,
    selection: str,
    params: dict,
    prompts: list[tuple[int, float | None]],
) -> None:
    """The round's row and its prompts in asking order: (prompt id, the selection's value or None)."""
    con.execute(
        "INSERT INTO rounds (round, policy, previous_policy, selection, params) VALUES (?, ?, ?, ?, ?)",
        [round_, policy, previous_policy, selection, json.dumps(params)],
    )
    if prompts:
        con.execute(
            "INSERT INTO round_prompts (round, prompt_id, position, value) "
            "SELECT ?, unnest(?::BIGINT[]), unnest(?::INTEGER[]), unnest(?::DOUBLE[])",
            [round_, [p for p, _ in prompts], list(range(len(prompts))), [v for _, v in prompts]],
        )
        refresh_tasks(con, [p for p, _ in prompts])


def asked_prompts(con: Connection) -> set[int]:
    """Prompts some round already asked: ranked in any round, or chosen for a recorded round."""
    rows = con.execute(
        "SELECT prompt_id FROM rankings UNION SELECT prompt_id FROM round_prompts",
    ).fetchall()
    return {p for (p,) in rows}


def list_rounds(con: Connection) -> list[dict]:
    """One dict per round, oldest first: its policies and selection, prompts, responses, rankings and pairs, the
    rankings spent up to and including it, how often each policy's response was ranked first in a mixed round, and
    the training runs recorded between it and the next round."""
    rounds = con.execute(
        # a ranking's pairs counted from its rank groups, (n^2 - sum of group sizes^2) / 2, not expanded: the same
        # number as the pairs view's rows, in a third of the time on a store of a million rankings
        """WITH per AS (SELECT round, count(DISTINCT prompt_id) AS prompts, count(*) AS responses
                        FROM response_round GROUP BY round),
                items AS (SELECT i.ranking_id, i.rank, coalesce(x.round, 1) AS round
                          FROM ranking_items i JOIN rankings r USING (ranking_id)
                          LEFT JOIN response_rounds x USING (response_id) WHERE NOT r.skipped),
                grp AS (SELECT ranking_id, count(*) AS n, max(round) AS round FROM items GROUP BY ranking_id, rank),
                one AS (SELECT ranking_id, max(round) AS round, (sum(n) * sum(n) - sum(n * n)) // 2 AS pairs
                        FROM grp GROUP BY ranking_id),
                rk AS (SELECT round, count(*) AS rankings, sum(pairs)::BIGINT AS pairs FROM one GROUP BY round),
                ids AS (SELECT round FROM per UNION SELECT round FROM rounds)
           SELECT i.round, coalesce(per.prompts, 0), coalesce(per.responses, 0), coalesce(rk.rankings, 0),
                  coalesce(rk.pairs, 0), r.selection, r.created_at
           FROM ids i LEFT JOIN per USING (round) LEFT JOIN rk USING (round)
           LEFT JOIN rounds r USING (round) ORDER BY i.round"""
    ).fetchall()
    out, spent = [], 0
    starts = [created for *_, created in rounds[1:]] + [None] if rounds else []  # each round ends where the next starts
    for (round_, prompts, responses, rankings, pairs, selection, created), until in zip(rounds, starts, strict=True):
        policy, previous = round_policies(con, round_)
        spent += rankings
        out.append(
            {
                "round": round_,
                "policy": policy,
                "previous_policy": previous,
                "selection": selection or "all",
                "prompts": prompts,
                "responses": responses,
                "rankings": rankings,
                "pairs": pairs,
                "labels_spent": spent,
                "wins": first_places(con, round_),
                "runs": runs_between(con, created, until),
            }
        )
    return out


def first_places(con: Connection, round_: int) -> dict[str, float]:
    """Per policy (model id), the rankings of the round whose first place it took (a tie for first splits it)."""
    rows = con.execute(
        # a ranking shows one round's responses, so its first places' own round is the ranking's (no per-ranking
        # aggregate over every item, which cost 0.8 s a round on a store of a million rankings)
        """WITH top AS (SELECT i.ranking_id, rr.model_id FROM ranking_items i
                        JOIN response_round rr USING (response_id)
                        JOIN rankings r USING (ranking_id)
                        WHERE i.rank = 1 AND rr.round = ? AND NOT r.skipped)
           SELECT model_id, sum(1.0 / n) FROM top
           JOIN (SELECT ranking_id, count(*) AS n FROM top GROUP BY ranking_id) USING (ranking_id)
           GROUP BY model_id ORDER BY model_id""",
        [round_],
    ).fetchall()
    return {m: float(w) for m, w in rows}


def runs_between(con: Connection, since, until) -> list[tuple[str, str]]:
    """(run id, kind) of the runs recorded from `since` (None: the beginning) up to `until` (None: now)."""
    return con.execute(
        """SELECT run_id, kind FROM runs WHERE (? IS NULL OR created_at >= ?) AND (? IS NULL OR created_at < ?)
           ORDER BY created_at, run_id""",
        [since, since, until, until],
    ).fetchall()

"""Scoring annotators against gold rankings (store/gold.py): each ranking of a gold prompt earns, for every pair
the gold ranking orders (response i above j) whose responses it ranked too, 1 when it puts i above j, 1/2 when it
ties them, 0 when it reverses them. An annotator's gold accuracy is the credit over the pairs, all their gold
rankings together (a ranking of K = 4 responses without ties weighs 6 pairs). A skipped gold task scores 0 on every
pair the gold ranking orders: an annotator who skips the tasks they cannot tell apart from gold ones is scored, not
kept unscored by `--min-gold-accuracy`."""

from __future__ import annotations

import itertools
from collections import defaultdict


def gold_credit(gold: dict[int, int], ranks: dict[int, int] | None) -> tuple[float, int]:
    """(credit, pairs) of one ranking against the gold one; both {response id: rank}, 1 = best. ranks None: a
    skip, which earns nothing on every pair the gold ranking orders."""
    if ranks is None:
        return 0.0, sum(gold[i] != gold[j] for i, j in itertools.combinations(sorted(gold), 2))
    credit, pairs = 0.0, 0
    for i, j in itertools.combinations(sorted(gold.keys() & ranks.keys()), 2):
        if gold[i] == gold[j]:
            continue  # a gold tie asks nothing
        better, worse = (i, j) if gold[i] < gold[j] else (j, i)
        pairs += 1
        credit += 1.0 if ranks[better] < ranks[worse] else 0.5 if ranks[better] == ranks[worse] else 0.0
    return credit, pairs


def gold_accuracy(answers: list[tuple[str, dict[int, int], dict[int, int] | None]]) -> dict[str, tuple[float, int]]:
    """answers: (annotator, gold ranks, their ranks). Per annotator with at least one scored pair: (accuracy, how
    many gold rankings it rests on)."""
    credit, pairs, tasks = defaultdict(float), defaultdict(int), defaultdict(int)
    for annotator, gold, ranks in answers:
        c, n = gold_credit(gold, ranks)
        if n:
            credit[annotator] += c
            pairs[annotator] += n
            tasks[annotator] += 1
    return {a: (credit[a] / pairs[a], tasks[a]) for a in sorted(pairs)}


def below(accuracy: dict[str, tuple[float, int]], threshold: float) -> list[str]:
    """The annotators whose gold accuracy is under `threshold` (those never scored on gold are kept)."""
    return sorted(a for a, (acc, _) in accuracy.items() if acc < threshold)


def mark(db, ranking_ids: list[int], annotator: str = "", by: str = "admin") -> str:
    """`rlhf gold add`: mark rankings (and, with `annotator`, that annotator's latest ranking of each prompt) as
    their prompts' gold answers, in one transaction; returns the line to print."""
    from store.db import write
    from store.errors import UserError
    from store.gold import latest_rankings_of, mark_gold

    with write(db) as con:
        ids = list(ranking_ids)
        if annotator:
            theirs = latest_rankings_of(con, annotator)
            if not theirs:
                raise UserError(f"{annotator} has no rankings to mark as gold")
            ids += theirs
        n = mark_gold(con, ids, by)
    return f"gold: {n} prompt{'s' if n != 1 else ''} marked (a prompt's earlier gold ranking replaced)"


def scores(db) -> dict[str, tuple[float, int]]:
    """Every annotator's gold accuracy (see gold_accuracy) on the store's gold prompts."""
    from store.db import read
    from store.gold import gold_answers

    with read(db, create=False) as con:
        return gold_accuracy(gold_answers(con))

"""Preference strength (Llama 2's four levels): how much better each response is than the next one down in an
annotator's order. A ranking of K responses in G groups of equal rank carries G - 1 steps, best first; the pairs
view gives each pair the largest step between its two responses (A slightly better than B, B significantly better
than C: A is significantly better than C). Kept per pair at write time (pair_strengths, migration 0011)."""

from __future__ import annotations

# level -> what the annotator said; Llama 2 (Touvron et al. 2023, section 3.2.1) asked the same four
LEVELS = ("negligibly better or unsure", "slightly better", "better", "significantly better")


def steps_problem(ranks: list[int], steps: list[int]) -> str | None:
    """Why `steps` cannot go with `ranks` (None: it can): one level in 0..3 per step between adjacent groups."""
    need = len(set(ranks)) - 1
    if len(steps) != need:
        return f"{len(steps)} strengths for {need} steps between the {need + 1} ranks given"
    bad = next((s for s in steps if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < len(LEVELS)), None)
    if bad is not None:
        return f"strength {bad!r} is not a level 0..{len(LEVELS) - 1} ({', '.join(LEVELS)})"
    return None


def strength_pairs(ranks: list[int], steps: list[int]) -> list[tuple[int, int, int]]:
    """(index of the better response, index of the worse, strength) for every pair the ranking orders, indices
    into `ranks`; the strength is the largest step between their groups."""
    groups = sorted(set(ranks))
    where = {r: g for g, r in enumerate(groups)}
    return [
        (i, j, max(steps[where[ranks[i]] : where[ranks[j]]]))
        for i in range(len(ranks))
        for j in range(len(ranks))
        if ranks[i] < ranks[j]
    ]

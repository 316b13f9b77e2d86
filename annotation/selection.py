"""Choosing which prompts to ask annotators about next (rounds, issue 13): pure functions over reward-model scores.

Human labels are the scarce input, so a round can spend them where the reward model would learn most:

- `random`: a seeded sample, the baseline every other rule is measured against ("Random Is Hard to Beat");
- `uncertain`: the prompts whose K samples the current reward model scores closest together (the smallest mean
  gap over the C(K, 2) pairs): it cannot tell which answer is better;
- `disagree`: the prompts where the members of a reward ensemble (different seeds and halves of the data) order
  the K samples differently most often (Dwaracherla et al. 2024 and Muldrew et al. 2024 use ensemble disagreement).

Ties are broken by the prompts' order, so a selection is reproducible."""

from __future__ import annotations

import random
from itertools import combinations

RULES = ("random", "uncertain", "disagree")


def mean_gap(scores: list[float]) -> float:
    """Mean |s_i - s_j| over the pairs of one prompt's samples (small: the reward model cannot tell them apart)."""
    pairs = list(combinations(scores, 2))
    if not pairs:
        raise ValueError("a prompt needs at least 2 samples")
    return sum(abs(a - b) for a, b in pairs) / len(pairs)


def order_disagreement(member_scores: list[list[float]]) -> float:
    """The share of sample pairs (i, j) whose order not every member agrees on; member_scores[m][i] is member m's
    score of sample i. A tie within a member counts as its own order."""
    if len(member_scores) < 2:
        raise ValueError("disagreement needs at least 2 ensemble members")
    k = len(member_scores[0])
    pairs = list(combinations(range(k), 2))
    if not pairs:
        raise ValueError("a prompt needs at least 2 samples")

    def sign(x: float) -> int:
        return (x > 0) - (x < 0)

    split = sum(len({sign(s[i] - s[j]) for s in member_scores}) > 1 for i, j in pairs)
    return split / len(pairs)


def select(values: list[float], n: int, rule: str, seed: int = 0) -> list[int]:
    """The indices of the n prompts to ask, in asking order. values: per prompt, `mean_gap` for uncertain (smallest
    first), `order_disagreement` for disagree (largest first); ignored for random (a seeded shuffle)."""
    if rule not in RULES:
        raise ValueError(f"unknown selection {rule!r}: one of {', '.join(RULES)}")
    order = list(range(len(values)))
    if rule == "random":
        random.Random(seed).shuffle(order)
    elif rule == "uncertain":
        order.sort(key=lambda i: (values[i], i))
    else:
        order.sort(key=lambda i: (-values[i], i))
    return order[: max(n, 0)]

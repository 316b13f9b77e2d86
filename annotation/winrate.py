"""Win rates of one model against another from Compare votes, with a bootstrap confidence interval.

A tie counts half a win; 'both bad' votes are reported but left out of the rate (neither reply was acceptable)."""

from __future__ import annotations

import random


def win_rate(outcomes: list[float]) -> float:
    """Mean of per-vote outcomes: 1 = win, 0.5 = tie, 0 = loss."""
    return sum(outcomes) / len(outcomes)


def bootstrap_ci(outcomes: list[float], n_resamples: int = 2000, level: float = 0.95, seed: int = 0) -> tuple:
    """Percentile bootstrap interval of the win rate: resample the votes with replacement n_resamples times."""
    rng = random.Random(seed)
    n = len(outcomes)
    means = sorted(sum(rng.choices(outcomes, k=n)) / n for _ in range(n_resamples))
    lo = means[int((1 - level) / 2 * n_resamples)]
    hi = means[min(n_resamples - 1, int((1 + level) / 2 * n_resamples))]
    return lo, hi


def win_table(votes: list[tuple[str, str, str]], model: str) -> list[dict]:
    """Per opponent of `model`: votes, wins, losses, ties, both bad, win rate and its 95% interval.

    votes: (left model, right model, outcome) with outcome 'left', 'right', 'tie' or 'both_bad'."""
    by_opponent: dict[str, dict] = {}
    for left, right, outcome in votes:
        if model not in (left, right) or left == right:
            continue
        other = right if left == model else left
        mine = "left" if left == model else "right"
        row = by_opponent.setdefault(other, {"opponent": other, "wins": 0, "losses": 0, "ties": 0, "both_bad": 0})
        if outcome == "both_bad":
            row["both_bad"] += 1
        elif outcome == "tie":
            row["ties"] += 1
        elif outcome == mine:
            row["wins"] += 1
        else:
            row["losses"] += 1
    for row in by_opponent.values():
        outcomes = [1.0] * row["wins"] + [0.0] * row["losses"] + [0.5] * row["ties"]
        row["votes"] = len(outcomes) + row["both_bad"]
        row["win_rate"] = win_rate(outcomes) if outcomes else None
        row["ci"] = bootstrap_ci(outcomes) if outcomes else None
    return list(by_opponent.values())

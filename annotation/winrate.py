"""Win rates of one model against another from Compare votes, with Wilson's score interval (honest at a handful of
votes, where a bootstrap over one vote gives the empty interval 1.00-1.00).

A tie counts half a win; 'both bad' votes are reported but left out of the rate (neither reply was acceptable)."""

from __future__ import annotations

import math
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


def ratio_bootstrap_ci(counts: list[tuple[int, int]], n_resamples: int = 2000, level: float = 0.95, seed: int = 0):
    """Percentile bootstrap interval of sum(right) / sum(total) over groups (right, total), resampling the groups
    (prompts) with replacement: the interval of a pair accuracy whose pairs share prompts."""
    rng = random.Random(seed)
    kept = [c for c in counts if c[1]]
    ratios = []
    for _ in range(n_resamples):
        draw = rng.choices(kept, k=len(kept))
        ratios.append(sum(r for r, _ in draw) / sum(t for _, t in draw))
    ratios.sort()
    return ratios[int((1 - level) / 2 * n_resamples)], ratios[min(n_resamples - 1, int((1 + level) / 2 * n_resamples))]


def wilson_interval(outcomes: list[float], z: float = 1.96) -> tuple[float, float]:
    """Wilson's score interval (Wilson 1927) of the win rate p = mean(outcomes) over n votes, ties counting half:

        center = (p + z^2 / 2n) / (1 + z^2 / n),   half = z * sqrt(p (1 - p) / n + z^2 / 4n^2) / (1 + z^2 / n)

    Unlike the bootstrap it stays wide at small n (one win: 0.21-1.00) and never leaves [0, 1]."""
    n = len(outcomes)
    p = sum(outcomes) / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)


def win_table(votes: list[tuple[str, str, str]], model: str) -> list[dict]:
    """Per opponent of `model`: votes, wins, losses, ties, both bad, win rate and its 95% Wilson interval.

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
        row["ci"] = wilson_interval(outcomes) if outcomes else None
    return list(by_opponent.values())

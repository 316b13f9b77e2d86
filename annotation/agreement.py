"""Agreement between annotators who ranked the same prompt: Kendall's tau-b over the responses both ranked.

tau_b = (C - D) / sqrt((n0 - t_a) * (n0 - t_b)), with C and D the concordant and discordant response pairs,
n0 = n(n-1)/2 and t_a, t_b the pairs tied in one ranking. 1 = same order, -1 = reversed, 0 = unrelated. A ranking
that ties everything has no defined tau (None)."""

from __future__ import annotations

import itertools
import math
from collections import defaultdict


def kendall_tau_b(a: dict[int, int], b: dict[int, int]) -> float | None:
    """a, b: response id -> rank (1 = best). Uses the responses present in both."""
    common = sorted(a.keys() & b.keys())
    concordant = discordant = tied_a = tied_b = 0
    for i, j in itertools.combinations(common, 2):
        da, db = a[i] - a[j], b[i] - b[j]
        if da == 0 and db == 0:
            tied_a += 1
            tied_b += 1
        elif da == 0:
            tied_a += 1
        elif db == 0:
            tied_b += 1
        elif (da > 0) == (db > 0):
            concordant += 1
        else:
            discordant += 1
    n0 = len(common) * (len(common) - 1) // 2
    denominator = math.sqrt((n0 - tied_a) * (n0 - tied_b))
    return None if denominator == 0 else (concordant - discordant) / denominator


def pairwise_agreement(rankings: list[tuple[int, str, dict[int, int]]]) -> list[dict]:
    """rankings: (prompt id, annotator, {response id: rank}). One row per pair of annotators who share prompts:
    how many prompts they share and their mean tau_b, sorted by annotator names."""
    by_prompt = defaultdict(list)
    for prompt_id, annotator, ranks in rankings:
        by_prompt[prompt_id].append((annotator, ranks))
    taus = defaultdict(list)
    for entries in by_prompt.values():
        for (x, rx), (y, ry) in itertools.combinations(sorted(entries, key=lambda e: e[0]), 2):
            if x != y:
                tau = kendall_tau_b(rx, ry)
                if tau is not None:
                    taus[(x, y)].append(tau)
    return [
        {"annotators": f"{x} / {y}", "shared_prompts": len(v), "mean_tau": sum(v) / len(v)}
        for (x, y), v in sorted(taus.items())
    ]


def agreement_by_annotator(rankings: list[tuple[int, str, dict[int, int]]]) -> dict[str, tuple[float, int]]:
    """rankings: (prompt id, annotator, {response id: rank}). For each annotator who shares a prompt with another:
    (the mean tau_b of their ranking against every other annotator's ranking of the same prompt, how many shared
    prompts that rests on). A comparison with no defined tau (a ranking that ties everything) is left out."""
    by_prompt = defaultdict(list)
    for prompt_id, annotator, ranks in rankings:
        by_prompt[prompt_id].append((annotator, ranks))
    taus, prompts = defaultdict(list), defaultdict(set)
    for prompt_id, entries in by_prompt.items():
        for (x, rx), (y, ry) in itertools.combinations(entries, 2):
            tau = kendall_tau_b(rx, ry) if x != y else None
            if tau is None:
                continue
            for who in (x, y):
                taus[who].append(tau)
                prompts[who].add(prompt_id)
    return {a: (sum(v) / len(v), len(prompts[a])) for a, v in sorted(taus.items())}

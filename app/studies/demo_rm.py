"""What the reward model's report says beyond pair accuracy (issue 52): what predicts RL's success better.

- **best-of-K accuracy** on the judged prompts' K reference samples, RewardBench 2's row shape: per prompt the
  chosen list (the truth's best) and the rejected list (the rest); right when the reward model scores every chosen
  above every rejected. Chance is about 1/K. The rows are exportable (`rm_best_of_k.jsonl`).
- **reward spread on the policy's own samples**: the within-prompt standard deviation of the scores of the
  reference's samples (the policy RL starts from). An accurate reward model whose scores barely differ among the
  policy's samples gives RL little to climb (Razin et al. 2025).
- **accuracy by preference strength**: pair accuracy in thirds of the truth's margin (the panel's utility gap, or
  the word counter's step gap): a model right only on the obvious pairs cannot guide fine choices.
- **the score's correlation with length** (words): a reward model that mostly counts words will be hacked by length.

Pure functions over texts, scores and the taste: no store, no model."""

from __future__ import annotations

import math
import statistics

from annotation import population, scripted
from app.studies.demo_taste import Taste


def margin(taste: Taste, prompt: str, a: str, b: str) -> float:
    """How strongly the truth prefers a over b (>= 0 when it does): the panel's utility gap, or the counter's."""
    if not taste.annotators:
        return float(scripted.concise_key(b) - scripted.concise_key(a))
    u = lambda t: population.utility(population.PANEL_WEIGHTS, population.criteria(prompt, t))  # noqa: E731
    return u(a) - u(b)


def best_of_k_rows(prompts: list[str], texts: list[list[str]], scores: list[list[float]], taste: Taste) -> list[dict]:
    """One RewardBench-2 row per prompt whose truth has a best and something below it: {prompt, chosen, rejected,
    chosen_scores, rejected_scores, correct}."""
    rows = []
    for prompt, ts, ss in zip(prompts, texts, scores, strict=True):
        keep = scripted.rankable(ts)
        ranks = taste.truth(prompt, [ts[i] for i in keep])
        chosen = [keep[j] for j, r in enumerate(ranks) if r == 1]
        rejected = [keep[j] for j, r in enumerate(ranks) if r > 1]
        if not chosen or not rejected:
            continue
        rows.append(
            {
                "prompt": prompt,
                "chosen": [ts[i] for i in chosen],
                "rejected": [ts[i] for i in rejected],
                "chosen_scores": [ss[i] for i in chosen],
                "rejected_scores": [ss[i] for i in rejected],
                "correct": min(ss[i] for i in chosen) > max(ss[i] for i in rejected),
            }
        )
    return rows


def within_prompt_std(scores: list[list[float]]) -> float:
    """Mean over prompts of the population standard deviation of a prompt's scores (prompts with one score: none)."""
    stds = [statistics.pstdev(ss) for ss in scores if len(ss) > 1]
    return sum(stds) / len(stds) if stds else float("nan")


def accuracy_by_strength(
    prompts: list[str], texts: list[list[str]], scores: list[list[float]], taste: Taste, bins: int = 3
) -> list[dict]:
    """The truth's pairs sorted by margin and cut into `bins` equal parts (weakest first): {margin_low,
    margin_high, pairs, accuracy} each; a tied score is wrong."""
    pairs = []
    for prompt, ts, ss in zip(prompts, texts, scores, strict=True):
        keep = scripted.rankable(ts)
        ranks = taste.truth(prompt, [ts[i] for i in keep])
        for a in range(len(keep)):
            for b in range(len(keep)):
                if ranks[a] < ranks[b]:
                    i, j = keep[a], keep[b]
                    pairs.append((margin(taste, prompt, ts[i], ts[j]), ss[i] > ss[j]))
    pairs.sort(key=lambda p: p[0])
    out = []
    for k in range(bins):
        part = pairs[k * len(pairs) // bins : (k + 1) * len(pairs) // bins]
        if part:
            out.append(
                {
                    "margin_low": part[0][0],
                    "margin_high": part[-1][0],
                    "pairs": len(part),
                    "accuracy": sum(right for _, right in part) / len(part),
                }
            )
    return out


def length_correlation(texts: list[list[str]], scores: list[list[float]]) -> float:
    """Pearson correlation of score and words over every sample (nan when either is constant)."""
    xs = [len(t.split()) for ts in texts for t in ts]
    ys = [s for ss in scores for s in ss]
    if len(xs) < 2:
        return float("nan")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else float("nan")


def rm_report(prompts: list[str], texts: list[list[str]], scores: list[list[float]], taste: Taste) -> tuple[dict, list]:
    """(the results' `reward_model` fields, the best-of-K rows to export)."""
    rows = best_of_k_rows(prompts, texts, scores, taste)
    k = max((len(ts) for ts in texts), default=0)
    return {
        "best_of_k_accuracy": sum(r["correct"] for r in rows) / len(rows) if rows else float("nan"),
        "best_of_k_prompts": len(rows),
        "k": k,
        "score_std_within_prompt": within_prompt_std(scores),
        "score_std_all": statistics.pstdev([s for ss in scores for s in ss]) if scores else float("nan"),
        "accuracy_by_strength": accuracy_by_strength(prompts, texts, scores, taste),
        "length_correlation": length_correlation(texts, scores),
    }, rows

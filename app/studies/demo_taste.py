"""Who labels the demo's samples and who judges its models (issue 52, docs/evaluation.md).

- `population` (the default): a population of scripted annotators (annotation/population.py) ranks the training
  prompts' samples, one annotator per prompt in turn, each with its own weights over six criteria, its own
  Bradley-Terry noise, position bias and ties. The judge is the panel's noise-free taste, which ranked nothing the
  reward model learned from; the truth a reward model's pair accuracy is measured against is the panel's ranking.
- `concise`: the word counter of the earlier demos (annotation/scripted.py): it ranks, and it judges.

Pure functions over strings and seeds: no store, no model."""

from __future__ import annotations

import random
from dataclasses import dataclass

from annotation import population, scripted

TASTES = ("population", "concise")


@dataclass(frozen=True)
class Taste:
    name: str  # one of TASTES
    annotators: tuple[population.Annotator, ...] = ()  # the population's, in turn (empty for concise)
    seed: int = 0

    def labeler(self, i: int) -> str:
        """The name of who ranks the i-th task."""
        return self.annotators[i % len(self.annotators)].name if self.annotators else scripted.NAME

    def ranking(self, i: int, prompt: str, texts: list[str], who: int | None = None) -> list[int]:
        """The i-th task's ranking (dense ranks in shown order, 1 = best, ties allowed) by its labeler, or by
        annotator `who`; the noise is a function of the seed, the annotator, the task and the prompt, so a resumed
        demo ranks alike."""
        if not self.annotators:
            return scripted.rank(texts)
        j = i % len(self.annotators) if who is None else who % len(self.annotators)
        rng = random.Random(f"{self.seed}:{j}:{i}:{prompt}")
        return self.annotators[j].rank(prompt, texts, rng)

    def truth(self, prompt: str, texts: list[str]) -> list[int]:
        """The noise-free ranking a reward model's accuracy is measured against (the panel's, or the counter's)."""
        if not self.annotators:
            return scripted.rank(texts)
        return population.PANEL.rank(prompt, texts, random.Random(0))

    def judge(self, prompt: str, a: str, b: str) -> float:
        """1.0 when the judge prefers a, 0.0 for b, 0.5 for a tie."""
        return population.panel_judge(prompt, a, b) if self.annotators else scripted.judge(a, b)

    def describe(self) -> str:
        """One sentence for the report: who ranked, who judged."""
        if not self.annotators:
            return (
                f'The scripted annotator ("{scripted.NAME}", `annotation/scripted.py`) prefers concise answers: fewer '
                f"words win, counted in steps of {scripted.WORDS_PER_STEP} words (answers in the same step tie), and "
                f"an answer under {scripted.MIN_WORDS} words ranks last; it ranked the samples and judges the models."
            )
        weights = ", ".join(f"{c} {w:.2f}" for c, w in population.PANEL_WEIGHTS.items())
        return (
            f"{len(self.annotators)} scripted annotators (`annotation/population.py`, drawn with seed {self.seed}) "
            f"ranked the samples, one prompt each in turn, each weighing six criteria around the panel's ({weights}) "
            "with its own Bradley-Terry noise, position bias and ties. The judge of every comparison is the panel's "
            "noise-free taste, which ranked nothing the models learned from."
        )


def taste_of(name: str, annotators: int, seed: int) -> Taste:
    """The demo's taste by name: the population of `annotators` drawn from `seed`, or the word counter."""
    if name not in TASTES:
        raise ValueError(f"--taste must be population or concise, got {name!r}")
    if name == "concise":
        return Taste("concise")
    if annotators < 1:
        raise ValueError(f"--annotators must be at least 1, got {annotators}")
    return Taste("population", tuple(population.population(annotators, seed)), seed)


def off_topic_share(prompts: list[str], texts: list[list[str]]) -> float:
    """Share of the answers that share no content word with their prompt (population.on_topic == 0)."""
    flags = [population.on_topic(p, t) == 0 for p, ts in zip(prompts, texts, strict=True) for t in ts]
    return sum(flags) / len(flags) if flags else float("nan")

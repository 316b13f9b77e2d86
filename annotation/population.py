"""A realistic scripted annotator population (issue 52): what a labeling guideline would ask, computed from the
text, weighed differently by each annotator, with the noise, position bias and ties real annotators show.

The criteria (each a score in [0, 1], higher is better; `criteria` computes all of them):
- on_topic: the share of the prompt's topic words (its content words less the template's) the answer uses;
  an answer that shares none has left the prompt.
- format: does what the prompt asks of its form: a requested count of sentences or items, brevity for a "busy
  reader" or a "short note", short words for a child; 1 when the prompt asks nothing of the kind.
- finished: ends a sentence (., !, ?, a closing quote or bracket after one), not cut off mid-sentence.
- no_repeats: the share of the answer's word trigrams that are distinct (1 - repetition).
- length: 1 inside the band the prompt calls for (LENGTH_BANDS: words), falling off linearly to 0 at half the
  lower bound and at twice the upper one: neither truncated nor padded.
- language: stays in the prompt's language, here English: the share of its letters that are ASCII, times
  whether common English function words appear at all.

An annotator's utility of an answer is the weighted sum of its criteria. The panel (PANEL_WEIGHTS) is the
guideline's weighting; each annotator's weights are the panel's times a log-normal factor of spread
`weight_spread` (drawn once per annotator from its seed), renormalised to sum to 1. To rank K answers an annotator
adds Gumbel noise at its temperature (Bradley-Terry / Plackett-Luce: P(a above b) = sigmoid((u_a - u_b) / T)),
a position bias to the answer shown first, and ties answers whose noisy utilities fall within `tie_margin`.
The demo's judge is the panel itself, noise-free (`panel_judge`), never one of the annotators that labeled.

`concise` (annotation/scripted.py) stays as a named preset for tests and the old studies.

Pure functions over strings and a seeded random.Random: no store, no model."""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field

CRITERIA = ("on_topic", "format", "finished", "no_repeats", "length", "language")
# the guideline's weighting: answering the question first, then its form, then polish
PANEL_WEIGHTS = {
    "on_topic": 0.30,
    "format": 0.15,
    "finished": 0.15,
    "no_repeats": 0.15,
    "length": 0.15,
    "language": 0.10,
}

STOPWORDS = frozenset(
    """a an the and or but if of to in on for with about as at by from into over under is are was were be been
    being it its this that these those what which who whom why how when where do does did you your yours we our
    i me my he she they them their there here not no so than then too very can could should would will just
    own words way some any all each every most more much many one two three four five ten year old""".split()
)
# words of the demo's templates (annotation/data/demo_prompts.txt), which say nothing of the topic
TEMPLATE_WORDS = frozenset(
    """summarize busy reader everyone know describe important fact write short note school newsletter introduce
    beginner explain ten-year-old people care tell give list sentences sentence common misconception tip related
    me""".split()
)
COUNTS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "1": 1, "2": 2, "3": 3, "4": 4, "5": 5}
# (words at least, words at most) an answer to this kind of prompt should have
LENGTH_BANDS = {"brief": (8, 40), "child": (10, 60), "default": (15, 90)}
ENGLISH_MARKERS = frozenset({"the", "a", "is", "are", "and", "of", "to", "in", "it", "that"})


def words_of(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+(?:['-][a-z0-9]+)*", text.lower())


def topic_words(prompt: str) -> set[str]:
    """The prompt's content words that are not the template's: 'Summarize black holes for a busy reader.' ->
    {'black', 'holes'}."""
    return {w for w in words_of(prompt) if w not in STOPWORDS and w not in TEMPLATE_WORDS}


def _stem(word: str) -> str:
    """A crude stem, so 'holes' meets 'hole' and 'fermented' meets 'fermentation': a plural's s off (not a
    double s), then the first five letters."""
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return word[:5]


def on_topic(prompt: str, answer: str) -> float:
    topic = {_stem(w) for w in topic_words(prompt)}
    if not topic:
        return 1.0
    used = {_stem(w) for w in words_of(answer)}
    return len(topic & used) / len(topic)


def prompt_kind(prompt: str) -> str:
    """'brief' (a busy reader, a short note, one fact), 'child' (a ten-year-old, a beginner) or 'default'."""
    p = prompt.lower()
    if any(k in p for k in ("busy reader", "short note", "most important fact", "in one sentence")):
        return "brief"
    if any(k in p for k in ("ten-year-old", "child", "beginner")):
        return "child"
    return "default"


def requested_count(prompt: str) -> tuple[int, str] | None:
    """(n, 'sentences' or 'items') when the prompt asks for a count: 'in two sentences', 'list three ...'."""
    p = prompt.lower()
    m = re.search(r"\b(one|two|three|four|five|[1-5])\s+(sentences?)\b", p)
    if m:
        return COUNTS[m.group(1)], "sentences"
    m = re.search(r"\b(?:list|name|give)\s+(one|two|three|four|five|[1-5])\b", p)
    if m:
        return COUNTS[m.group(1)], "items"
    return None


def _sentences(text: str) -> int:
    return len([s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if words_of(s)])


def _items(text: str) -> int:
    return len([line for line in text.splitlines() if re.match(r"\s*(?:[-*\u2022]|\d+[.)])\s+\S", line)])


def format_score(prompt: str, answer: str) -> float:
    """1 when the answer has the count asked for (sentences or list items), else 1 / (1 + the difference); a
    'child' prompt also asks for short words (mean length up to 6 letters scores 1, falling to 0 at 9)."""
    score = 1.0
    asked = requested_count(prompt)
    if asked is not None:
        n, unit = asked
        have = _sentences(answer) if unit == "sentences" else _items(answer)
        score *= 1.0 / (1 + abs(have - n))
    if prompt_kind(prompt) == "child":
        words = words_of(answer)
        mean = sum(map(len, words)) / len(words) if words else 0.0
        score *= min(1.0, max(0.0, (9.0 - mean) / 3.0))
    return score


def finished(answer: str) -> float:
    return 1.0 if re.search(r"[.!?][\"')\]]*\s*$", answer.strip()) else 0.0


def no_repeats(answer: str) -> float:
    words = words_of(answer)
    grams = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
    return len(set(grams)) / len(grams) if grams else 1.0


def length_score(prompt: str, answer: str) -> float:
    low, high = LENGTH_BANDS[prompt_kind(prompt)]
    n = len(words_of(answer))
    if low <= n <= high:
        return 1.0
    if n < low:
        return max(0.0, (n - low / 2) / (low / 2))
    return max(0.0, (2 * high - n) / high)


def language(answer: str) -> float:
    letters = [c for c in answer if c.isalpha()]
    if not letters:
        return 0.0
    ascii_share = sum(c.isascii() for c in letters) / len(letters)
    return ascii_share * (1.0 if ENGLISH_MARKERS & set(words_of(answer)) else 0.5)


def criteria(prompt: str, answer: str) -> dict[str, float]:
    """Every criterion of the answer to the prompt, each in [0, 1]."""
    return {
        "on_topic": on_topic(prompt, answer),
        "format": format_score(prompt, answer),
        "finished": finished(answer),
        "no_repeats": no_repeats(answer),
        "length": length_score(prompt, answer),
        "language": language(answer),
    }


def utility(weights: dict[str, float], scores: dict[str, float]) -> float:
    return sum(weights[c] * scores[c] for c in CRITERIA)


@dataclass(frozen=True)
class Annotator:
    """One scripted annotator: its weights over CRITERIA, the temperature of its Gumbel noise (0: none), the bias
    toward the answer shown first (added to its utility), and the margin within which it calls a tie."""

    name: str
    weights: dict[str, float] = field(default_factory=lambda: dict(PANEL_WEIGHTS))
    temperature: float = 0.05
    position_bias: float = 0.02
    tie_margin: float = 0.01

    def noisy_utilities(self, prompt: str, answers: list[str], rng: random.Random) -> list[float]:
        out = []
        for pos, answer in enumerate(answers):
            u = utility(self.weights, criteria(prompt, answer)) + (self.position_bias if pos == 0 else 0.0)
            if self.temperature > 0:  # Gumbel(0, T): the Plackett-Luce choice, Bradley-Terry for a pair
                u += -self.temperature * math.log(-math.log(rng.random() or 1e-300))
            out.append(u)
        return out

    def rank(self, prompt: str, answers: list[str], rng: random.Random) -> list[int]:
        """Dense ranks in shown order, 1 = best; answers whose noisy utilities are within tie_margin of the one
        above them in the order tie with it."""
        return ranks_with_ties(self.noisy_utilities(prompt, answers, rng), self.tie_margin)


def ranks_with_ties(utilities: list[float], margin: float) -> list[int]:
    """Dense ranks, 1 = highest utility; going down the sorted order, a value within `margin` of the previous
    one shares its rank: [0.5, 0.9, 0.895, 0.1] with margin 0.01 -> [2, 1, 1, 3]."""
    order = sorted(range(len(utilities)), key=lambda i: -utilities[i])
    ranks = [0] * len(utilities)
    rank, previous = 0, None
    for i in order:
        if previous is None or previous - utilities[i] > margin:
            rank += 1
        ranks[i] = rank
        previous = utilities[i]
    return ranks


def draw_annotator(name: str, seed: int, weight_spread: float = 0.35, temperature: float = 0.05) -> Annotator:
    """An annotator around the panel: each weight times exp(N(0, weight_spread)), renormalised; its temperature
    and position bias drawn around the given temperature (x0.5-1.5) and 0.02 (0-0.04)."""
    rng = random.Random(f"{name}:{seed}")
    raw = {c: PANEL_WEIGHTS[c] * math.exp(rng.gauss(0.0, weight_spread)) for c in CRITERIA}
    total = sum(raw.values())
    return Annotator(
        name=name,
        weights={c: w / total for c, w in raw.items()},
        temperature=temperature * rng.uniform(0.5, 1.5),
        position_bias=rng.uniform(0.0, 0.04),
    )


def population(n: int, seed: int) -> list[Annotator]:
    """n annotators drawn around the panel (`draw_annotator`), named annotator-1 .. annotator-n."""
    return [draw_annotator(f"annotator-{i + 1}", seed) for i in range(n)]


PANEL = Annotator("panel", dict(PANEL_WEIGHTS), temperature=0.0, position_bias=0.0, tie_margin=0.0)


def panel_judge(prompt: str, a: str, b: str) -> float:
    """The demo's judge: the panel's noise-free preference; 1.0 when it prefers a, 0.0 for b, 0.5 for a tie."""
    ua, ub = (utility(PANEL_WEIGHTS, criteria(prompt, x)) for x in (a, b))
    return 1.0 if ua > ub else 0.0 if ua < ub else 0.5

"""The demo's scripted annotator: one clear, documented preference, used both to rank the SFT model's samples
(the data the reward model learns from) and, later, to judge the tuned actor against the reference on held-out
prompts. Judging with the annotator itself, not with the reward model, is what shows that PPO moved the actor
toward what the annotator wants rather than toward the reward model's mistakes.

The preference, "concise": the fewer words the better, counted in steps of WORDS_PER_STEP (0-9 words, 10-19,
...), so answers in the same step tie; an answer under MIN_WORDS words is not an answer and ranks last.

Pure functions over strings: no store, no model."""

from __future__ import annotations

NAME = "scripted-concise"
WORDS_PER_STEP = 10
MIN_WORDS = 3
NOT_AN_ANSWER = 10**6


def concise_key(text: str) -> int:
    """Lower is better: the answer's step of WORDS_PER_STEP words (NOT_AN_ANSWER under MIN_WORDS words)."""
    words = len(text.split())
    return NOT_AN_ANSWER if words < MIN_WORDS else words // WORDS_PER_STEP


def rank(texts: list[str]) -> list[int]:
    """Dense ranks, 1 = best; answers with the same key tie."""
    keys = sorted(set(concise_key(t) for t in texts))
    return [keys.index(concise_key(t)) + 1 for t in texts]


def judge(a: str, b: str) -> float:
    """1.0 when the annotator prefers a, 0.0 when it prefers b, 0.5 for a tie."""
    ka, kb = concise_key(a), concise_key(b)
    return 1.0 if ka < kb else 0.0 if ka > kb else 0.5


def rankable(texts: list[str]) -> list[int]:
    """Indices of the texts a ranking can hold: non-empty and each text once (first copy kept)."""
    seen: set[str] = set()
    keep = []
    for i, t in enumerate(texts):
        if t.strip() and t not in seen:
            seen.add(t)
            keep.append(i)
    return keep

"""The demo's prompts split for an honest evaluation (issue 52, docs/evaluation.md): train, validation and test by
topic, with whole templates kept for test, so that what a number is claimed on was never seen by training or by
the choice of a setting.

The bundled prompts (annotation/data/demo_prompts.txt) are 10 templates ("Summarize {} for a busy reader.") over 50
topics ("black holes"); `topic_of` and `template_of` take a prompt apart. `split_by_topic` draws, from its seed,
the test topics and the test templates: every prompt of a test topic or a test template is in test; of the rest,
the prompts of the validation topics are in validation, the others in train. So no topic is in two splits, and
the test templates are in test only.

Pure functions over strings: no store, no model."""

from __future__ import annotations

import random
from dataclasses import dataclass

from annotation.population import topic_words, words_of


def topic_of(prompt: str) -> str:
    """The prompt's topic, as its topic words in sorted order: 'Explain the Great Wall of China to a ten-year-old.'
    -> 'china great wall'."""
    return " ".join(sorted(topic_words(prompt)))


def template_of(prompt: str) -> str:
    """The prompt less its topic: the words from its first topic word to its last (and a 'the' before them) taken
    out: 'Why do people care about supply and demand?' -> 'why do people care about'."""
    words, topic = words_of(prompt), topic_words(prompt)
    at = [i for i, w in enumerate(words) if w in topic]
    if not at:
        return " ".join(words)
    start = at[0] - (1 if at[0] and words[at[0] - 1] == "the" else 0)
    return " ".join(words[:start] + words[at[-1] + 1 :])


@dataclass(frozen=True)
class Split:
    train: list[str]
    validation: list[str]
    test: list[str]
    test_topics: list[str]
    validation_topics: list[str]
    test_templates: list[str]

    def counts(self) -> dict[str, int]:
        return {"train": len(self.train), "validation": len(self.validation), "test": len(self.test)}


def split_by_topic(
    prompts: list[str], seed: int, test_share: float = 0.2, validation_share: float = 0.2, test_templates: int = 1
) -> Split:
    """Train, validation and test prompts (each in the given order). round(test_share x topics) topics and
    `test_templates` templates go to test; round(validation_share x the other topics) to validation."""
    topics = sorted({topic_of(p) for p in prompts})
    templates = sorted({template_of(p) for p in prompts})
    rng = random.Random(seed)
    test_topics = sorted(rng.sample(topics, round(test_share * len(topics))))
    rest = [t for t in topics if t not in test_topics]
    validation_topics = sorted(rng.sample(rest, round(validation_share * len(rest))))
    held_templates = sorted(rng.sample(templates, min(test_templates, len(templates))))
    test, validation, train = [], [], []
    for p in prompts:
        if topic_of(p) in test_topics or template_of(p) in held_templates:
            test.append(p)
        elif topic_of(p) in validation_topics:
            validation.append(p)
        else:
            train.append(p)
    return Split(train, validation, test, test_topics, validation_topics, held_templates)

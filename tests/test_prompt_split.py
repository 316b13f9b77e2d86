"""The demo's prompt split (app/studies/prompt_split.py): the bundled prompts taken apart into 10 templates and 50
topics, and a split in which no topic is in two parts and the test template is in test only; sizes by hand."""

import pytest

from app.studies.demo_common import demo_prompts_path
from app.studies.prompt_split import split_by_topic, template_of, topic_of


def _bundled() -> list[str]:
    return [line.strip() for line in demo_prompts_path().read_text().splitlines() if line.strip()]


@pytest.mark.parametrize(
    "prompt, topic, template",
    [
        ("Summarize black holes for a busy reader.", "black holes", "summarize for a busy reader"),
        ("Why do people care about supply and demand?", "demand supply", "why do people care about"),
        ("Explain the Great Wall of China to a ten-year-old.", "china great wall", "explain to a ten-year-old"),
        ("Give me one tip related to recycling.", "recycling", "give me one tip related to"),
    ],
)
def test_a_prompt_is_a_template_and_a_topic(prompt, topic, template):
    assert (topic_of(prompt), template_of(prompt)) == (topic, template)


def test_the_bundled_prompts_are_ten_templates_over_fifty_topics():
    prompts = _bundled()
    assert len({topic_of(p) for p in prompts}) == 50 and len({template_of(p) for p in prompts}) == 10
    assert len({(topic_of(p), template_of(p)) for p in prompts}) == 500  # each pair once


def test_the_split_keeps_topics_apart_and_the_test_template_in_test_only():
    prompts = _bundled()
    split = split_by_topic(prompts, seed=0)
    # 10 test topics (20% of 50): 10 x 10 = 100 prompts, and the test template on the 40 others: 40 -> 140;
    # validation: 8 topics (20% of 40) x 9 templates = 72; train: 32 x 9 = 288; 140 + 72 + 288 = 500
    assert split.counts() == {"train": 288, "validation": 72, "test": 140}
    parts = {name: {topic_of(p) for p in getattr(split, name)} for name in ("train", "validation")}
    assert not parts["train"] & parts["validation"]
    assert not set(split.test_topics) & (parts["train"] | parts["validation"])
    assert all(template_of(p) not in split.test_templates for p in split.train + split.validation)
    assert sorted(split.train + split.validation + split.test) == sorted(prompts)
    assert split_by_topic(prompts, seed=0) == split and split_by_topic(prompts, seed=1).test != split.test

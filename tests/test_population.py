"""The scripted annotator population (annotation/population.py): each criterion on hand-made answers with the
arithmetic in a comment, the ranking with ties, position bias and Bradley-Terry noise, and the panel judge."""

import math
import random

import pytest

from annotation import population as pop


def test_topic_words_leave_out_the_template_and_function_words():
    assert pop.topic_words("Summarize black holes for a busy reader.") == {"black", "holes"}
    assert pop.topic_words("Explain ancient Rome to a ten-year-old.") == {"ancient", "rome"}


@pytest.mark.parametrize(
    "answer, expected",
    [
        ("Black holes pull in light.", 1.0),  # both topic stems: 'black', 'holes'
        ("A black cat sat down.", 0.5),  # 1 of 2
        ("Stars shine at night.", 0.0),  # none: the answer left the prompt
        ("A black hole is strange.", 1.0),  # 'holes' and 'hole' share the stem 'hole'
        ("Holistic blackness.", 0.5),  # a crude stem: 'blackness'[:5] = 'black' counts, 'holis' does not
    ],
)
def test_on_topic_is_the_share_of_topic_stems_used(answer, expected):
    assert pop.on_topic("Summarize black holes for a busy reader.", answer) == expected


@pytest.mark.parametrize(
    "prompt, asked",
    [
        ("Explain tides in two sentences.", (2, "sentences")),
        ("List three uses of salt.", (3, "items")),
        ("Give 2 reasons to sleep.", (2, "items")),
        ("Describe plate tectonics in your own words.", None),
    ],
)
def test_requested_count(prompt, asked):
    assert pop.requested_count(prompt) == asked


@pytest.mark.parametrize(
    "prompt, answer, expected",
    [
        ("Explain tides in two sentences.", "Tides rise. Tides fall.", 1.0),  # 2 of 2
        ("Explain tides in two sentences.", "Tides rise. Tides fall. The moon pulls.", 0.5),  # 1 / (1 + |3 - 2|)
        ("List three uses of salt.", "- cooking\n- de-icing\n- curing", 1.0),
        ("List three uses of salt.", "Cooking, de-icing and curing.", 0.25),  # 0 items: 1 / (1 + 3)
        ("Explain volcanoes to a ten-year-old.", "Hot rock comes up.", 1.0),  # mean 3.5 letters: short words
        # 'magmatic' 8, 'extrusions' 10, 'characteristically' 18: mean 12 letters, past 9: 0
        ("Explain volcanoes to a ten-year-old.", "Magmatic extrusions characteristically.", 0.0),
        ("Describe plate tectonics in your own words.", "Anything at all.", 1.0),  # nothing asked
    ],
)
def test_format_score(prompt, answer, expected):
    assert pop.format_score(prompt, answer) == pytest.approx(expected)


@pytest.mark.parametrize(
    "answer, expected",
    [("It ends.", 1.0), ("It ends", 0.0), ('He said "go."', 1.0), ("Is it? ", 1.0), ("and then the", 0.0)],
)
def test_finished(answer, expected):
    assert pop.finished(answer) == expected


def test_no_repeats_is_the_share_of_distinct_trigrams():
    # a b c a b c: trigrams abc, bca, cab, abc -> 3 distinct of 4
    assert pop.no_repeats("a b c a b c") == 0.75
    assert pop.no_repeats("short") == 1.0


@pytest.mark.parametrize(
    "n_words, expected",
    [(15, 1.0), (90, 1.0), (10, 1 / 3), (7, 0.0), (135, 0.5), (180, 0.0)],
    # default band 15-90: 10 -> (10 - 7.5) / 7.5; 7 is under half of 15; 135 -> (180 - 135) / 90
)
def test_length_score_in_the_band_and_falling_off_outside(n_words, expected):
    prompt = "Describe plate tectonics in your own words."
    assert pop.length_score(prompt, " ".join(["word"] * n_words)) == pytest.approx(expected)


def test_length_bands_follow_the_prompt():
    assert pop.prompt_kind("Summarize black holes for a busy reader.") == "brief"
    assert pop.prompt_kind("Explain ancient Rome to a ten-year-old.") == "child"
    assert pop.length_score("Summarize black holes for a busy reader.", " ".join(["w"] * 60)) == pytest.approx(0.5)
    # brief band 8-40: (80 - 60) / 40


@pytest.mark.parametrize(
    "answer, expected",
    [("The sea is blue.", 1.0), ("Das ist gut.", 0.5), ("日本語です", 0.0), ("", 0.0)],
    # German: ASCII letters but no English function word -> 1 x 0.5; Japanese: no ASCII letter
)
def test_language(answer, expected):
    assert pop.language(answer) == expected


def test_ranks_with_ties_by_hand():
    assert pop.ranks_with_ties([0.5, 0.9, 0.895, 0.1], 0.01) == [2, 1, 1, 3]
    assert pop.ranks_with_ties([0.5, 0.9, 0.895, 0.1], 0.0) == [3, 1, 2, 4]
    assert pop.ranks_with_ties([0.3, 0.3], 0.0) == [1, 1]  # exactly equal always tie


def test_a_noise_free_annotator_ranks_by_utility_and_position_bias_breaks_a_tie():
    prompt = "Summarize black holes for a busy reader."
    good = "Black holes are regions where gravity is so strong that not even light escapes them."
    off = "Bananas are yellow and sweet, and many people enjoy them for breakfast every day."
    cut = "Black holes are regions where gravity is so strong that"
    plain = pop.Annotator("plain", temperature=0.0, position_bias=0.0, tie_margin=0.0)
    assert plain.rank(prompt, [off, cut, good], random.Random(0)) == [3, 2, 1]
    biased = pop.Annotator("biased", temperature=0.0, position_bias=0.02, tie_margin=0.0)
    assert biased.rank(prompt, [good, good + " "], random.Random(0)) == [1, 2]  # same text: the first shown wins
    assert biased.rank(prompt, [good + " ", good], random.Random(0)) == [1, 2]


def test_the_noise_is_bradley_terry_at_the_annotators_temperature():
    """Gumbel noise at temperature T picks a over b with probability sigmoid((u_a - u_b) / T): the frequency over
    4,000 seeded draws is within 0.03 of it."""
    prompt = "Describe plate tectonics in your own words."
    a = "Plate tectonics moves the plates of the crust slowly over the mantle, which makes mountains and quakes."
    b = "Plate tectonics moves the plates of the crust slowly over the mantle, which makes mountains and quakes"
    annotator = pop.Annotator("t", temperature=0.1, position_bias=0.0, tie_margin=0.0)
    d = pop.utility(annotator.weights, pop.criteria(prompt, a)) - pop.utility(
        annotator.weights, pop.criteria(prompt, b)
    )
    assert d == pytest.approx(pop.PANEL_WEIGHTS["finished"])  # b differs only in its missing full stop
    rng = random.Random(7)
    wins = sum(annotator.rank(prompt, [a, b], rng) == [1, 2] for _ in range(4000)) / 4000
    assert wins == pytest.approx(1 / (1 + math.exp(-d / 0.1)), abs=0.03)  # sigmoid(1.5) = 0.818


def test_annotators_are_drawn_around_the_panel_reproducibly():
    a1, a1_again, a2 = pop.draw_annotator("ann", 3), pop.draw_annotator("ann", 3), pop.draw_annotator("bob", 3)
    assert a1 == a1_again and a1.weights != a2.weights
    assert sum(a1.weights.values()) == pytest.approx(1.0) and set(a1.weights) == set(pop.CRITERIA)
    assert 0.025 <= a1.temperature <= 0.075 and 0.0 <= a1.position_bias <= 0.04
    team = pop.population(5, seed=0)
    assert [a.name for a in team] == [f"annotator-{i}" for i in range(1, 6)]
    assert len({tuple(sorted(a.weights.items())) for a in team}) == 5


def test_the_panel_judge_prefers_an_answer_that_stays_on_topic_and_ends():
    prompt = "Why do people care about vaccines?"
    on = "Vaccines train the immune system to fight a disease before it can make you sick."
    off = "The weather was lovely today and we walked along the river until the sun went down."
    assert pop.panel_judge(prompt, on, off) == 1.0 and pop.panel_judge(prompt, off, on) == 0.0
    assert pop.panel_judge(prompt, on, on) == 0.5

"""app/studies/demo_rm.py by hand: best-of-K rows, the score's spread, accuracy by the truth's margin and the
score's correlation with length, on the word counter's truth (its margins are whole steps) and the panel's."""

import math

import pytest

from app.studies.demo_rm import (
    accuracy_by_strength,
    best_of_k_rows,
    length_correlation,
    margin,
    rm_report,
    within_prompt_std,
)
from app.studies.demo_taste import Taste, taste_of

CONCISE = Taste("concise")


def words(n: int) -> str:
    return " ".join(["word"] * n)


def test_a_best_of_k_row_holds_the_truths_best_as_chosen_and_is_right_only_above_every_rejected():
    texts = [[words(25), words(4), words(14)], [words(5), words(6)]]  # prompt 2: one step, a tie: no row
    rows = best_of_k_rows(["p1", "p2"], texts, [[0.0, 1.0, 0.5], [1.0, 2.0]], CONCISE)
    assert len(rows) == 1 and rows[0]["chosen"] == [words(4)] and rows[0]["rejected"] == [words(25), words(14)]
    assert rows[0]["correct"] is True
    wrong = best_of_k_rows(["p1"], texts[:1], [[0.0, 1.0, 1.0]], CONCISE)  # a tie with a rejected one is wrong
    assert wrong[0]["correct"] is False


def test_the_spread_within_prompts_and_the_length_correlation_by_hand():
    # prompt 1: 1, 3 -> pstdev 1; prompt 2: 2, 2, 2 -> 0; the mean: 0.5
    assert within_prompt_std([[1.0, 3.0], [2.0, 2.0, 2.0], [7.0]]) == pytest.approx(0.5)
    # words 1, 2, 3 against scores 2, 4, 6: r = 1; against 6, 4, 2: r = -1; constant scores: nan
    texts = [[words(1), words(2)], [words(3)]]
    assert length_correlation(texts, [[2.0, 4.0], [6.0]]) == pytest.approx(1.0)
    assert length_correlation(texts, [[6.0, 4.0], [2.0]]) == pytest.approx(-1.0)
    assert math.isnan(length_correlation(texts, [[1.0, 1.0], [1.0]]))


def test_accuracy_by_strength_cuts_the_pairs_by_the_truths_margin():
    # steps 0, 1, 3 (4, 14, 34 words): pairs (4>14) margin 1, (4>34) margin 3, (14>34) margin 2
    texts = [[words(4), words(14), words(34)]]
    scores = [[1.0, 2.0, 0.0]]  # 14 words above 4: the margin-1 pair wrong, the other two right
    bins = accuracy_by_strength(["p"], texts, scores, CONCISE, bins=3)
    assert [(b["margin_low"], b["pairs"], b["accuracy"]) for b in bins] == [(1.0, 1, 0.0), (2.0, 1, 1.0), (3.0, 1, 1.0)]
    assert margin(CONCISE, "p", words(4), words(34)) == 3.0


def test_the_panels_margin_is_its_utility_gap_and_the_report_reads_it():
    panel = taste_of("population", 2, seed=0)
    prompt = "Explain black holes to a ten-year-old."
    good = "A black hole is a place in space where gravity pulls so hard that not even light can get out of it."
    bad = "Bread is baked in an oven."
    assert margin(panel, prompt, good, bad) > 0 > margin(panel, prompt, bad, good)
    report, rows = rm_report([prompt], [[good, bad]], [[1.0, 0.0]], panel)
    assert report["best_of_k_accuracy"] == 1.0 and report["best_of_k_prompts"] == 1 and report["k"] == 2
    assert rows[0]["chosen"] == [good] and report["accuracy_by_strength"][0]["accuracy"] == 1.0

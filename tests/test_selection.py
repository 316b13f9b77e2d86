"""Which prompts a round asks about (annotation/selection.py), on examples worked out by hand."""

import pytest

from annotation.selection import mean_gap, order_disagreement, select


def test_uncertain_picks_the_prompts_whose_samples_score_closest():
    # gaps: prompt 0 |1-2|, |1-4|, |2-4| = 1, 3, 2 -> 2.0; prompt 1 0.1, 0.2, 0.1 -> 0.1333;
    # prompt 2 0.5, 0.5, 0 -> 1/3
    scores = [[1.0, 2.0, 4.0], [0.0, 0.1, 0.2], [0.5, 0.0, 0.5]]
    gaps = [mean_gap(s) for s in scores]
    assert gaps == pytest.approx([2.0, 0.2 / 1.5, 1 / 3])
    assert select(gaps, 2, "uncertain") == [1, 2]
    assert select(gaps, 5, "uncertain") == [1, 2, 0]


def test_disagree_picks_the_prompts_whose_members_order_the_samples_differently():
    # prompt 0: both members order 3 samples the same way -> 0 of 3 pairs split
    same = [[1.0, 2.0, 3.0], [10.0, 20.0, 30.0]]
    # prompt 1: member 1 reverses samples 0 and 1 only -> pair (0, 1) split: 1 of 3
    one = [[1.0, 2.0, 3.0], [2.0, 1.0, 3.0]]
    # prompt 2: member 1 reverses everything -> 3 of 3; a tie in one member counts as a different order
    all_ = [[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]]
    tie = [[1.0, 2.0], [1.0, 1.0]]
    values = [order_disagreement(x) for x in (same, one, all_, tie)]
    assert values == pytest.approx([0.0, 1 / 3, 1.0, 1.0])
    assert select(values, 3, "disagree") == [2, 3, 1]  # the tie between 2 and 3 goes to the earlier prompt


def test_random_is_a_seeded_sample_and_bad_input_is_refused():
    a, b = select([0.0] * 10, 4, "random", seed=1), select([0.0] * 10, 4, "random", seed=1)
    assert a == b and len(set(a)) == 4 and a != select([0.0] * 10, 4, "random", seed=2)
    with pytest.raises(ValueError, match="unknown selection"):
        select([1.0], 1, "smart")
    with pytest.raises(ValueError):
        mean_gap([1.0])
    with pytest.raises(ValueError):
        order_disagreement([[1.0, 2.0]])

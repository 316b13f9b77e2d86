"""Kendall's tau-b between annotators, against hand-computed values and a plain reference."""

import itertools
import math
import random

import pytest

from annotation.agreement import kendall_tau_b, pairwise_agreement
from annotation.imports import import_native
from store.db import connect
from store.pairs import rankings_for_agreement
from tests.conftest import write_jsonl


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ([1, 2, 3, 4], [1, 2, 3, 4], 1.0),  # 6 concordant, 0 discordant: 6/6
        ([1, 2, 3, 4], [4, 3, 2, 1], -1.0),  # 0 concordant, 6 discordant: -6/6
        ([1, 2, 3, 4], [2, 1, 3, 4], 4 / 6),  # one swapped pair: (5 - 1)/6
        ([1, 2, 3], [1, 1, 2], 2 / math.sqrt(3 * 2)),  # b ties r0,r1: C=2, D=0, n0=3, t_b=1: 2/sqrt(3*2)
        ([1, 1, 1], [1, 2, 3], None),  # a ties everything: undefined
    ],
)
def test_hand_computed(a, b, expected):
    got = kendall_tau_b(dict(enumerate(a)), dict(enumerate(b)))
    assert got == pytest.approx(expected) if expected is not None else got is None


def _reference(a, b):
    """tau-b written straight from the definition with sign products."""
    keys = sorted(a.keys() & b.keys())
    s = sum(
        math.copysign(1, (a[i] - a[j]) * (b[i] - b[j])) if (a[i] - a[j]) * (b[i] - b[j]) else 0
        for i, j in itertools.combinations(keys, 2)
    )
    n0 = len(keys) * (len(keys) - 1) / 2
    ta = sum(1 for i, j in itertools.combinations(keys, 2) if a[i] == a[j])
    tb = sum(1 for i, j in itertools.combinations(keys, 2) if b[i] == b[j])
    return s / math.sqrt((n0 - ta) * (n0 - tb))


def test_matches_the_reference_on_random_rankings():
    rng = random.Random(0)
    for _ in range(200):
        k = rng.randint(3, 9)
        a = {i: rng.randint(1, k) for i in range(k)}
        b = {i: rng.randint(1, k) for i in range(k)}
        if len(set(a.values())) > 1 and len(set(b.values())) > 1:
            assert kendall_tau_b(a, b) == pytest.approx(_reference(a, b))


def test_agreement_from_the_store(db, tmp_path):
    r = ["a", "b", "c", "d"]
    rows = [
        {"prompt": "p1", "responses": r, "ranks": [1, 2, 3, 4], "annotator": "ann"},
        {"prompt": "p1", "responses": r, "ranks": [2, 1, 3, 4], "annotator": "bob"},
        {"prompt": "p2", "responses": r, "ranks": [1, 2, 3, 4], "annotator": "ann"},
        {"prompt": "p2", "responses": r, "ranks": [1, 2, 3, 4], "annotator": "bob"},
        {"prompt": "p3", "responses": r, "ranks": [1, 2, 3, 4], "annotator": "ann"},  # ranked once: left out
    ]
    import_native(db, write_jsonl(tmp_path / "r.jsonl", rows))
    with connect(db) as con:
        rankings = rankings_for_agreement(con)
    assert len(rankings) == 4
    # p1: 4/6, p2: 1 -> mean 5/6
    assert pairwise_agreement(rankings) == [
        {"annotators": "ann / bob", "shared_prompts": 2, "mean_tau": pytest.approx(5 / 6)}
    ]

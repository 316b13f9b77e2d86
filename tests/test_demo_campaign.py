"""The demo's labeling campaign (app/studies/demo_campaign.py): who ranks what, the noisy annotator's orders, the
paired difference of two accuracies by hand, and the dashboard on a campaign store singling out the noisy one."""

import random

import pytest

from annotation import scripted
from app.studies import demo_campaign as dc
from app.studies.demo_taste import Taste
from store.db import write
from store.prompts import prompt_ids
from store.responses import Sample, add_samples
from tests.conftest import query


def test_a_noisy_order_is_the_ranking_or_a_random_strict_order():
    rng = random.Random(0)
    assert all(dc.noisy_order([2, 1, 3, 3], rng, 0.0) == [2, 1, 3, 3] for _ in range(20))
    orders = [dc.noisy_order([2, 1, 3, 3], rng, 1.0) for _ in range(200)]
    assert all(sorted(o) == [1, 2, 3, 4] for o in orders) and len({tuple(o) for o in orders}) == 24  # 4! orders
    kept = sum(dc.noisy_order([1, 2, 3, 4], random.Random(i), 0.75) == [1, 2, 3, 4] for i in range(2000))
    # kept: the 25% left alone, plus the random orders that happen to be the same one (75% x 1/24)
    assert kept / 2000 == pytest.approx(0.25 + 0.75 / 24, abs=0.03)


def test_the_gold_prompts_are_ranked_by_everyone_the_rest_by_one_annotator_in_turn():
    tasks = [(f"prompt {i}", [f"{'w ' * (5 + 10 * j)}".strip() for j in range(3)]) for i in range(20)]
    rankings, gold = dc.campaign_rankings(tasks, seed=0, taste=Taste("concise"))
    assert gold == dc.gold_count(20) == 8  # 15% of 20 is 3, under the floor of 8
    by_prompt = {}
    for r in rankings:
        by_prompt.setdefault(r.prompt, []).append(r.annotator)
    for i in range(gold):
        assert by_prompt[f"prompt {i}"] == ["lead", "careful-a", "careful-b", "noisy"]
    assert [by_prompt[f"prompt {i}"] for i in range(gold, 14)] == [["careful-a"], ["careful-b"], ["noisy"]] * 2
    assert len(rankings) == 4 * gold + (20 - gold)
    for r in rankings:
        if r.annotator != "noisy":
            assert [it.rank for it in r.items] == scripted.rank([it.text for it in r.items]) == [1, 2, 3]
    assert dc.gold_count(436) == 65  # the default demo: round(0.15 x 436)


def test_the_paired_difference_by_hand():
    # per prompt (right, total): arm a gets 1/2, 1/2, 0/2; arm b gets 2/2, 1/2, 2/2 -> (5 - 2) / 6 = 0.5
    a, b = [(1, 2), (1, 2), (0, 2)], [(2, 2), (1, 2), (2, 2)]
    d = dc.paired_difference(a, b, seed=0)
    assert d["value"] == pytest.approx(0.5)
    lo, hi = d["ci95"]
    assert 0 <= lo <= 0.5 <= hi <= 1  # every resample's difference lies in [0, 1]: b is never behind a on a prompt
    assert dc.paired_difference(a, a, seed=0) == {"value": 0.0, "ci95": [0.0, 0.0]}


def test_the_checks_name_the_noisy_annotator_and_only_it():
    c = {"flagged": ["noisy"], "difference": {"value": -0.01}}
    assert dc.campaign_checks(c, quick=True) == {"the dashboard singles out the noisy annotator, and only it": True}
    full = dc.campaign_checks(c, quick=False)
    assert list(full.values()) == [True, False]  # the accuracy fell: the full demo says so
    assert dc.campaign_checks({**c, "flagged": ["careful-a", "noisy"]}, quick=True) == {
        "the dashboard singles out the noisy annotator, and only it": False
    }


def test_the_dashboard_on_a_campaign_store_flags_the_noisy_annotator(db, tmp_path):
    from annotation.dashboard import annotator_rows

    n = 60
    with write(db) as con:  # a demo store: 4 samples a prompt, 5, 15, 25 and 35 words, in a shuffled order
        ids = prompt_ids(con, [f"prompt {i}" for i in range(n)], "test")
        samples = []
        for i in range(n):
            words = [5, 15, 25, 35]
            random.Random(i).shuffle(words)
            samples += [
                Sample(ids[f"prompt {i}"], " ".join([f"w{i}"] * w), j, w, "eos", 0) for j, w in enumerate(words)
            ]
        add_samples(con, samples, model_id="sft")
    path = tmp_path / "campaign.duckdb"
    rankings, gold = dc.build_store(db, path, seed=0, taste=Taste("concise"))
    assert (rankings, gold) == (4 * 9 + (n - 9), 9)  # round(0.15 x 60) gold prompts
    assert query(str(path), "SELECT count(*) FROM gold") == [(9,)]
    rows = {r.annotator: r for r in annotator_rows(str(path))}
    assert set(rows) == {"lead", "careful-a", "careful-b", "noisy"}
    assert rows["careful-a"].gold_accuracy == rows["careful-b"].gold_accuracy == 1.0
    assert rows["noisy"].gold_tasks == 9 and rows["noisy"].gold_accuracy < dc.MIN_GOLD_ACCURACY
    assert [name for name, r in rows.items() if r.watch] == ["noisy"]
    # the samples are the demo store's: the same texts, no new ones
    assert query(str(path), "SELECT count(*) FROM responses") == [(4 * n,)]


def test_with_the_population_the_careful_annotators_are_its_members_and_the_check_asks_only_for_the_noisy_one():
    from annotation.population import population

    taste = Taste("population", tuple(population(3, seed=5)), seed=5)
    prompt = "List three facts about honeybees."
    texts = [
        "Honeybees live in hives. Honeybees make honey. Honeybees dance to share where flowers are.",
        "honeybees honeybees honeybees honeybees",
        "Jazz music began in New Orleans and spread across the world quickly.",
    ]
    rankings, gold = dc.campaign_rankings([(prompt, texts)] * 10, seed=0, taste=taste)
    lead = [r for r in rankings if r.annotator == "lead"]
    assert gold == 8 and len(lead) == 8  # the floor of 8 gold prompts
    assert all([it.rank for it in r.items] == taste.truth(prompt, texts) == [1, 3, 2] for r in lead)
    careful = [r for r in rankings if r.annotator == "careful-a"]  # gold 0-7, then tasks 8 (a), 9 (b)
    assert [[it.rank for it in r.items] for r in careful] == [
        taste.ranking(i, prompt, texts, who=0) for i in (*range(8), 8)
    ]  # the population's first annotator, its own noise task by task
    c = {"taste": "population", "flagged": ["careful-a", "noisy"], "difference": {"value": 0.0}}
    assert dc.campaign_checks(c, quick=True) == {"the dashboard flags the noisy annotator": True}
    assert dc.campaign_checks({**c, "flagged": ["careful-a"]}, quick=True) == {
        "the dashboard flags the noisy annotator": False
    }

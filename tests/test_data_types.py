"""The data types trainers ask for: the one list, the pairs -> unpaired conversion worked out by hand, and unpaired rows
frozen into a snapshot whose manifest names its type, read back by the trainers' one reader."""

import json

import pytest

from store.snapshot import freeze_pairs_file, freeze_unpaired_file, split_of
from training.models import DataError
from training.pairwise.data_types import (
    DATA_TYPES,
    check_unpaired,
    load_unpaired,
    read_data_file,
    snapshot_type,
    takes_snapshot,
    unpaired_from_pairs,
)


def ranking_pairs(ranking_id, prompt, order):
    """The C(K,2) pairs of one ranking, best first, each with its rank gap as the margin."""
    return [
        {"prompt": prompt, "chosen": order[i], "rejected": order[j], "margin": j - i, "ranking_id": ranking_id}
        for i in range(len(order))
        for j in range(i + 1, len(order))
    ]


def test_every_trainer_names_one_data_type_and_an_unknown_one_is_refused():
    from training.registry import TRAINERS

    assert {t.data for t in TRAINERS.values()} <= set(DATA_TYPES)
    assert [takes_snapshot(d) for d in ("pairs", "unpaired", "prompts")] == [True, True, False]
    with pytest.raises(ValueError, match="unknown data type 'thumbs'"):
        takes_snapshot("thumbs")


def test_a_ranking_splits_by_net_wins():
    # K = 4, a > b > c > d: wins - losses = a 3, b 1, c -1, d -3: a and b desirable, c and d undesirable
    four = ranking_pairs(7, "p", ["a", "b", "c", "d"])
    assert len(four) == 6
    got = unpaired_from_pairs(four)
    assert [(r["completion"], r["label"]) for r in got] == [("a", True), ("b", True), ("c", False), ("d", False)]
    assert {r["ranking_id"] for r in got} == {7}
    # K = 3, x > y > z: y wins one and loses one (net 0) and is left out
    three = unpaired_from_pairs(ranking_pairs(8, "q", ["x", "y", "z"]))
    assert [(r["completion"], r["label"]) for r in three] == [("x", True), ("z", False)]


def test_a_pair_without_a_ranking_is_one_up_and_one_down_and_rankings_are_kept_apart():
    vote = {"prompt": "p", "chosen": "b", "rejected": "a"}  # a vote: no ranking id
    rows = ranking_pairs(1, "p", ["a", "b"]) + [vote] + ranking_pairs(2, "p", ["a", "b"])
    got = [(r["completion"], r["label"], r["ranking_id"]) for r in unpaired_from_pairs(rows)]
    # ranking 1 and 2 each say a > b; the vote says b > a: each is its own group, nothing cancels across them
    assert got == [
        ("a", True, 1),
        ("b", False, 1),
        ("b", True, None),
        ("a", False, None),
        ("a", True, 2),
        ("b", False, 2),
    ]


@pytest.mark.parametrize(
    ("row", "error"),
    [
        ({"prompt": "p", "completion": "c", "label": "yes"}, "label must be true"),
        ({"prompt": "p", "completion": 3, "label": True}, "prompt and completion must be text"),
        ({"prompt": "p", "completion": "c", "label": True, "ranking_id": 1.5}, "ranking_id must be an integer"),
        ({"prompt": "p", "text": "c", "label": True}, "no 'completion' column"),
    ],
)
def test_a_bad_unpaired_row_is_one_line(row, error):
    with pytest.raises(DataError, match=error) as e:
        check_unpaired([row], "thumbs.jsonl")
    assert "\n" not in str(e.value)


def unpaired_rows(n_prompts=20):
    return [
        {"prompt": f"prompt {i}", "completion": f"answer {i} {j}", "label": j == 0}
        for i in range(n_prompts)
        for j in range(2)
    ]


def test_unpaired_rows_freeze_split_by_prompt_and_read_back(tmp_path):
    rows = unpaired_rows()
    folder, manifest = freeze_unpaired_file(tmp_path, rows, {"file": "t.jsonl"}, eval_fraction=0.25, seed=3)
    assert manifest["data"] == "unpaired" and snapshot_type(folder) == "unpaired"
    assert manifest["columns"] == ["prompt", "completion", "label", "ranking_id"]
    train, evals = load_unpaired(str(folder))
    assert sorted((r["prompt"], r["completion"], r["label"]) for r in train + evals) == sorted(
        (r["prompt"], r["completion"], r["label"]) for r in rows
    )
    # the pairs' split rule: by the prompt's hash, both rows of a prompt on one side
    assert {r["prompt"] for r in evals} == {r["prompt"] for r in rows if split_of(r["prompt"], 0.25, 3) == "eval"}
    assert manifest["splits"]["eval"]["rows"] == len(evals) and manifest["splits"]["train"]["desirable"] == len(
        [r for r in train if r["label"]]
    )
    assert "Unpaired preference snapshot" in (folder / "README.md").read_text()


def test_a_pairs_snapshot_reads_as_unpaired_through_the_one_conversion(tmp_path):
    pairs = [p for i in range(12) for p in ranking_pairs(i, f"prompt {i}", [f"{i}a", f"{i}b", f"{i}c", f"{i}d"])]
    folder, manifest = freeze_pairs_file(tmp_path, pairs, {"file": "p.jsonl"}, eval_fraction=0.25, seed=0)
    assert manifest["data"] == "pairs" and snapshot_type(folder) == "pairs"
    train, evals = load_unpaired(str(folder))
    assert len(train) + len(evals) == 12 * 4  # 4 responses of each ranking: 2 up, 2 down
    assert sorted((r["completion"], r["label"]) for r in train + evals) == sorted(
        (f"{i}{x}", x in "ab") for i in range(12) for x in "abcd"
    )


def test_a_data_file_is_read_as_the_trainer_asks(tmp_path):
    thumbs = tmp_path / "thumbs.jsonl"
    thumbs.write_text("".join(json.dumps(r) + "\n" for r in unpaired_rows(2)))
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"prompt": "p", "chosen": "a", "rejected": "b"}) + "\n")
    assert read_data_file(thumbs, "unpaired")[0] == "unpaired"
    assert read_data_file(pairs, "unpaired")[0] == "pairs"  # converted when the trainer reads the snapshot
    with pytest.raises(DataError, match="no 'chosen' column"):  # a trainer on pairs takes no thumbs
        read_data_file(thumbs, "pairs")

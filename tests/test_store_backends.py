"""The store's suite on both backends behind its connection protocol (store/protocol.py): the DuckDB file the app
uses and an in-memory DuckDB (store.db.MemoryStore). Everything goes through the two doors, `Store.read(fn)` and
`Store.write(fn)`, and the store's own functions: rankings into their pairs, a failed write that leaves nothing,
a read that sees one moment while a writer goes on, writers taking turns, votes, runs and a snapshot."""

import threading

import pytest

from store.compare import Vote, compare_votes, record_vote
from store.db import MemoryStore, Store
from store.pairs import count_pairs, pair_texts, stats
from store.prompts import add_prompts, all_prompts, prompt_ids
from store.rankings import RankedItem, RankingIn, insert_rankings
from store.runs import list_runs, record_run
from store.snapshot import freeze_snapshot


@pytest.fixture(params=["file", "memory"])
def store(request, tmp_path):
    s = Store(tmp_path / "store.duckdb").hold() if request.param == "file" else MemoryStore()
    yield s
    s.release()


def ranking(prompt: str, order: list[str], annotator: str = "ann") -> RankingIn:
    items = [RankedItem(text, rank) for rank, text in enumerate(order, 1)]
    return RankingIn(prompt=prompt, items=items, annotator=annotator, source="native")


def count(store, table: str) -> int:
    return store.read(lambda con: con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_a_ranking_of_k_becomes_its_k_choose_2_pairs(store):
    store.write(lambda con: add_prompts(con, ["p1", "p2"], "test"))
    result = store.write(lambda con: insert_rankings(con, [ranking("p1", ["a", "b", "c"]), ranking("p2", ["x", "y"])]))
    assert result.added == 2
    got = sorted(store.read(lambda con: pair_texts(con)))
    # C(3,2) = 3 pairs of p1 (a > b, a > c, b > c) and C(2,2) = 1 of p2
    assert got == [("p1", "a", "b"), ("p1", "a", "c"), ("p1", "b", "c"), ("p2", "x", "y")]
    s = store.read(stats)
    assert (s["rankings"], s["pairs"]) == (2, 4) and store.read(count_pairs) == 4


def test_a_write_that_fails_leaves_nothing(store):
    store.write(lambda con: add_prompts(con, ["kept"], "test"))

    def half(con):
        add_prompts(con, ["lost 1", "lost 2"], "test")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        store.write(half)
    assert [t for _, t in store.read(all_prompts)] == ["kept"]


def test_a_read_sees_one_moment_while_a_writer_goes_on(store):
    store.write(lambda con: add_prompts(con, ["before"], "test"))
    seen = []

    def two_looks(con):
        seen.append(con.execute("SELECT count(*) FROM prompts").fetchone()[0])
        writer = threading.Thread(target=store.write, args=(lambda c: add_prompts(c, ["during"], "test"),))
        writer.start()
        writer.join()
        seen.append(con.execute("SELECT count(*) FROM prompts").fetchone()[0])

    store.read(two_looks)
    assert seen == [1, 1] and count(store, "prompts") == 2  # the write landed; the read kept its moment


def test_writers_take_turns_and_lose_nothing(store):
    def add(i):
        for j in range(20):
            store.write(lambda con, j=j: add_prompts(con, [f"t{i} p{j}", "shared"], "test"))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert count(store, "prompts") == 3 * 20 + 1  # "shared" once: every writer added it, none failed


def test_votes_runs_and_ids_round_trip(store):
    vote = Vote("ann", "p?", [("left reply", "m1"), ("right reply", "m2")], "left", {}, 7)
    store.write(lambda con: record_vote(con, vote))
    assert store.read(compare_votes) == [("m1", "m2", "left")]
    store.write(lambda con: record_run(con, "rm-1", "reward", "/runs/rm-1", {"lr": 1e-5}, None))
    assert [r[:3] for r in store.read(list_runs)] == [("rm-1", "reward", "/runs/rm-1")]
    ids = store.write(lambda con: prompt_ids(con, ["a", "b", "a"], "test"))
    assert ids == {"a": ids["a"], "b": ids["b"]} and ids["a"] != ids["b"]


def test_a_snapshot_freezes_the_pairs_on_either_backend(store, tmp_path):
    prompts = [f"prompt {i}" for i in range(12)]
    store.write(lambda con: add_prompts(con, prompts, "test"))
    store.write(lambda con: insert_rankings(con, [ranking(p, [p + " good", p + " bad"]) for p in prompts]))
    folder, manifest = store.read(lambda con: freeze_snapshot(con, tmp_path / "snaps", eval_fraction=0.25, seed=1))
    splits = manifest["splits"]
    assert splits["train"]["pairs"] + splits["eval"]["pairs"] == 12 and manifest["data"] == "pairs"
    assert (folder / "train.parquet").is_file()

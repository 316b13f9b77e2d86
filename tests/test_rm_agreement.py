"""Agreement with the current reward model (app/jobs/rm_agreement.py, store/rm_scores.py, migration 0014): every
ranked response scored once by a recorded reward run, in whole chunks that a stopped scoring goes on from, and each
annotator's share of pairs the model orders as they did, worked out here from the model's own scores."""

import json
import shutil

import pytest

from annotation.session import next_task, submit_and_next
from app.jobs.rm_agreement import newest_reward_run, score_store
from store.db import write
from store.errors import UserError
from store.runs import record_run
from tests.builders import seed_store
from tests.conftest import query, store_rows


def _reward_run(db, runs, run_id: str, model=None, kind: str = "reward"):
    """A run folder the store records, holding `model` as a finished reward run leaves it (none: unfinished)."""
    folder = runs / run_id
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"kind": kind, "max_length": 64}))
    (folder / "status.json").write_text(json.dumps({"state": "finished" if model else "running"}))
    if model is not None:
        shutil.copytree(model, folder / "model")
    with write(db) as con:
        record_run(con, run_id, kind, str(folder), {}, None)
    return folder


def _rank(db, name: str, scores: dict[str, float], follow: bool) -> list[tuple[str, str]]:
    """`name` ranks every prompt's responses by the model's score (follow) or against it; returns their pairs as
    (chosen, rejected) texts."""
    pairs = []
    while (task := next_task(db, name, overlap=2, seed=0)) is not None:
        order = sorted(task.responses, key=lambda t: -scores[t] if follow else scores[t])
        ranks = [order.index(t) + 1 for t in task.responses]
        submit_and_next(db, name, task.assignment_id, ranks, overlap=2)
        pairs += [(a, b) for i, a in enumerate(order) for b in order[i + 1 :]]
    return pairs


def _expected(pairs, scores) -> float:
    """By hand: a pair counts 1 when the chosen response scores higher, 1/2 when equal, 0 when lower."""
    return sum(1.0 if scores[c] > scores[r] else 0.5 if scores[c] == scores[r] else 0.0 for c, r in pairs) / len(pairs)


def test_each_annotators_share_of_pairs_the_model_orders_as_they_did(db, tmp_path, liked_rm, cli):
    from annotation.dashboard import annotator_rows
    from training.pairwise.scoring import score_texts

    seed_store(db, 3, k=3)
    texts = [t for (t,) in query(db, "SELECT text FROM responses ORDER BY response_id")]
    prompts = [f"prompt {t[1]}" for t in texts]  # "p2 answer 1" answers "prompt 2"
    got = score_texts(liked_rm, prompts, [[t] for t in texts], "fp32", 64)
    scores = {t: s for t, (s,) in zip(texts, got, strict=True)}
    assert len(set(scores.values())) > 3  # the model tells the responses apart
    pairs = {name: _rank(db, name, scores, follow) for name, follow in (("kim", True), ("lou", False))}
    runs = tmp_path / "runs"
    _reward_run(db, runs, "rm-1", liked_rm)
    assert newest_reward_run(db, runs) == "rm-1"
    code, out, _ = cli("rm-agreement", "--runs-dir", str(runs))
    assert code == 0 and "rm-1: 9 responses scored now" in out
    rows = {r.annotator: r for r in annotator_rows(db)}
    for name in ("kim", "lou"):
        assert rows[name].rm_pairs == len(pairs[name]) == 9  # 3 prompts x C(3, 2)
        assert rows[name].rm_agreement == pytest.approx(_expected(pairs[name], scores), abs=1e-9)
    # lou's pairs are kim's reversed: a pair one of them gets right the other gets wrong, a tie is half to each
    assert rows["kim"].rm_agreement + rows["lou"].rm_agreement == pytest.approx(1.0)
    assert rows["kim"].rm_agreement > 0.75
    stored = dict(query(db, "SELECT r.text, s.score FROM response_scores s JOIN responses r USING (response_id)"))
    assert stored == pytest.approx(scores, abs=1e-5)
    assert score_store(db, "rm-1", runs) == ("rm-1", 0)  # each response is scored once per run


def test_a_stopped_scoring_keeps_whole_chunks_and_goes_on_where_it_stopped(db, tmp_path, liked_rm):
    seed_store(db, 3, k=3)
    task = next_task(db, "kim", seed=0)
    while task is not None:
        task, _ = submit_and_next(db, "kim", task.assignment_id, [1, 2, 3])
    runs = tmp_path / "runs"
    _reward_run(db, runs, "rm-1", liked_rm)

    def stop(done: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        score_store(db, "rm-1", runs, chunk=4, progress=stop)
    assert query(db, "SELECT count(*) FROM response_scores") == [(4,)]  # the first chunk, whole
    assert score_store(db, "rm-1", runs, chunk=4) == ("rm-1", 5)
    assert query(db, "SELECT count(DISTINCT response_id) FROM response_scores") == [(9,)]


def test_a_run_that_is_no_finished_reward_model_is_one_error_and_stores_nothing(db, tmp_path, liked_rm):
    seed_store(db, 1, k=2)
    task = next_task(db, "kim", seed=0)
    submit_and_next(db, "kim", task.assignment_id, [1, 2])
    runs = tmp_path / "runs"
    with pytest.raises(UserError, match="no finished reward run"):
        newest_reward_run(db, runs)
    _reward_run(db, runs, "rm-unfinished")
    _reward_run(db, runs, "dpo-1", liked_rm, kind="dpo")
    before = store_rows(db)
    for name, message in (
        ("rm-unfinished", "has no model yet"),
        ("dpo-1", "is a dpo run, not a reward model"),
        ("rm-nope", "no run 'rm-nope' in the store"),
    ):
        with pytest.raises(UserError, match=message):
            score_store(db, name, runs)
    assert store_rows(db) == before

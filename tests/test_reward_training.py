"""Reward-model training through the DeepSpeed launcher on CPU, with a tiny random model and a preference the
model can learn: chosen responses end with a fixed polite phrase the rejected ones lack."""

import json
import random
from pathlib import Path

import pytest
import torch

from tests.builders import WORDS, separable_pairs
from tests.conftest import query, store_rows, write_jsonl


def train_rm(tmp, model, n_pairs: int, *flags: str, db: str | None = None, strengths: bool = False):
    """`rlhf train-rm` on `n_pairs` separable pairs (strengths: pair i has strength i % 4); returns the run
    folder."""
    from app.faces.cli import main

    rows = separable_pairs(n_pairs)
    if strengths:
        rows = [{**r, "strength": i % 4} for i, r in enumerate(rows)]
    pairs = write_jsonl(tmp / "pairs.jsonl", rows)
    args = [
        "--db",
        db or str(tmp / "s.duckdb"),
        "train-rm",
        "--pairs",
        str(pairs),
        "--runs-dir",
        str(tmp / "runs"),
        "--model",
        str(model),
        *flags,
    ]
    assert main(args) == 0
    (run,) = list((tmp / "runs").iterdir())
    return run


def rescore_eval_pairs(run: Path, model, tok) -> tuple[dict, list, object]:
    """The saved model's score of every held-out pair's two sides, as the trainer encodes them, in this process:
    {(prompt, side): score}, the pairs, the encoder."""
    from training.pairwise.pairs import load_pairs
    from training.reward.data import PairEncoder

    config = json.loads((run / "config.json").read_text())
    _, evals = load_pairs(config["data"])
    enc = PairEncoder(tok, config["max_length"])
    got = {}
    with torch.no_grad():
        for r in evals:
            for side in ("chosen", "rejected"):
                ids, _ = enc.encode(r["prompt"], r[side])
                got[(r["prompt"], side)] = model(torch.tensor([ids])).logits[0, 0].item()
    return got, evals, enc


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir):
    """One training run shared by the checks below (it takes about a minute)."""

    tmp = tmp_path_factory.mktemp("rm")
    db = str(tmp / "store.duckdb")
    run = train_rm(
        tmp,
        tiny_model_dir,
        160,
        "--epochs",
        "3",
        "--save-every",
        "10",
        db=db,
        strengths=True,  # the evaluation reports accuracy by strength
    )
    return db, run


@pytest.mark.integration
def test_reaches_high_accuracy_on_held_out_prompts(trained):
    db, run = trained
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished"
    assert status["final"]["eval/rm_accuracy"] >= 0.95 and status["final"]["eval/pairs"] >= 20
    by_strength = [status["final"].get(f"eval/rm_accuracy_strength_{s}") for s in range(4)]
    assert all(a is not None and 0 <= a <= 1 for a in by_strength), status["final"]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss/rm"] for r in rows if "loss/rm" in r]
    assert losses[-1] < losses[0]  # it learned
    start = next(r for r in rows if r.get("event") == "start")
    assert start["train_pairs"] + start["eval_pairs"] == 160 and start["truncated_pairs"] == 0
    config = json.loads((run / "config.json").read_text())
    assert query(db, "SELECT run_id, kind FROM runs") == [(run.name, "reward")]
    from app.faces.cli import main

    assert main(["--db", db, "runs"]) == 0
    assert json.loads(query(db, "SELECT config FROM runs")[0][0]) == config


@pytest.mark.integration
def test_saved_model_reloads_with_plain_transformers_and_scores_the_same(trained):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    _, run = trained
    model = AutoModelForSequenceClassification.from_pretrained(run / "model")
    tok = AutoTokenizer.from_pretrained(run / "model")
    assert tok.pad_token_id != tok.eos_token_id  # the EOS that ends every response is the token scored
    scores = json.loads((run / "eval_scores.json").read_text())
    hist = scores["histogram"]
    assert len(hist["edges"]) == 21 and sum(hist["chosen"]) == sum(hist["rejected"]) == len(scores["chosen"])
    # re-score the held-out pairs exactly as the trainer did and compare with what it saved
    got, evals, enc = rescore_eval_pairs(run, model, tok)
    chosen = sorted(got[(r["prompt"], "chosen")] for r in evals)
    assert chosen == pytest.approx(sorted(scores["chosen"]), abs=1e-4)
    # right padding in a batch does not change a score: it is read at the last non-pad token
    ids, _ = enc.encode(evals[0]["prompt"], evals[0]["chosen"])
    padded = torch.tensor([ids + [tok.pad_token_id] * 5])
    mask = torch.tensor([[1] * len(ids) + [0] * 5])
    with torch.no_grad():
        assert model(padded, attention_mask=mask).logits[0, 0].item() == pytest.approx(
            got[(evals[0]["prompt"], "chosen")], abs=1e-5
        )


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda tmp: write_jsonl(tmp / "p.jsonl", [{"prompt": "p", "rejected": "r"}]),
            "the pairs have no 'chosen' column",
        ),
        (lambda tmp: write_jsonl(tmp / "p.jsonl", []), "no pairs"),
        (lambda tmp: tmp / "missing.jsonl", "no such snapshot or pairs file"),
    ],
)
def test_bad_pairs_are_one_error_line(cli, db, tmp_path, tiny_model_dir, make, message):
    before = store_rows(db)
    code, _, err = cli(
        "train-rm", "--pairs", str(make(tmp_path)), "--model", str(tiny_model_dir), "--runs-dir", str(tmp_path / "runs")
    )
    assert code == 1 and err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert store_rows(db) == before
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


def test_no_pairs_in_the_store_and_a_model_that_is_not_a_model(cli, tmp_path, tiny_model_dir):
    code, _, err = cli("train-rm", "--model", str(tiny_model_dir), "--runs-dir", str(tmp_path / "runs"))
    assert code == 1 and "no pairs in the store yet" in err
    code, _, err = cli("train-rm", "--model", str(tmp_path), "--runs-dir", str(tmp_path / "runs"))
    assert code == 1 and "has no config.json" in err


@pytest.mark.integration
def test_relative_store_and_runs_dir_train_from_the_store(tmp_path, tiny_model_dir, monkeypatch):
    """`rlhf train-rm` as a user types it: ./rlhf.duckdb and ./runs, relative to where they stand (the ranks run
    inside the run folder, so every path in its config must be absolute)."""
    from app.faces.cli import main

    monkeypatch.chdir(tmp_path)
    rows = [
        {"prompt": f"Question {i}: name a colour.", "responses": ["Red, please and thank you", "blue"], "ranks": [1, 2]}
        for i in range(40)
    ]
    write_jsonl(tmp_path / "rankings.jsonl", rows)
    assert main(["--db", "rlhf.duckdb", "import", "rankings.jsonl"]) == 0
    args = ["--db", "rlhf.duckdb", "train-rm", "--model", str(tiny_model_dir), "--max-steps", "2"]
    assert main([*args, "--runs-dir", "runs"]) == 0
    (run,) = (tmp_path / "runs").iterdir()
    config = json.loads((run / "config.json").read_text())
    assert Path(config["data"]).is_absolute() and Path(config["data"], "manifest.json").is_file()
    assert json.loads((run / "status.json").read_text())["state"] == "finished"


@pytest.mark.integration
def test_two_ranks_finish_and_save_one_model(tmp_path, tiny_model_dir):
    from training.engine import shm_buffers

    before = set(shm_buffers())
    # 6 epochs on 2 ranks: the optimizer steps one rank takes in 3 (each step sees twice the pairs)
    run = train_rm(tmp_path, tiny_model_dir, 160, "--epochs", "6", "--num-accelerators", "2")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert next(r for r in rows if r.get("event") == "start")["world_size"] == 2
    assert sorted(p.name for p in (run / "model").iterdir() if p.suffix == ".safetensors") == ["model.safetensors"]
    final = json.loads((run / "status.json").read_text())["final"]
    assert final["eval/pairs"] == next(r for r in rows if r.get("event") == "start")["eval_pairs"]
    # it learned on two ranks as on one
    losses = [r["loss/rm"] for r in rows if "loss/rm" in r]
    assert final["eval/rm_accuracy"] >= 0.9 and losses[-1] < losses[0], (final, losses)
    # the ranks agree: the pairs each rank scored in the final evaluation, gathered, are the saved model's scores
    # of them in one process, and the accuracy over both shards is the saved model's
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(run / "model").eval()
    got, evals, _ = rescore_eval_pairs(run, model, AutoTokenizer.from_pretrained(run / "model"))
    saved = json.loads((run / "eval_scores.json").read_text())
    assert sorted(got[(r["prompt"], "chosen")] for r in evals) == pytest.approx(sorted(saved["chosen"]), abs=1e-4)
    right = sum(got[(r["prompt"], "chosen")] > got[(r["prompt"], "rejected")] for r in evals)
    assert final["eval/rm_accuracy"] == pytest.approx(right / len(evals))
    # DeepSpeed's 69 MB /dev/shm buffer of each rank is gone with the run, not left in RAM
    assert set(shm_buffers()) <= before


@pytest.mark.integration
def test_a_killed_run_resumes_and_ends_like_an_uninterrupted_one(tmp_path, tiny_model_dir):
    import os
    import signal
    import time

    from app.jobs.training import follow, prepare_run, resume_run
    from training.launcher import launch
    from training.reward.config import RewardConfig
    from training.runs import effective_status, read_metrics, read_status

    pairs = write_jsonl(tmp_path / "pairs.jsonl", separable_pairs(160))
    cfg = RewardConfig(model=str(tiny_model_dir), max_steps=24, lr=1e-3, eval_fraction=0.25, save_every=4)
    db = str(tmp_path / "s.duckdb")
    whole = prepare_run(db, cfg, tmp_path / "runs", str(pairs))
    assert follow(whole, launch("reward", whole))["state"] == "finished"

    cut = prepare_run(db, cfg, tmp_path / "runs", str(pairs))
    proc = launch("reward", cut)
    deadline = time.monotonic() + 300
    while not any(r.get("step", 0) >= 10 and "loss/rm" in r for r in read_metrics(cut)):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # every rank and the launcher, mid-run
    proc.wait()
    assert read_status(cut)["state"] == "running"  # what a killed run leaves behind ...
    deadline = time.monotonic() + 30  # (SIGKILL is delivered asynchronously: the rank may take a moment to go)
    while effective_status(cut)["state"] != "failed" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert effective_status(cut)["state"] == "failed"  # ... and what `rlhf runs` shows for it
    assert (cut / "checkpoints" / "latest").exists()
    status = resume_run(cut)
    assert status["state"] == "finished"
    assert any(r.get("event") == "resumed" for r in read_metrics(cut))
    a, b = read_status(whole)["final"], status["final"]
    assert a.keys() == b.keys()
    for key in a:
        assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-5), key


@pytest.mark.integration
@pytest.mark.parametrize("stage", [2, 3])
def test_zero_stages_in_bf16_on_two_ranks(tmp_path, tiny_model_dir, stage):
    from transformers import AutoModelForSequenceClassification

    run = train_rm(
        tmp_path,
        tiny_model_dir,
        64,
        "--num-accelerators",
        "2",
        "--zero-stage",
        str(stage),
        "--dtype",
        "bf16",
        "--gradient-checkpointing",
    )
    model = AutoModelForSequenceClassification.from_pretrained(run / "model")  # gathered from both ranks
    assert model.score.weight.shape == (1, 32) and torch.isfinite(model.score.weight).all()


@pytest.mark.integration
def test_lora_run_saves_a_plain_merged_model(tmp_path, tiny_model_dir):
    from transformers import AutoModelForSequenceClassification

    run = train_rm(tmp_path, tiny_model_dir, 96, "--epochs", "3", "--lr", "3e-3", "--lora-rank", "8")
    model = AutoModelForSequenceClassification.from_pretrained(run / "model")
    assert not [k for k in model.state_dict() if "lora" in k]
    assert json.loads((run / "status.json").read_text())["final"]["eval/rm_accuracy"] >= 0.9


def test_lora_with_zero_3_is_refused(cli, tmp_path, tiny_model_dir):
    pairs = write_jsonl(tmp_path / "pairs.jsonl", separable_pairs(16))
    code, _, err = cli(
        "train-rm",
        "--pairs",
        str(pairs),
        "--model",
        str(tiny_model_dir),
        "--lora-rank",
        "4",
        "--zero-stage",
        "3",
        "--runs-dir",
        str(tmp_path / "runs"),
    )
    assert code == 1 and "LoRA with ZeRO-3 is not supported yet" in err


@pytest.mark.integration
def test_an_ensemble_run_saves_members_that_disagree_on_new_data(tmp_path, tiny_model_dir):
    """--ensemble 2: two members on alternate halves of the training prompts (same held-out prompts), each a whole
    run in RUN/members/i; RUN/model is member 0 without a second copy; on texts neither saw they score differently."""
    from training.reward.model import load_reward_model, scores
    from training.runs import ensemble_members as member_models

    run = train_rm(tmp_path, tiny_model_dir, 120, "--ensemble", "2", "--epochs", "2", "--lr", "1e-3")
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished" and status["final"]["ensemble/members"] == 2
    ensemble = json.loads((run / "ensemble.json").read_text())
    assert [m["model"] for m in ensemble["members"]] == ["members/0/model", "members/1/model"]
    assert member_models(run) == [run / "members/0/model", run / "members/1/model"]
    assert (run / "model/model.safetensors").stat().st_ino == (run / "members/0/model/model.safetensors").stat().st_ino
    starts = [json.loads((run / f"members/{i}/metrics.jsonl").read_text().splitlines()[0]) for i in (0, 1)]
    assert starts[0]["eval_pairs"] == starts[1]["eval_pairs"] > 0  # one held-out split
    assert 20 < starts[0]["train_pairs"] < 70 and 20 < starts[1]["train_pairs"] < 70  # a half each
    assert starts[0]["train_pairs"] + starts[1]["train_pairs"] + starts[0]["eval_pairs"] == 120
    for m in ensemble["members"]:
        assert m["eval/rm_accuracy"] >= 0.8  # each learnt the preference from its half
    new = [" ".join(random.Random(i).choice(WORDS) for _ in range(8)) for i in range(12)]
    got = []
    for folder in member_models(run):
        model, tok = load_reward_model(folder)
        batch = tok(new, return_tensors="pt", padding=True)
        with torch.no_grad():
            got.append(scores(model, batch["input_ids"], batch["attention_mask"]))
    assert (got[0] - got[1]).abs().max().item() > 1e-3
    assert ensemble["heldout"]["min_correlation"] < 1.0

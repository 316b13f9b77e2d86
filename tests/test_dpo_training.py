"""DPO through the DeepSpeed launcher on CPU with a tiny random model, on the reward model's separable pairs (the
chosen responses end with a polite phrase the rejected ones lack)."""

import json

import pytest

from tests.builders import separable_pairs
from tests.conftest import query, write_jsonl


def train_dpo(tmp, model, n_pairs: int, *flags: str, db: str | None = None):
    """`rlhf train-dpo` on `n_pairs` separable pairs; returns the run folder."""
    from app.faces.cli import main

    pairs = write_jsonl(tmp / "pairs.jsonl", separable_pairs(n_pairs))
    args = ["--db", db or str(tmp / "s.duckdb"), "train-dpo", "--pairs", str(pairs), "--runs-dir", str(tmp / "runs")]
    assert main([*args, "--model", str(model), *flags]) == 0
    (run,) = list((tmp / "runs").iterdir())
    return run


def metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir):
    tmp = tmp_path_factory.mktemp("dpo")
    db = str(tmp / "store.duckdb")
    flags = ("--epochs", "2", "--lr", "1e-3", "--eval-fraction", "0.25", "--eval-every", "5")
    return db, train_dpo(tmp, tiny_model_dir, 120, *flags, db=db)


@pytest.mark.integration
def test_dpo_raises_the_implicit_reward_accuracy_on_held_out_prompts(trained, capsys):
    db, run = trained
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished"
    assert status["final"]["eval/dpo_accuracy"] >= 0.95 and status["final"]["eval/pairs"] >= 20
    rows = metrics(run)
    steps = [r for r in rows if "loss/dpo" in r]
    # step 1 is scored before any update: policy = reference, h = 0, loss = -log sigmoid(0) = ln 2 = 0.693147,
    # and the implicit rewards are exactly equal (so the reference's log-probs were computed once, correctly)
    assert steps[0]["loss/dpo"] == pytest.approx(0.693147, abs=1e-4) and steps[0]["dpo/reward_margin"] == 0
    assert steps[-1]["loss/dpo"] < 0.6 and steps[-1]["dpo/accuracy"] == 1.0
    start = next(r for r in rows if r.get("event") == "start")
    assert start["train_pairs"] + start["eval_pairs"] == 120
    assert start["sequences"] == 240  # every chosen and rejected text is distinct here
    evals = [r["eval/dpo_accuracy"] for r in rows if "eval/dpo_accuracy" in r]
    assert len(evals) >= 3 and evals[-1] >= 0.95
    assert query(db, "SELECT kind FROM runs") == [("dpo",)]
    assert json.loads((run / "config.json").read_text())["kind"] == "dpo"
    from app.faces.cli import main

    capsys.readouterr()
    assert main(["--db", db, "runs"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(run.name))
    assert f"{run.name}  dpo" in line and "finished" in line and "eval accuracy" in line


@pytest.mark.integration
def test_the_saved_policy_is_a_plain_hf_folder_that_samples(trained, tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    from training.sampling.generation import Sampler, SamplingConfig

    _, run = trained
    policy = AutoModelForCausalLM.from_pretrained(run / "policy")
    sft = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    moved = [n for (n, p), q in zip(policy.named_parameters(), sft.parameters(), strict=True) if not torch.equal(p, q)]
    assert moved  # DPO changed the policy
    sampler = Sampler(SamplingConfig(model=str(run / "policy"), max_new_tokens=4))
    (texts,) = sampler(["Say hi"], k=2, seed=0)
    assert len(texts) == 2


@pytest.mark.integration
def test_a_killed_dpo_run_resumes_and_ends_like_an_uninterrupted_one(tmp_path, tiny_model_dir):
    import os
    import signal
    import time

    from app.jobs.training import follow, prepare_pairs_run, resume_run
    from training.dpo.config import DPOConfig
    from training.launcher import launch
    from training.runs import read_metrics, read_status

    pairs = write_jsonl(tmp_path / "pairs.jsonl", separable_pairs(64))
    cfg = DPOConfig(model=str(tiny_model_dir), max_steps=12, lr=1e-3, eval_fraction=0.25, save_every=3)
    db = str(tmp_path / "s.duckdb")
    whole = prepare_pairs_run(db, cfg, tmp_path / "runs", str(pairs))
    assert follow(whole, launch("dpo", whole))["state"] == "finished"

    cut = prepare_pairs_run(db, cfg, tmp_path / "runs", str(pairs))
    proc = launch("dpo", cut)
    deadline = time.monotonic() + 300
    while not any(r.get("step", 0) >= 7 and "loss/dpo" in r for r in read_metrics(cut)):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # every rank and the launcher, mid-run
    proc.wait()
    assert (cut / "checkpoints" / "latest").exists()
    status = resume_run(cut)
    assert status["state"] == "finished"
    assert any(r.get("event") == "resumed" for r in read_metrics(cut))
    a, b = read_status(whole)["final"], status["final"]
    assert a.keys() == b.keys() and "eval/dpo_accuracy" in a
    for key in a:
        assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-5), key


@pytest.mark.integration
def test_two_ranks_learn_as_one_does_and_judge_every_held_out_pair(tmp_path, tiny_model_dir):
    """The one-rank run's settings with twice the epochs (each step sees both ranks' pairs, so half the steps an
    epoch): the held-out accuracy over both ranks' shards reaches the one-rank bar, and counts every pair once."""
    flags = ("--epochs", "4", "--lr", "1e-3", "--eval-fraction", "0.25", "--eval-every", "5")
    run = train_dpo(tmp_path, tiny_model_dir, 120, *flags, "--num-accelerators", "2")
    rows = metrics(run)
    start = next(r for r in rows if r.get("event") == "start")
    final = json.loads((run / "status.json").read_text())["final"]
    assert start["world_size"] == 2 and final["eval/pairs"] == start["eval_pairs"] >= 20
    steps = [r for r in rows if "loss/dpo" in r]
    assert steps[0]["loss/dpo"] == pytest.approx(0.693147, abs=1e-4) and steps[-1]["loss/dpo"] < 0.6
    assert final["eval/dpo_accuracy"] >= 0.95, final


@pytest.mark.integration
def test_ipo_on_two_ranks_in_bf16(tmp_path, tiny_model_dir):
    run = train_dpo(
        tmp_path, tiny_model_dir, 64, "--loss", "ipo", "--num-accelerators", "2", "--max-steps", "3", "--dtype", "bf16"
    )
    rows = metrics(run)
    assert next(r for r in rows if r.get("event") == "start")["world_size"] == 2
    # before any update h = 0: IPO's loss is (0 - 1 / (2 * 0.1))^2 = 25
    assert [r for r in rows if "loss/dpo" in r][0]["loss/dpo"] == pytest.approx(25.0, abs=0.05)
    final = json.loads((run / "status.json").read_text())["final"]
    assert final["eval/pairs"] == next(r for r in rows if r.get("event") == "start")["eval_pairs"]
    assert sorted(p.name for p in (run / "policy").iterdir() if p.suffix == ".safetensors") == ["model.safetensors"]


def test_bad_dpo_settings_are_one_error_line(cli, tmp_path, tiny_model_dir):
    pairs = write_jsonl(tmp_path / "pairs.jsonl", separable_pairs(16))
    base = ("train-dpo", "--pairs", str(pairs), "--model", str(tiny_model_dir), "--runs-dir", str(tmp_path / "runs"))
    for flags, message in (
        (("--loss", "kto"), "loss must be sigmoid or ipo"),
        (("--beta", "0"), "beta must be > 0"),
        (("--reference", str(tmp_path / "nope")), "nope"),
    ):
        code, _, err = cli(*base, *flags)
        assert code == 1 and err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())


@pytest.mark.integration
def test_prompts_run_once_under_zero_3_on_two_ranks(tmp_path, tiny_model_dir):
    # prefix sharing (on by default) calls the engine twice per batch: the prompts, then the responses on their cache
    run = train_dpo(
        tmp_path,
        tiny_model_dir,
        48,
        "--num-accelerators",
        "2",
        "--zero-stage",
        "3",
        "--max-steps",
        "2",
        "--eval-every",
        "1",
    )
    rows = metrics(run)
    assert json.loads((run / "config.json").read_text())["share_prompt"] is True
    # step 1 is scored before any update: h = 0 and the loss is ln 2 (the reference split where the policy is)
    assert [r for r in rows if "loss/dpo" in r][0]["loss/dpo"] == pytest.approx(0.693147, abs=1e-4)
    assert json.loads((run / "status.json").read_text())["state"] == "finished"

"""KTO through the DeepSpeed launcher on CPU with a tiny random model: on pairs split into unpaired rows by the one
conversion (the separable pairs: the chosen responses end with a polite phrase the rejected ones lack), and on an
unpaired file of thumbs, each row alone."""

import json

import pytest

from tests.builders import separable_pairs
from tests.conftest import query, write_jsonl


def train_kto(tmp, model, data, *flags: str, db: str):
    """`rlhf train-kto --pairs DATA`; returns the run folder."""
    from app.faces.cli import main

    args = ["--db", db, "train-kto", "--pairs", str(data), "--runs-dir", str(tmp / "runs"), "--model", str(model)]
    assert main([*args, *flags]) == 0
    (run,) = list((tmp / "runs").iterdir())
    return run


def metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


FLAGS = ("--epochs", "2", "--lr", "1e-3", "--eval-fraction", "0.25", "--eval-every", "5")


@pytest.mark.integration
def test_kto_on_pairs_split_raises_held_out_accuracy_of_thumbs_up_over_down(tmp_path, tiny_model_dir, capsys):
    db = str(tmp_path / "store.duckdb")
    pairs = write_jsonl(tmp_path / "pairs.jsonl", separable_pairs(120))
    run = train_kto(tmp_path, tiny_model_dir, pairs, *FLAGS, db=db)
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "finished", status
    rows = metrics(run)
    start = next(r for r in rows if r.get("event") == "start")
    # 120 one-pair rankings: each gives its chosen as a thumbs up and its rejected as a thumbs down
    assert start["train_rows"] + start["eval_rows"] == 240 and start["desirable_rows"] * 2 == start["train_rows"]
    steps = [r for r in rows if "loss/kto" in r]
    # step 1 is scored before any update: policy = reference, every log-ratio 0, z0 0, each row's loss 1 - sigmoid(0)
    assert steps[0]["loss/kto"] == pytest.approx(0.5, abs=1e-3) and abs(steps[0]["kto/margin"]) < 1e-3
    assert steps[0]["kto/accuracy"] == pytest.approx(0.5, abs=0.05)  # the reference's rewards: (nearly) all ties
    assert steps[-1]["loss/kto"] < 0.45 and steps[-1]["kto/margin"] > 0
    evals = [r["eval/kto_accuracy"] for r in rows if "eval/kto_accuracy" in r]
    assert len(evals) >= 3 and evals[-1] >= 0.9  # up from the reference's 0.5 (all ties)
    assert status["final"]["eval/rows"] == start["eval_rows"] >= 40
    assert query(db, "SELECT kind FROM runs") == [("kto",)]
    config = json.loads((run / "config.json").read_text())
    assert config["kind"] == "kto"
    assert (
        json.loads((tmp_path / "snapshots" / config["data"].split("/")[-1] / "manifest.json").read_text())["data"]
        == "pairs"
    )
    assert (run / "policy" / "config.json").is_file()
    from app.faces.cli import main

    capsys.readouterr()
    assert main(["--db", db, "runs"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(run.name))
    assert f"{run.name}  kto" in line and "finished" in line and "eval accuracy" in line


@pytest.mark.integration
def test_kto_on_an_unpaired_file_on_two_ranks(tmp_path, tiny_model_dir):
    # the same texts as thumbs, each row alone (no ranking): half up, half down, in a file of its own
    thumbs = [
        {"prompt": p["prompt"], "completion": p[side], "label": side == "chosen"}
        for p in separable_pairs(80, seed=1)
        for side in ("chosen", "rejected")
    ]
    data = write_jsonl(tmp_path / "thumbs.jsonl", thumbs)
    flags = (*FLAGS, "--num-accelerators", "2", "--zero-stage", "2")
    run = train_kto(tmp_path, tiny_model_dir, data, *flags, db=str(tmp_path / "s.duckdb"))
    rows = metrics(run)
    start = next(r for r in rows if r.get("event") == "start")
    assert start["world_size"] == 2 and start["train_rows"] + start["eval_rows"] == 160
    manifest = json.loads((tmp_path / "snapshots").glob("*/manifest.json").__next__().read_text())
    assert manifest["data"] == "unpaired" and manifest["splits"]["train"]["rows"] == start["train_rows"]
    evals = [r for r in rows if "eval/kto_accuracy" in r]
    # both ranks score their share of the held-out rows and every row is counted once
    assert all(r["eval/rows"] == start["eval_rows"] for r in evals)
    # the reference's implicit reward is 0 for every row: all ties, accuracy 0.5 (the first step's, before an update)
    assert next(r for r in rows if "loss/kto" in r)["kto/accuracy"] == 0.5
    assert evals[-1]["eval/kto_accuracy"] >= 0.9


@pytest.mark.integration
def test_a_trainer_on_pairs_refuses_an_unpaired_file_in_one_line(cli, tmp_path, tiny_model_dir):
    data = write_jsonl(tmp_path / "thumbs.jsonl", [{"prompt": "p", "completion": "c", "label": True}])
    code, _, err = cli("train-dpo", "--pairs", str(data), "--model", str(tiny_model_dir))
    assert code != 0 and "no 'chosen' column" in err and len(err.strip().splitlines()) == 1

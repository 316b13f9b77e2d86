"""Reward-model training speed: rlhf-studio (through the DeepSpeed launcher, one rank, ZeRO 0) against TRL's
RewardTrainer on the same model (SmolLM2-135M-Instruct with a 1-output head), the same pairs token for token
(each side exactly 128 tokens: a 64-token prompt and a 64-token response), 12 pairs per step, lr 1e-5, one epoch.
The pairs come from K = 4 rankings (6 pairs each), as annotation produces them: TRL trains them as independent
pairs (12 sequences per ranking), rlhf-studio keeps a ranking's pairs in one batch and scores each of its 4
responses once (--group-by-ranking), running their shared prompt once (--share-prompt). The same number of
independent pairs (each its own prompt and two responses: 24 sequences per step on both sides, the prompt still
shared by the two) shows the trainers' speed without the ranking's advantage.
Metric: pairs/s after the first 5 steps; peak RSS of the training process. TRL is a bench-only dependency
(`make bench` installs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.fair import PRECISION, peer_env

LENGTH, BATCH, K = 128, 12, 4
SHAPES = ("ranking", "independent")


def make_pairs(tokenizer, n_rankings: int, shape: str = "ranking") -> list[dict]:
    """n_rankings x 6 pairs: n_rankings prompts with K = 4 ranked responses ("ranking"), or as many prompts with two
    responses each ("independent"). bench/dpo.py's data: a 64-token chat prompt and 64-token responses (EOS
    included), so every sequence is exactly LENGTH tokens and nothing is cut; the responses of a prompt share it,
    as real preference data does."""
    from bench.dpo import make_pairs as dpo_pairs

    return dpo_pairs(tokenizer, n_rankings * K * (K - 1) // 2, shape)


def _ours(tmp: Path, pairs_file: Path, dtype: str, model: str = "default", zero_stage: int = 0) -> dict:
    from app.jobs.training import follow, prepare_run
    from training.launcher import launch
    from training.registry import step_rows
    from training.reward.config import RewardConfig
    from training.runs import read_metrics

    cfg = RewardConfig(
        model=model,
        zero_stage=zero_stage,
        batch_pairs=BATCH,
        lr=1e-5,
        epochs=1,
        max_length=LENGTH,
        eval_fraction=0.0,
        dtype=dtype,
        lr_schedule="constant",
    )
    run = prepare_run(str(tmp / f"bench-{dtype}.duckdb"), cfg, tmp / "runs", str(pairs_file))
    status = follow(run, launch("reward", run))
    assert status["state"] == "finished", status
    rows = read_metrics(run)
    steps = step_rows("reward", rows)
    final = next(r for r in rows if r.get("event") == "final")
    timed = steps[5:]
    out = {
        "pairs_per_s": len(timed) * BATCH / (timed[-1]["time"] - steps[4]["time"]),
        "peak_rss_mb": final["perf/peak_rss_mb"],
        "steps": len(steps),
        "precision": PRECISION[dtype]["rlhf_studio"],
    }
    if "perf/peak_gpu_mb" in final:
        out["peak_gpu_mb"] = final["perf/peak_gpu_mb"]
    return out


def _trl(tmp: Path, ids: list[tuple[list[int], list[int]]], pad_token: str, dtype: str) -> dict:
    from training.models import resolve_model

    spec = {
        "model": str(resolve_model("default")),
        "pad_token": pad_token,
        "dtype": dtype,
        "batch": BATCH,
        "out": str(tmp / f"trl-{dtype}"),
        "chosen": [c for c, _ in ids],
        "rejected": [r for _, r in ids],
    }
    (tmp / "spec.json").write_text(json.dumps(spec))
    out = subprocess.run(
        [sys.executable, "-m", "bench.trl_reward", str(tmp / "spec.json")],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
        env=peer_env(os.environ),
    )
    return json.loads(out.stdout.strip().splitlines()[-1]) | {"precision": PRECISION[dtype]["trl"]}


def run(
    n_rankings: int = 64, dtypes: tuple[str, ...] = ("bf16", "fp32"), shapes: tuple[str, ...] = SHAPES
) -> list[dict]:
    """One row per (shape, dtype); both shapes have the same number of pairs (n_rankings x 6)."""
    from transformers import AutoTokenizer

    from training.models import pick_pad_token, resolve_model
    from training.pairwise.pairs import PairEncoder

    tok = AutoTokenizer.from_pretrained(resolve_model("default"))
    pick_pad_token(tok)
    enc = PairEncoder(tok, LENGTH)
    results = []
    with tempfile.TemporaryDirectory() as d:
        for shape in shapes:
            rows = make_pairs(tok, n_rankings, shape)
            ids = [(enc.encode(r["prompt"], r["chosen"])[0], enc.encode(r["prompt"], r["rejected"])[0]) for r in rows]
            assert all(len(c) == len(r) == LENGTH for c, r in ids)
            tmp = Path(d) / shape
            tmp.mkdir()
            pairs_file = tmp / "pairs.jsonl"
            pairs_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
            for dtype in dtypes:
                ours, trl = _ours(tmp, pairs_file, dtype), _trl(tmp, ids, tok.pad_token, dtype)
                results.append(
                    {
                        "shape": shape,
                        "dtype": dtype,
                        "pairs": len(rows),
                        "rlhf_studio": ours,
                        "trl": trl,
                        "speed_ratio": ours["pairs_per_s"] / trl["pairs_per_s"],
                        "memory_ratio": ours["peak_rss_mb"] / trl["peak_rss_mb"],
                    }
                )
    return results

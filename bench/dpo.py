"""DPO training speed and memory: rlhf-studio (through the DeepSpeed launcher, one rank, ZeRO 0) against TRL 1.16's
DPOTrainer (a bench-only dependency that `make bench` installs) on the same model and the same pairs, token for
token, in fp32 and bf16, on two shapes of data:

- ranking: K = 4 responses per prompt and all C(4, 2) = 6 pairs of each ranking, as annotation produces them.
  rlhf-studio keeps a ranking's pairs in one batch and runs each distinct response once (8 forward rows for 12
  pairs); TRL trains them as independent pairs (24 rows).
- independent: every pair has its own prompt and two responses (24 rows for 12 pairs on both sides).

Every sequence is the chat-templated prompt (exactly 64 tokens) + the response + EOS (exactly 64 tokens), so
nothing is truncated and both trainers see the same ids (bench/trl_dpo.py checks TRL's tokenisation against them).
Matched settings: sigmoid loss, beta 0.1, 12 pairs per step, lr 1e-6 with linear decay and no warm-up, AdamW
without weight decay, gradient clipping 1.0, dropout off, gradient checkpointing off, one process, the reference's
log-probs computed once before training (TRL: precompute_ref_log_probs=True, in batches of 12 pairs; rlhf-studio:
once per distinct sequence, 24 sequences at a time), no evaluation. bf16 is each trainer's own: DeepSpeed's bf16
weights for rlhf-studio, autocast over fp32 weights for TRL (`bf16=True`). Not matched, as neither has a switch:
TRL 1.16 always scores through its fused LM head (the completion tokens' log-probs in vocabulary tiles, never the
whole logits; on a CPU its torch fallback, Triton being GPU-only); rlhf-studio takes a float32 log-softmax of the
whole logits of each distinct sequence.
Metric: the median over the steps after the first WARMUP of pairs per step / step time (from one step's end to the
next, each trainer's bookkeeping included), and the training process's peak RSS."""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.fair import PRECISION, peer_env

ROOT = Path(__file__).resolve().parent.parent
PROMPT_TOKENS, RESPONSE_TOKENS, BATCH, K, WARMUP = 64, 64, 12, 4, 4
LENGTH = PROMPT_TOKENS + RESPONSE_TOKENS
SHAPES = ("ranking", "independent")
WORDS = "the a river stone cloud green quick music paper light window garden simple answer because".split()


def fixed_length_response(rng: random.Random, tokenizer, n_tokens: int = RESPONSE_TOKENS) -> str:
    """Random words whose tokens, EOS included, number exactly n_tokens (a word that overshoots starts over)."""
    words: list[str] = []
    while True:
        words.append(rng.choice(WORDS))
        n = len(tokenizer(" ".join(words) + tokenizer.eos_token, add_special_tokens=False)["input_ids"])
        if n == n_tokens:
            return " ".join(words)
        if n > n_tokens:
            words = []


def make_pairs(tokenizer, n_pairs: int, shape: str, seed: int = 0) -> list[dict]:
    """n_pairs rows of (prompt, chosen, rejected, margin, ranking_id): n_pairs / 6 rankings of K = 4 responses
    (every pair of each), or n_pairs prompts with two responses each."""
    from bench.ppo import fixed_length_prompts

    rng = random.Random(seed)
    per_prompt = K if shape == "ranking" else 2
    prompts = fixed_length_prompts(tokenizer, n_pairs // (per_prompt * (per_prompt - 1) // 2), PROMPT_TOKENS)
    rows = []
    for i, prompt in enumerate(prompts):
        responses = [fixed_length_response(rng, tokenizer) for _ in range(per_prompt)]
        rows += [
            {"prompt": prompt, "chosen": responses[a], "rejected": responses[b], "margin": b - a, "ranking_id": i}
            for a in range(per_prompt)
            for b in range(a + 1, per_prompt)
        ]
    return rows


def steady_pairs_per_s(step_ends: list[float]) -> float:
    """Median pairs/s over the steps after the first WARMUP: step i takes step_ends[i] - step_ends[i - 1]."""
    durations = [b - a for a, b in zip(step_ends[WARMUP - 1 :], step_ends[WARMUP:], strict=False)]
    return BATCH / statistics.median(durations)


def _ours(tmp: Path, model: str, name: str, pairs_file: Path, dtype: str, zero_stage: int = 0) -> dict:
    from app.jobs.training import follow, prepare_pairs_run
    from training.dpo.config import DPOConfig
    from training.launcher import launch
    from training.registry import step_rows
    from training.runs import read_metrics

    cfg = DPOConfig(
        model=model,
        loss="sigmoid",
        beta=0.1,
        batch_pairs=BATCH,
        lr=1e-6,
        lr_schedule="linear",
        epochs=1,
        max_length=LENGTH,
        group_by_ranking=True,
        eval_fraction=0.0,
        dtype=dtype,
        gradient_checkpointing=False,
        zero_stage=zero_stage,
    )
    run = prepare_pairs_run(str(tmp / f"{name}.duckdb"), cfg, tmp / "runs", str(pairs_file))
    status = follow(run, launch("dpo", run), poll_s=2.0)
    if status.get("state") != "finished":
        raise RuntimeError(f"rlhf-studio DPO run failed: {status.get('error')} (see {run / 'train.log'})")
    rows = read_metrics(run)
    steps = step_rows("dpo", rows)
    final = next(r for r in rows if r.get("event") == "final")
    out = {
        "pairs_per_s": steady_pairs_per_s([r["time"] for r in steps]),
        "peak_rss_mb": final["perf/peak_rss_mb"],
        "steps": len(steps),
        "precision": PRECISION[dtype]["rlhf_studio"],
    }
    if "perf/peak_gpu_mb" in final:
        out["peak_gpu_mb"] = final["perf/peak_gpu_mb"]
    return out


def _trl(tmp: Path, model: str, name: str, data: dict, pad_token: str, dtype: str) -> dict:
    from training.models import resolve_model

    spec = {
        "model": str(resolve_model(model)),
        "pad_token": pad_token,
        "dtype": dtype,
        "batch": BATCH,
        "max_length": LENGTH,
        "out": str(tmp / f"trl-{name}"),
        **data,
    }
    spec_file = tmp / f"trl-{name}.json"
    spec_file.write_text(json.dumps(spec))
    env = peer_env({**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    env["HF_DATASETS_CACHE"] = str(tmp / "hf-datasets")  # its reference log-probs' cache goes with the run
    proc = subprocess.run(
        [sys.executable, "-m", "bench.trl_dpo", str(spec_file)], capture_output=True, text=True, cwd=ROOT, env=env
    )
    if proc.returncode != 0:
        raise RuntimeError(f"TRL DPO failed: {proc.stderr.strip().splitlines()[-3:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "pairs_per_s": steady_pairs_per_s(out["step_ends"]),
        "peak_rss_mb": out["peak_rss_mb"],
        "steps": len(out["step_ends"]),
        "mixed_precision": out["mixed_precision"],
        "precision": PRECISION[dtype]["trl"],
    }


def run(
    n_pairs: int = 192,
    dtypes: tuple[str, ...] = ("bf16", "fp32"),
    shapes: tuple[str, ...] = SHAPES,
    model: str = "default",
) -> list[dict]:
    """One row per (shape, dtype): both trainers' pairs/s and peak RSS, and their ratios."""
    from transformers import AutoTokenizer

    from training.models import pick_pad_token, resolve_model
    from training.pairwise.pairs import PairEncoder

    if n_pairs % BATCH or n_pairs // BATCH <= WARMUP + 1:
        raise ValueError(f"n_pairs must be a multiple of {BATCH} with more than {WARMUP + 1} steps")
    tok = AutoTokenizer.from_pretrained(resolve_model(model))
    pick_pad_token(tok)
    enc = PairEncoder(tok, LENGTH)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-dpo-") as d:
        tmp = Path(d)
        for shape in shapes:
            rows = make_pairs(tok, n_pairs, shape)
            pairs_file = tmp / f"pairs-{shape}.jsonl"
            pairs_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
            # plain text, not messages: the prompt already carries the chat template, as PairEncoder renders it
            data = {"prompt": [enc.prompt_text(r["prompt"]) for r in rows], "expected": []}
            data |= {"chosen": [r["chosen"] for r in rows], "rejected": [r["rejected"] for r in rows]}
            for r in rows:  # the ids both trainers must see: the prompt's, then each response's (EOS included)
                p = enc.pair(r, 0.0)
                assert len(p.chosen) == len(p.rejected) == LENGTH and not p.truncated
                assert p.chosen_start == p.rejected_start == PROMPT_TOKENS
                data["expected"].append(
                    [p.chosen[:PROMPT_TOKENS], p.chosen[PROMPT_TOKENS:], p.rejected[PROMPT_TOKENS:]]
                )
            for dtype in dtypes:
                name = f"{shape}-{dtype}"
                t = time.perf_counter()
                ours = _ours(tmp, model, name, pairs_file, dtype)
                ours["wall_s"] = time.perf_counter() - t
                t = time.perf_counter()
                trl = _trl(tmp, model, name, data, tok.pad_token, dtype)
                trl["wall_s"] = time.perf_counter() - t
                if not ours["steps"] == trl["steps"] == n_pairs // BATCH:  # a short batch would skew pairs per step
                    raise RuntimeError(f"{name}: {ours['steps']} and {trl['steps']} steps, not {n_pairs // BATCH}")
                results.append(
                    {
                        "shape": shape,
                        "dtype": dtype,
                        "pairs": n_pairs,
                        "rlhf_studio": ours,
                        "trl": trl,
                        "speed_ratio": ours["pairs_per_s"] / trl["pairs_per_s"],
                        "memory_ratio": ours["peak_rss_mb"] / trl["peak_rss_mb"],
                    }
                )
    return results


def main() -> None:
    import argparse

    p = argparse.ArgumentParser(description="DPO against TRL alone (make bench / bench.run --only dpo for the page)")
    p.add_argument("--model", default="default", help="'default' or a model folder (a tiny one for a smoke run)")
    p.add_argument("--pairs", type=int, default=192, help=f"pairs per run, a multiple of {BATCH}")
    p.add_argument("--dtypes", default="bf16,fp32")
    p.add_argument("--shapes", default=",".join(SHAPES))
    args = p.parse_args()
    rows = run(args.pairs, tuple(args.dtypes.split(",")), tuple(args.shapes.split(",")), args.model)
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

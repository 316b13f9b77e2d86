"""RLOO's step against PPO's, both rlhf-studio's, on the same rollout tokens (issue 28): PPO samples 16 prompts x 1
response, RLOO 4 prompts x k = 4; each prompt is 64 chat-templated tokens and each response exactly 64 new tokens
(min = max), so both steps sample, score and train on 16 sequences of 128 tokens. SmolLM2-135M-Instruct as actor and
reference, the seeded scalar-head model as reward (and PPO's critic), one pass in one minibatch of 16, ZeRO 0, one
process through the launcher, as the app starts it. Metric: median seconds per step over steps 3..8 and rank 0's
peak RSS; the speed ratio is PPO's seconds per step over RLOO's, the memory ratio RLOO's peak over PPO's (the aim:
1.3x faster at 0.75x the memory, one model and one optimizer fewer)."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from bench.ppo import NEW_TOKENS, PROMPT_TOKENS, STEPS, parts, workload
from bench.repeat import fig

SEQUENCES, K = 16, 4


def _shared(w: dict, dtype: str) -> dict:
    return {
        "actor": w["actor"],
        "reward": w["scalar"],
        "max_prompt_length": PROMPT_TOKENS,
        "max_new_tokens": NEW_TOKENS,
        "min_new_tokens": NEW_TOKENS,
        "max_steps": STEPS,
        "sample_every": 0,
        "dtype": dtype,
    }


def configs(w: dict, dtype: str) -> dict:
    """kind -> its config: the same tokens per step, one minibatch holding them all."""
    from training.ppo.config import PPOConfig
    from training.rloo.config import RLOOConfig

    ppo = PPOConfig(**_shared(w, dtype), critic=w["scalar"], generation_batch_size=SEQUENCES, minibatch_size=SEQUENCES)
    rloo = RLOOConfig(**_shared(w, dtype), k=K, generation_batch_size=SEQUENCES // K, minibatch_size=SEQUENCES)
    return {"ppo": ppo, "rloo": rloo}


def run_one(kind: str, cfg, prompts: str, tmp: Path) -> dict:
    """One run through the launcher: median s/step over steps 3..8, its profile, peak RSS and per-model MB."""
    from app.jobs.training import follow, prepare_run
    from training.launcher import launch
    from training.registry import step_rows
    from training.runs import read_metrics

    run = prepare_run(str(tmp / f"{kind}-{cfg.dtype}.duckdb"), cfg, tmp / "runs", prompts)
    status = follow(run, launch(kind, run), poll_s=2.0)
    if status.get("state") != "finished":
        raise RuntimeError(f"{kind} run failed: {status.get('error')} (see {run / 'train.log'})")
    rows = step_rows(kind, read_metrics(run))
    final = next(r for r in read_metrics(run) if r.get("event") == "final")
    window = rows[2:STEPS]
    return {
        "s_per_step": statistics.median(r["perf/step_s"] for r in window),
        "peak_rss_mb": final["perf/peak_rss_mb"],
        "parts": parts(window),
        "memory": {
            k.removeprefix("memory/").removesuffix("_mb"): v for k, v in final.items() if k.startswith("memory/")
        },
    }


def run(dtypes: tuple[str, ...] = ("bf16",)) -> list[dict]:
    """One row per dtype: PPO, then RLOO, on the same prompts file."""
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-rloo-") as d:
        tmp = Path(d)
        w = workload(tmp)
        for dtype in dtypes:
            by_kind = {kind: run_one(kind, cfg, w["prompts"], tmp) for kind, cfg in configs(w, dtype).items()}
            ppo, rloo = by_kind["ppo"], by_kind["rloo"]
            results.append(
                {
                    "dtype": dtype,
                    "ppo": ppo,
                    "rloo": rloo,
                    "speed_ratio": ppo["s_per_step"] / rloo["s_per_step"],
                    "memory_ratio": rloo["peak_rss_mb"] / ppo["peak_rss_mb"],
                }
            )
    return results


def table(rows: list[dict]) -> list[str]:
    """The markdown rows docs/benchmarks.md shows (bench/report.py)."""
    out = [
        "| dtype | trainer | prompts x responses | s/step | peak MB | models' MB (weights + optimizer) |",
        "|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        for kind, shape in (("ppo", f"{SEQUENCES} x 1"), ("rloo", f"{SEQUENCES // K} x {K}")):
            x = r[kind]
            out.append(
                f"| {r['dtype']} | {kind.upper()} | {shape} | {fig(r, '{:.2f}', kind, 's_per_step')} | "
                f"{x['peak_rss_mb']:.0f} | "
                f"{sum(x['memory'].values()):.0f} |"
            )
        out.append(
            f"| {r['dtype']} | ratio | | {fig(r, '{:.2f}x', 'speed_ratio')} faster | "
            f"{r['memory_ratio']:.2f}x the memory | |"
        )
    return out

"""Sampling throughput on the default model: K = 4 samples of exactly 64 new tokens for 16 prompts.

Compared in one run, all through the same Sampler:
- one `generate` call per response (batch 1), the naive baseline (timed on the first 4 prompts' 16 responses);
- one call per prompt (its K samples together);
- all 16 prompts x K in one call (what `rlhf sample` does), in fp32 and bf16.
min_new_tokens = max_new_tokens = 64 makes every row generate the same number of tokens; temperature 1.0 and
top_p 1.0 are the peers' fixed workload (shared/research/peer_benchmarks.md)."""

from __future__ import annotations

import time

from annotation.actions import example_prompts_path
from training.generation import Sampler, SamplingConfig

K, NEW_TOKENS, N_PROMPTS = 4, 64, 16


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(model: str = "default") -> list[dict]:
    prompts = example_prompts_path().read_text().splitlines()[:N_PROMPTS]
    rows = []
    for dtype in ("fp32", "bf16"):
        config = SamplingConfig(
            model=model, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, dtype=dtype, temperature=1.0, top_p=1.0
        )
        sampler = Sampler(config)
        sampler(prompts[:1], K, 0)  # warm-up
        cases = {"all prompts in one call": lambda s=sampler: s(prompts, K, 0)}
        if dtype == "fp32":
            cases = {
                "one call per response": lambda s=sampler: [s([p], 1, j) for p in prompts[:4] for j in range(K)],
                "one call per prompt": lambda s=sampler: [s([p], K, 0) for p in prompts[:4]],
                **cases,
            }
        for name, fn in cases.items():
            seqs = K * (N_PROMPTS if name == "all prompts in one call" else 4)
            seconds = _timed(fn)
            rows.append(
                {
                    "case": name,
                    "dtype": dtype,
                    "sequences": seqs,
                    "seconds": seconds,
                    "tokens_per_s": seqs * NEW_TOKENS / seconds,
                }
            )
    base = rows[0]["tokens_per_s"]
    for r in rows:
        r["speedup_vs_per_response"] = r["tokens_per_s"] / base
    return rows

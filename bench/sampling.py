"""Sampling throughput on the default model: K = 4 samples of exactly 64 new tokens for 16 prompts.

Compared in one run, through the product's samplers:
- transformers' generate (the fallback engine): one call per response (batch 1), the naive baseline (timed on the
  first 4 prompts' 16 responses); one call per prompt (its K samples together); all 16 prompts x K in one call (what
  `rlhf sample` does), in fp32 and bf16;
- vLLM (the default engine where it is installed): all 16 prompts x K in one call, in fp32 and bf16, its engine's
  start timed apart.
min_new_tokens = max_new_tokens = 64 makes every row generate the same number of tokens; temperature 1.0 and
top_p 1.0 are the peers' fixed workload (shared/research/peer_benchmarks.md)."""

from __future__ import annotations

import time

from annotation.actions import example_prompts_path
from training.sampling.generation import SamplingConfig, open_sampler
from training.sampling.vllm_engine import vllm_installed

K, NEW_TOKENS, N_PROMPTS = 4, 64, 16


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run(model: str = "default") -> list[dict]:
    prompts = example_prompts_path().read_text().splitlines()[:N_PROMPTS]
    rows = []
    engines = ("hf", "vllm") if vllm_installed() else ("hf",)
    for engine in engines:
        for dtype in ("fp32", "bf16"):
            config = SamplingConfig(
                model=model,
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                dtype=dtype,
                temperature=1.0,
                top_p=1.0,
                engine=engine,
            )
            start = time.perf_counter()
            with open_sampler(config) as sampler:
                started = time.perf_counter() - start
                sampler(prompts[:1], K, 0)  # warm-up
                cases = {"all prompts in one call": lambda s=sampler: s(prompts, K, 0)}
                if dtype == "fp32" and engine == "hf":
                    cases = {
                        "one call per response": lambda s=sampler: [
                            s([p], 1, j) for p in prompts[:4] for j in range(K)
                        ],
                        "one call per prompt": lambda s=sampler: [s([p], K, 0) for p in prompts[:4]],
                        **cases,
                    }
                for name, fn in cases.items():
                    seqs = K * (N_PROMPTS if name == "all prompts in one call" else 4)
                    seconds = _timed(fn)
                    rows.append(
                        {
                            "engine": engine,
                            "case": name,
                            "dtype": dtype,
                            "sequences": seqs,
                            "seconds": seconds,
                            "tokens_per_s": seqs * NEW_TOKENS / seconds,
                            "engine_start_s": started,
                        }
                    )
    base = rows[0]["tokens_per_s"]
    hf = {r["dtype"]: r["tokens_per_s"] for r in rows if r["engine"] == "hf" and r["case"] == "all prompts in one call"}
    for r in rows:
        r["speedup_vs_per_response"] = r["tokens_per_s"] / base
        r["vs_hf_one_call"] = r["tokens_per_s"] / hf[r["dtype"]]
    return rows

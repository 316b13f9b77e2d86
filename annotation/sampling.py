"""`rlhf sample`: K responses for every prompt that has none yet.

The model runs with the database closed; each batch is written in its own short transaction, so the store stays
usable by the app while sampling runs, and an interrupted run continues where it stopped (prompts that already
have responses are skipped). The generator is passed in by the caller (the CLI or the app builds it from
training.sampling.generation), so this module never imports torch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from store.db import StoreRef, read, write
from store.errors import UserError
from store.prompts import pending_prompts
from store.responses import add_samples, sampled_prompts, samples_from


@dataclass
class SampleReport:
    prompts: int = 0
    responses: int = 0
    duplicates: int = 0
    empty: int = 0
    dtype: str = ""  # the dtype the sampler picked, and why
    engine: str = ""  # the engine that sampled (vllm or hf), and why

    def line(self) -> str:
        prompts = f"{self.prompts} prompt{'' if self.prompts == 1 else 's'}"
        dtype = f" in {self.dtype}" if self.dtype else ""
        engine = f" with {self.engine}" if self.engine else ""
        return (
            f"sampled {self.responses} responses for {prompts}{dtype}{engine} "
            f"({self.duplicates} identical to another sample, {self.empty} empty)"
        )


def sample_pending(
    db: StoreRef,
    generate: Callable,
    k: int,
    model_id: str,
    params: dict,
    batch_prompts: int = 16,
    seed: int = 0,
    limit: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SampleReport:
    """generate(prompts, k, seed) -> list of K results (with .text, .n_tokens, .finish_reason) per prompt."""
    if k < 2:
        raise UserError(f"--k must be at least 2 to rank responses, got {k}")
    with read(db) as con:
        todo = pending_prompts(con, limit)
    report = SampleReport()
    if progress:
        progress(0, len(todo))
    for start in range(0, len(todo), batch_prompts):
        batch = todo[start : start + batch_prompts]
        call_seed = seed + batch[0][0]
        outputs = generate([text for _, text in batch], k, call_seed)
        samples = samples_from([pid for pid, _ in batch], outputs, call_seed, params)
        with write(db) as con:
            # Another process may have sampled some of these meanwhile: keep the first responses only.
            have = sampled_prompts(con, [pid for pid, _ in batch])
            samples = [s for s in samples if s.prompt_id not in have]
            report.duplicates += add_samples(con, samples, model_id)
        report.prompts += len({s.prompt_id for s in samples})
        report.responses += len(samples)
        report.empty += sum(1 for s in samples if not s.text)
        if progress:
            progress(min(start + batch_prompts, len(todo)), len(todo))
    return report

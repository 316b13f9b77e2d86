"""`rlhf sample` and the app's Sample button: one function, so both sample the same way."""

from __future__ import annotations

from collections.abc import Callable

from annotation.sampling import SampleReport, sample_pending
from store.db import StoreRef
from training.sampling.generation import Sampler, VllmSampler


def run_sampling(
    db: StoreRef,
    sampler: Sampler | VllmSampler,
    k: int,
    limit: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SampleReport:
    config = sampler.config
    report = sample_pending(
        db,
        sampler,
        k=k,
        model_id=sampler.model_id,
        params=sampler.params(k),
        batch_prompts=config.batch_prompts,
        seed=config.seed,
        limit=limit,
        progress=progress,
    )
    report.dtype = sampler.dtype_line
    report.engine = sampler.engine_line
    return report

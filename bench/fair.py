"""What makes a peer's figures comparable with ours (issue 53): the same allocator settings in its process, both
sides' steps timed by the same wall clock, and each side's precision named exactly.

- Allocator: our ranks run with glibc's malloc tunables (training/launcher.py::MALLOC_TUNABLES); a peer's process
  gets the same ones (`peer_env`).
- Timing: a step is the wall-clock time between the ends of two steps, on both sides (`wall_step_s`): ours from the
  times of the metrics rows each step writes, TRL's from a callback at `on_step_end`.
- Precision: "bf16" is not one regime. Ours keeps bf16 weights and the optimizer's fp32 master copy (DeepSpeed's
  bf16); TRL's Trainer with `bf16=True` keeps fp32 weights and computes under bf16 autocast. The rows say so
  (`PRECISION`), and the page prints it beside every bf16 row."""

from __future__ import annotations

from collections.abc import Mapping

PRECISION = {
    "bf16": {
        "rlhf_studio": "bf16 weights, fp32 master copy in the optimizer",
        "trl": "fp32 weights, bf16 autocast",
    },
    "fp32": {"rlhf_studio": "fp32", "trl": "fp32"},
}


def peer_env(base: Mapping[str, str]) -> dict[str, str]:
    """A peer process's environment: `base` with the malloc tunables our ranks get (the peer's own last)."""
    from training.launcher import malloc_tunables

    return {**base, "TOKENIZERS_PARALLELISM": "false", "GLIBC_TUNABLES": malloc_tunables(base.get("GLIBC_TUNABLES"))}


def wall_step_s(start: float, step_ends: list[float]) -> list[float]:
    """Seconds each step took by the wall clock: from the previous step's end (the first: from `start`)."""
    bounds = [start, *step_ends]
    return [b - a for a, b in zip(bounds, bounds[1:], strict=False)]

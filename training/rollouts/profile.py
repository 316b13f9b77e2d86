"""Where a step's time goes: wall seconds per named part of it (the decode, each model's forward, each backward and
optimizer step), summed over the step. The PPO trainer writes them as `perf/part/<name>_s` in the step's metrics
row, and bench/ppo.py turns them into the profile table of docs/benchmarks.md.

On a CPU the parts cost nothing to time and are always on. On a GPU a part must first wait for the kernels queued
before it (else it times their launch), and that wait costs a little, so there they are on with RLHF_PROFILE=1."""

from __future__ import annotations

import contextlib
import os
import time
from collections import defaultdict

import torch


class Clock:
    def __init__(self, device: torch.device | str = "cpu", on: bool | None = None):
        device = torch.device(device)
        self.on = on if on is not None else device.type == "cpu" or os.environ.get("RLHF_PROFILE") == "1"
        self._sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self.parts: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def part(self, name: str):
        if not self.on:
            yield
            return
        self._sync()
        t = time.perf_counter()
        try:
            yield
        finally:
            self._sync()
            self.parts[name] += time.perf_counter() - t

    def take(self) -> dict[str, float]:
        """The parts timed since the last take, as metrics (perf/part/<name>_s), and a fresh start."""
        out = {f"perf/part/{k}_s": v for k, v in self.parts.items()}
        self.parts.clear()
        return out


OFF = Clock(on=False)  # times nothing: for the callers of score() outside a training step

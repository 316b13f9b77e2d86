"""The dtype a run or a sampler uses when none is named: `auto` picks bf16 where the hardware computes it natively
(a CUDA GPU with bf16, or a CPU with AVX-512 bf16 or AMX: about 2x fp32's speed there) and fp32 elsewhere, where
bf16 is emulated and slower. RLHF_DTYPE=fp32|bf16 pins what `auto` means (the test suite pins fp32, so its numbers
are the same on every CPU)."""

from __future__ import annotations

import os
from pathlib import Path

DTYPES = ("fp32", "bf16", "fp16")
# CPU flags (Linux /proc/cpuinfo) of native bf16 arithmetic.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> set[str]:
    try:
        text = Path(cpuinfo).read_text()
    except OSError:  # not Linux: no flags known, so fp32
        return set()
    line = next((x for x in text.splitlines() if x.startswith("flags")), "")
    return set(line.partition(":")[2].split())


def pick_dtype(cuda_bf16: bool | None, flags: set[str]) -> tuple[str, str]:
    """(dtype, why) for `auto`. cuda_bf16: None without a GPU, else whether it computes bf16."""
    if cuda_bf16 is not None:
        return ("bf16", "the GPU computes bf16") if cuda_bf16 else ("fp32", "the GPU has no bf16")
    native = [f for f in BF16_CPU_FLAGS if f in flags]
    if native:
        return "bf16", f"the CPU computes bf16 ({', '.join(native)})"
    return "fp32", "the CPU has no native bf16 (AVX-512 bf16 or AMX)"


def resolve_dtype(name: str) -> tuple[str, str]:
    """A configured dtype -> (the dtype used, why). Named dtypes stay as they are."""
    if name != "auto":
        return name, "as configured"
    pinned = os.environ.get("RLHF_DTYPE", "")
    if pinned:
        if pinned not in DTYPES:
            from training.models import ModelError

            raise ModelError(f"RLHF_DTYPE must be fp32, bf16 or fp16, got {pinned}")
        return pinned, "auto, pinned by RLHF_DTYPE"
    import torch

    cuda = torch.cuda.is_bf16_supported() if torch.cuda.is_available() else None
    dtype, why = pick_dtype(cuda, cpu_flags())
    return dtype, f"auto: {why}"


def check_dtype(name: str, allowed: tuple[str, ...] = DTYPES) -> None:
    if name != "auto" and name not in allowed:
        raise ValueError(f"dtype must be auto, {', '.join(allowed[:-1])} or {allowed[-1]}, got {name}")


def with_resolved_dtype(cfg):
    """A config dataclass with its `auto` dtype decided, and the line that says what was picked and why."""
    import dataclasses

    dtype, why = resolve_dtype(cfg.dtype)
    return dataclasses.replace(cfg, dtype=dtype), f"dtype {dtype} ({why})"

"""`auto` dtypes: bf16 where the hardware computes it natively, fp32 elsewhere, and every entry point says which."""

import json

import pytest

from training.precision import check_dtype, cpu_flags, pick_dtype, resolve_dtype, with_resolved_dtype


@pytest.mark.parametrize(
    "cuda_bf16, flags, dtype",
    [
        (None, {"avx2", "avx512f", "avx512_bf16"}, "bf16"),  # Zen 4 / Cooper Lake and later
        (None, {"avx2", "amx_bf16", "amx_tile"}, "bf16"),  # Sapphire Rapids
        (None, {"avx2", "avx512f"}, "fp32"),  # AVX-512 without bf16: bf16 would be emulated
        (None, set(), "fp32"),  # no /proc/cpuinfo (not Linux)
        (True, set(), "bf16"),  # Ampere and later
        (False, {"avx512_bf16"}, "fp32"),  # a GPU without bf16 decides, not the host CPU
    ],
)
def test_pick_dtype(cuda_bf16, flags, dtype):
    assert pick_dtype(cuda_bf16, flags)[0] == dtype


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n")
    assert cpu_flags(info) == {"fpu", "avx2", "avx512_bf16"}
    assert cpu_flags(tmp_path / "missing") == set()


def test_auto_resolves_to_this_machine_unless_pinned(monkeypatch):
    monkeypatch.delenv("RLHF_DTYPE", raising=False)
    import torch

    expected = pick_dtype(torch.cuda.is_bf16_supported() if torch.cuda.is_available() else None, cpu_flags())[0]
    dtype, why = resolve_dtype("auto")
    assert dtype == expected and why.startswith("auto: ")
    assert resolve_dtype("fp32") == ("fp32", "as configured")
    monkeypatch.setenv("RLHF_DTYPE", "bf16")
    assert resolve_dtype("auto") == ("bf16", "auto, pinned by RLHF_DTYPE")
    assert resolve_dtype("fp32")[0] == "fp32"  # a named dtype is never overridden


def test_every_dtype_defaults_to_auto_and_auto_is_checked():
    from app.studies.demo_config import DemoConfig
    from training.ppo.config import PPOConfig
    from training.reward.config import RewardConfig
    from training.sampling.generation import SamplingConfig

    assert {c().dtype for c in (DemoConfig, SamplingConfig, PPOConfig, RewardConfig)} == {"auto"}
    check_dtype("auto")
    with pytest.raises(ValueError, match="dtype must be auto, fp32, bf16 or fp16, got fp8"):
        check_dtype("fp8")
    with pytest.raises(ValueError, match="got fp8"):
        RewardConfig(model="m", dtype="fp8").check()
    cfg, line = with_resolved_dtype(PPOConfig(reward="r"))
    assert cfg.dtype == "fp32" and line == "dtype fp32 (auto, pinned by RLHF_DTYPE)"  # conftest pins fp32


def test_the_sampler_says_which_dtype_it_picked_and_stores_it(db, tiny_model_dir, monkeypatch):
    from app.jobs.sampling import run_sampling
    from store.db import write
    from store.prompts import add_prompts
    from tests.conftest import query
    from training.sampling.generation import Sampler, SamplingConfig

    monkeypatch.setenv("RLHF_DTYPE", "bf16")
    with write(db) as con:
        add_prompts(con, ["Say hi"], source="test")
    sampler = Sampler(SamplingConfig(model=str(tiny_model_dir), max_new_tokens=4))
    assert sampler.config.dtype == "auto" and next(sampler.model.parameters()).dtype.is_floating_point
    assert str(next(sampler.model.parameters()).dtype) == "torch.bfloat16"
    report = run_sampling(db, sampler, k=2)
    assert " in bf16 (auto, pinned by RLHF_DTYPE) " in report.line()
    (params,) = {p for (p,) in query(db, "SELECT params FROM responses")}
    assert json.loads(params)["dtype"] == "bf16"  # what it ran in, not 'auto'

"""The default SmolLM2-135M-Instruct model, offline, through the CLI exactly as a user types it."""

import json
import subprocess
import sys

import pytest
import torch

from tests.conftest import query
from training.sampling.vllm_engine import CPU_ENGINE_PAYS_FROM, vllm_installed


def rlhf(db, *args):
    return subprocess.run(
        [sys.executable, "-m", "app.faces.cli", "--db", db, *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.integration
@pytest.mark.slow
def test_sample_four_responses_for_three_prompts(tmp_path, default_model_dir):
    db = str(tmp_path / "rlhf.duckdb")
    (tmp_path / "prompts.txt").write_text(
        "What is the capital of France?\nGive me a tip for learning to cook.\nWhy do cats purr?\nName a planet.\n"
    )
    assert rlhf(db, "init").returncode == 0
    assert rlhf(db, "prompts", "add", str(tmp_path / "prompts.txt")).stdout.strip() == (
        "prompts: 4 added, 0 already in the store"
    )
    r = rlhf(db, "sample", "--k", "4", "--limit", "3", "--max-new-tokens", "32")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().startswith("sampled 12 responses for 3 prompts")
    if vllm_installed() and not torch.cuda.is_available():  # 12 sequences do not pay for vLLM's start on a CPU
        assert f"with hf (auto: 12 sequences, fewer than the {CPU_ENGINE_PAYS_FROM} from which" in r.stdout
    rows = query(db, "SELECT prompt_id, text, model_id, params, seed, n_tokens, finish_reason FROM responses")
    assert len(rows) == 12
    assert sorted({r[0] for r in rows}) == [1, 2, 3]  # the 4th prompt waits for the next run
    assert all(r[1].strip() for r in rows)
    assert {r[2] for r in rows} == {"default:SmolLM2-135M-Instruct"}
    params = json.loads(rows[0][3])
    assert params == {
        "temperature": 0.8,
        "top_p": 0.95,
        "top_k": 0,
        "max_new_tokens": 32,
        "min_new_tokens": 1,
        "batch_prompts": 16,
        "dtype": "fp32",
        "seed": 0,
        "engine": "vllm" if vllm_installed() and torch.cuda.is_available() else "hf",
        "k": 4,
    }
    assert {r[4] for r in rows} == {1}  # one generate call for all three prompts: seed 0 + first prompt id
    assert all(0 < r[5] <= 32 and r[6] in ("eos", "length") for r in rows)
    # an instruct model answers the capital question; sampled, so most (not all) samples must say Paris
    paris = [r[1] for r in rows if r[0] == 1 and "Paris" in r[1]]
    assert len(paris) >= 2
    # resumable: the next run samples only the prompt left, on the engine asked for by name whatever the job's size
    # (vLLM loads SmolLM2, head size 64, where it is installed), which says so
    engine = "vllm" if vllm_installed() else "hf"
    r = rlhf(db, "sample", "--k", "4", "--max-new-tokens", "32", "--engine", engine)
    assert r.stdout.strip().startswith("sampled 4 responses for 1 prompt ")
    assert f"with {engine} (as configured)" in r.stdout
    assert json.loads(query(db, "SELECT params FROM responses WHERE prompt_id = 4")[0][0])["engine"] == engine


def test_the_converted_copy_is_named_by_the_files_content_not_its_path_or_time(tmp_path):
    import os
    import shutil

    from training.models import cache_key

    a = tmp_path / "venv-a" / "smollm2.gguf"
    a.parent.mkdir()
    a.write_bytes(bytes(range(256)) * 12_000)  # 3 MB: a head, a middle and a tail of 1 MiB each
    b = tmp_path / "venv-b" / "smollm2.gguf"  # the same package in another venv, installed later
    b.parent.mkdir()
    shutil.copy(a, b)
    os.utime(b, ns=(1, 1))
    assert cache_key(a) == cache_key(b)
    data = bytearray(a.read_bytes())
    for where in (0, len(data) - 1):  # a change to the header or to the last tensor is another file
        changed = data.copy()
        changed[where] ^= 1
        b.write_bytes(changed)
        assert cache_key(b) != cache_key(a)
    b.write_bytes(data + b"\0")  # and so is another size
    assert cache_key(b) != cache_key(a)

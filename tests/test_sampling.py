"""Sampling with a real (tiny, random) model: K per prompt in one call, parameters stored, resume, duplicates."""

import json

import pytest

from annotation.sampling import sample_pending
from store.db import write
from store.errors import UserError
from store.prompts import add_prompts
from tests.conftest import query, store_rows
from training.models import ModelError
from training.sampling.generation import Sampler, SamplingConfig


def _add(db, texts):
    with write(db) as con:
        add_prompts(con, texts, "test")


@pytest.fixture(scope="module")
def sampler(tiny_model_dir):
    return Sampler(SamplingConfig(model=str(tiny_model_dir), max_new_tokens=8, batch_prompts=2))


def test_k_samples_per_prompt_with_parameters(db, sampler):
    _add(db, [f"prompt {i}" for i in range(5)])
    calls = []

    def generate(prompts, k, seed):
        calls.append((len(prompts), k))
        return sampler(prompts, k, seed)

    config = sampler.config
    report = sample_pending(db, generate, k=3, model_id=sampler.model_id, params=config.params(3), batch_prompts=2)
    # 5 prompts, 2 per call: calls of 2, 2 and 1 prompts, each asking for all 3 samples at once
    assert calls == [(2, 3), (2, 3), (1, 3)]
    assert report.prompts == 5 and report.responses == 15
    rows = query(db, "SELECT prompt_id, position, model_id, params, seed, n_tokens, finish_reason FROM responses")
    assert sorted((r[0], r[1]) for r in rows) == [(p, j) for p in range(1, 6) for j in range(3)]
    pid, _, model, params, seed, n_tokens, finish = rows[0]
    params = json.loads(params)
    assert model == str(sampler.config.model) and params["k"] == 3 and params["temperature"] == 0.8
    assert params["max_new_tokens"] == 8 and params["top_p"] == 0.95
    # the seed of a call is the base seed + the id of its first prompt
    assert {(r[0], r[4]) for r in rows} == {(1, 1), (2, 1), (3, 3), (4, 3), (5, 5)}
    assert all(1 <= r[5] <= 8 and r[6] in ("eos", "length") for r in rows)


def test_interrupted_run_continues(db, sampler):
    _add(db, ["a", "b", "c"])
    args = dict(k=2, model_id="m", params={}, batch_prompts=1)
    first = sample_pending(db, sampler, limit=1, **args)
    assert first.prompts == 1
    second = sample_pending(db, sampler, **args)
    assert second.prompts == 2  # the sampled prompt is skipped
    assert query(db, "SELECT prompt_id, count(*) FROM responses GROUP BY 1 ORDER BY 1") == [(1, 2), (2, 2), (3, 2)]
    assert sample_pending(db, sampler, **args).prompts == 0


def test_identical_samples_are_flagged(db, tiny_model_dir):
    # top_k=1 leaves one token to sample from: every sample of a prompt is the same text
    same = Sampler(SamplingConfig(model=str(tiny_model_dir), max_new_tokens=6, top_k=1))
    _add(db, ["x", "y"])
    report = sample_pending(db, same, k=4, model_id="m", params={})
    assert report.duplicates == 6  # 3 repeats of the first sample, for each of 2 prompts
    rows = query(db, "SELECT prompt_id, position, duplicate_of FROM responses ORDER BY response_id")
    first = {p: rid for rid, (p, pos, dup) in enumerate(rows, 1) if pos == 0}
    assert all(dup == (None if pos == 0 else first[p]) for p, pos, dup in rows)


def test_k_below_two_and_greedy_are_refused(db, tiny_model_dir, sampler):
    with pytest.raises(UserError, match="--k must be at least 2"):
        sample_pending(db, sampler, k=1, model_id="m", params={})
    with pytest.raises(ModelError, match="never decodes greedily"):
        Sampler(SamplingConfig(model=str(tiny_model_dir), temperature=0))


def test_chat_template_is_applied(sampler):
    text = sampler.chat_prompt("Hello?")
    assert text.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nHello?<|im_end|>" in text


BAD_MODELS = [
    ("/no/such/dir", "is not a folder"),
    (".", "has no config.json"),
    ("garbage", "has no model.safetensors"),
]


@pytest.mark.parametrize("ref, message", BAD_MODELS)
def test_model_path_that_is_not_a_model(cli, db, tmp_path, ref, message):
    if ref == "garbage":
        (tmp_path / "garbage").mkdir()
        (tmp_path / "garbage" / "config.json").write_text('{"model_type": "llama"}')
        ref = str(tmp_path / "garbage")
    (tmp_path / "p.txt").write_text("hello\n")
    cli("prompts", "add", str(tmp_path / "p.txt"))
    before = store_rows(db)
    code, _, err = cli("sample", "--model", ref)
    assert code == 1 and err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert store_rows(db) == before

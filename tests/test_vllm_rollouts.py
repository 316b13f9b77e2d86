"""PPO and RLOO with vLLM rollouts (training/sampling/rollout_engine.py): the engine beside the DeepSpeed actor
samples, and after every update the actor's new weights reach it. Checked by the trainers' own probe: after each sync
the engine's next-token log-probs equal the actor's forward (fp32, to 1e-4) while the actor moves away from its start.
On a tiny talker with head size 32 (vLLM's CPU kernels take 32 and up)."""

import json

import pytest
import torch

from tests.builders import ppo, rows_of, steps_of
from training.sampling.vllm_engine import vllm_installed

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not vllm_installed(), reason="vLLM is not installed (make installs it)"),
]


@pytest.fixture(scope="module")
def talker32(tmp_path_factory):
    from training.tiny import build_talking_model

    return build_talking_model(tmp_path_factory.mktemp("talker32"), n_words=48, eos_rate=0.15, heads=2)


def test_ppo_samples_with_vllm_and_every_update_reaches_it(tmp_path, talker32, liked_rm, prompts_file):
    flags = ["--max-steps", "3", "--actor-lr", "3e-3", "--dtype", "fp32", "--rollout-engine", "vllm"]
    flags += ["--min-new-tokens", "2"]
    run = ppo(tmp_path, talker32, liked_rm, prompts_file, *flags)
    start = next(r for r in rows_of(run) if r.get("event") == "start")
    assert start["rollout_engine"] == "vllm (as configured)"
    steps = steps_of(run)
    assert sorted(steps) == [1, 2, 3]
    for row in steps.values():
        assert row["rollout/engine_logprob_gap"] < 1e-4  # the engine holds the actor's weights of that step
        assert row["rollout/weight_sync_mb"] > 0 and row["perf/part/weight_sync_s"] > 0
    assert steps[1]["reward/kl"] == pytest.approx(0.0, abs=1e-3)  # the first rollout: actor == reference
    # the actor moved, so each later sync sent new weights (and the gaps above say they arrived)
    from safetensors.torch import load_file

    start, end = load_file(str(talker32 / "model.safetensors")), load_file(str(run / "actor" / "model.safetensors"))
    assert any(not torch.equal(start[k], end[k]) for k in start)
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert all(s["response"] for s in samples)  # EOS held back at the first token (--min-new-tokens 2)

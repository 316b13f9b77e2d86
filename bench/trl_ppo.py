"""TRL 0.29.1's `trl.experimental.ppo.PPOTrainer` on the bench/ppo.py workload, run by bench/ppo.py with the
bench-only venv's python (.venv-trl029). Prints one JSON line: seconds per step, generation seconds per step,
peak RSS. The fixed shape: exactly 64 new tokens (no stop token, so `generate` never stops early) on prompts of
64 tokens. The default shape (spec "new_tokens" and "stop_at_eos"): prompts of mixed length, up to 128 new tokens,
EOS ends a response (TRL's `stop_token="eos"`), as rlhf-studio's defaults do."""

import json
import resource
import sys
import time


def time_generation(ppo_trainer) -> tuple[list[float], list[int]]:
    """Wraps TRL's batch_generation: (seconds of each call, decode steps of each call, to the last row's EOS)."""
    gen_times: list[float] = []
    decoded: list[int] = []
    original = ppo_trainer.batch_generation

    def timed_generation(model, queries, *args, **kwargs):
        t = time.perf_counter()
        out = original(model, queries, *args, **kwargs)
        gen_times.append(time.perf_counter() - t)
        decoded.append(out[0].shape[1] - queries.shape[1])
        return out

    ppo_trainer.batch_generation = timed_generation
    return gen_times, decoded


def prompt_ids(spec: dict, tok, fixed: bool) -> list[list[int]]:
    """The prompts, chat-templated and tokenised; the fixed shape's are exactly 64 tokens."""
    texts = [
        tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in spec["prompt_list"]
    ]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    assert not fixed or all(len(x) == 64 for x in ids), sorted({len(x) for x in ids})
    return ids


def load_models(spec: dict, pad_id: int) -> tuple:
    """(policy, reference, value, reward): the actor twice and the scalar-head model twice."""
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    policy = AutoModelForCausalLM.from_pretrained(spec["actor"])
    ref = AutoModelForCausalLM.from_pretrained(spec["actor"])
    value = AutoModelForSequenceClassification.from_pretrained(spec["scalar"], num_labels=1)
    reward = AutoModelForSequenceClassification.from_pretrained(spec["scalar"], num_labels=1)
    for m in (policy, ref, value, reward):
        m.config.pad_token_id = pad_id
    return policy, ref, value, reward


def ppo_args(config_class, spec: dict, fixed: bool):
    """TRL's PPOConfig for the workload: one process, one minibatch, one PPO epoch, sampling at T = 1."""
    return config_class(
        output_dir=spec["out"],
        per_device_train_batch_size=8,
        gradient_accumulation_steps=1,
        num_mini_batches=1,
        num_ppo_epochs=1,
        local_rollout_forward_batch_size=8,
        total_episodes=8 * spec["steps"],
        response_length=spec.get("new_tokens", 64),
        temperature=1.0,
        stop_token=None if fixed else "eos",
        learning_rate=1e-6,
        use_cpu=True,
        bf16=spec["dtype"] == "bf16",
        report_to=[],
        save_strategy="no",
        num_sample_generations=0,
        logging_steps=10**6,
        seed=0,
    )


def main(spec_path: str) -> None:
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl.experimental.ppo import PPOConfig, PPOTrainer, ppo_trainer

    spec = json.loads(open(spec_path).read())
    tok = AutoTokenizer.from_pretrained(spec["actor"])
    tok.pad_token = "<|endoftext|>"  # TRL needs pad != EOS
    fixed = not spec.get("stop_at_eos")
    data = Dataset.from_dict({"input_ids": prompt_ids(spec, tok, fixed)})
    policy, ref, value, reward = load_models(spec, tok.pad_token_id)

    gen_times, decoded = time_generation(ppo_trainer)
    step_ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            step_ends.append(time.perf_counter())

    args = ppo_args(PPOConfig, spec, fixed)
    trainer = PPOTrainer(
        args=args,
        processing_class=tok,
        model=policy,
        ref_model=ref,
        reward_model=reward,
        train_dataset=data,
        value_model=value,
        callbacks=[Clock()],
    )
    start = time.perf_counter()
    trainer.train()
    bounds = [start, *step_ends]
    print(
        json.dumps(
            {
                "step_s": [b - a for a, b in zip(bounds, bounds[1:], strict=False)],
                "gen_s": gen_times,
                "decoded": decoded,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])

"""TRL's DPOTrainer on bench/dpo.py's pairs, run in its own process by bench/dpo.py (peak memory is per process).
It gets the texts (the chat-templated prompt, each response; TRL appends EOS) and checks that its own tokenisation
gives exactly the ids rlhf-studio trains on. Prints one JSON line: each step's end time, peak RSS, the
accelerator's mixed precision (so a bf16 run that silently fell back to fp32 shows)."""

import json
import resource
import sys
import time


def main(spec_path: str) -> None:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import DPOConfig, DPOTrainer

    spec = json.loads(open(spec_path).read())
    tok = AutoTokenizer.from_pretrained(spec["model"])
    tok.pad_token = spec["pad_token"]
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(spec["model"], dtype=torch.float32)
    model.config.pad_token_id = tok.pad_token_id
    data = Dataset.from_dict({k: spec[k] for k in ("prompt", "chosen", "rejected")})
    step_ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            step_ends.append(time.perf_counter())

    args = DPOConfig(
        output_dir=spec["out"],
        per_device_train_batch_size=spec["batch"],
        num_train_epochs=1,
        learning_rate=1e-6,
        lr_scheduler_type="linear",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        loss_type=["sigmoid"],
        beta=0.1,
        max_length=spec["max_length"],
        precompute_ref_log_probs=True,  # like rlhf-studio: the reference once, before training, then not held
        logging_steps=10**6,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=spec["dtype"] == "bf16",
        fp16=False,
        gradient_checkpointing=False,
        disable_dropout=True,
        seed=0,
    )
    trainer = DPOTrainer(model=model, args=args, train_dataset=data, processing_class=tok, callbacks=[Clock()])
    seen = trainer.train_dataset
    got = [list(x) for x in zip(seen["prompt_ids"], seen["chosen_ids"], seen["rejected_ids"], strict=True)]
    if len(got) != len(spec["expected"]):
        sys.exit(f"TRL kept {len(got)} of {len(spec['expected'])} pairs")
    for i, (a, b) in enumerate(zip(got, spec["expected"], strict=True)):
        if a != b:
            sys.exit(f"TRL tokenised pair {i} differently from rlhf-studio: {a} != {b}")
    trainer.train()
    print(
        json.dumps(
            {
                "step_ends": step_ends,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "mixed_precision": str(trainer.accelerator.mixed_precision),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])

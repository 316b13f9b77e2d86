"""TRL's RewardTrainer on pre-tokenised pairs, run in its own process by bench/reward.py (peak memory is per
process). Prints one JSON line: pairs/s after the first 5 steps, peak RSS."""

import json
import resource
import sys
import time


def main(spec_path: str) -> None:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, TrainerCallback
    from trl import RewardConfig, RewardTrainer

    spec = json.loads(open(spec_path).read())
    tok = AutoTokenizer.from_pretrained(spec["model"])
    tok.pad_token = spec["pad_token"]
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(spec["model"], num_labels=1)
    model.config.pad_token_id = tok.pad_token_id
    data = Dataset.from_dict({"chosen_ids": spec["chosen"], "rejected_ids": spec["rejected"]})
    times = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            times.append(time.perf_counter())

    args = RewardConfig(
        output_dir=spec["out"],
        per_device_train_batch_size=spec["batch"],
        num_train_epochs=1,
        learning_rate=1e-5,
        logging_steps=10**6,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=spec["dtype"] == "bf16",
        gradient_checkpointing=False,
        max_length=None,
        disable_dropout=True,
    )
    RewardTrainer(model=model, args=args, train_dataset=data, processing_class=tok, callbacks=[Clock()]).train()
    steps = len(times) - 5
    print(
        json.dumps(
            {
                "pairs_per_s": steps * spec["batch"] / (times[-1] - times[4]),
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "steps": len(times),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])

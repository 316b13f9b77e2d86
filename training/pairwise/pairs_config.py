"""The settings every trainer on preference pairs shares (reward model, DPO): the data, the base model, the
optimiser and schedule, batches, DeepSpeed and precision, LoRA, evaluation and checkpoints. Each trainer's config
subclasses it, adds its own fields and may change a default (a field redeclared keeps its place in the flags)."""

from __future__ import annotations

from dataclasses import dataclass, field

from training.config_file import ConfigFile, positive_ints
from training.precision import check_dtype


@dataclass
class PairsConfig(ConfigFile):
    data: str = field(default="", metadata={"help": "snapshot folder (train/eval.parquet) or a pairs .jsonl/.parquet"})
    model: str = field(default="default", metadata={"help": "base model: 'default' or a local HF folder"})
    output_dir: str = field(default="", metadata={"help": "run folder (set by the launcher)"})
    epochs: int = field(default=1, metadata={"help": "passes over the training pairs"})
    max_steps: int = field(default=0, metadata={"help": "stop after this many optimizer steps (0 = all epochs)"})
    batch_pairs: int = field(default=8, metadata={"help": "pairs per rank per micro-batch"})
    grad_accum: int = field(default=1, metadata={"help": "micro-batches per optimizer step"})
    lr: float = field(default=1e-5, metadata={"help": "peak learning rate"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    warmup_steps: int = field(default=0, metadata={"help": "linear warm-up steps"})
    lr_schedule: str = field(default="cosine", metadata={"help": "cosine, linear or constant after warm-up"})
    max_length: int = field(
        default=512, metadata={"help": "tokens per prompt+response; longer ones lose prompt tokens"}
    )
    group_by_ranking: bool = field(
        default=True, metadata={"help": "keep all pairs of a ranking in one batch; each response is scored once"}
    )
    zero_stage: int = field(default=0, metadata={"help": "DeepSpeed ZeRO stage 0, 1, 2 or 3"})
    dtype: str = field(
        default="auto",
        metadata={"help": "auto (bf16 where the CPU or GPU computes it natively, else fp32), fp32, bf16, fp16 (GPU)"},
    )
    gradient_checkpointing: bool = field(default=False, metadata={"help": "trade compute for activation memory"})
    share_prompt: bool = field(
        default=True,
        metadata={"help": "run a prompt once for all its responses in a batch (not with checkpointing)"},
    )
    lora_rank: int = field(default=0, metadata={"help": "train LoRA adapters of this rank (0 = full fine-tuning)"})
    lora_alpha: float = field(default=16.0, metadata={"help": "LoRA scaling numerator (scale = alpha / rank)"})
    eval_every: int = field(default=0, metadata={"help": "evaluate every N steps (0 = only at the end)"})
    save_every: int = field(default=0, metadata={"help": "checkpoint every N steps (0 = only at the end)"})
    eval_fraction: float = field(default=0.1, metadata={"help": "share of prompts held out when data is a pairs file"})
    rounds: str = field(default="", metadata={"help": "train on these rounds' pairs, e.g. 2,3 (default: all)"})
    with_votes: bool = field(
        default=False, metadata={"help": "also train on the Compare tab's decided votes (a pair each)"}
    )
    min_gold_accuracy: float = field(
        default=0.0,
        metadata={"help": "leave out the pairs of annotators under this gold accuracy (0 = keep all; rlhf gold)"},
    )
    seed: int = field(default=0, metadata={"help": "seed for the data order and the split"})

    def check(self) -> None:
        check_dtype(self.dtype)
        if not 0 <= self.min_gold_accuracy <= 1:
            raise ValueError(f"min_gold_accuracy must be from 0 to 1, got {self.min_gold_accuracy}")
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage must be 0..3, got {self.zero_stage}")
        if self.lr_schedule not in ("cosine", "linear", "constant"):
            raise ValueError(f"lr_schedule must be cosine, linear or constant, got {self.lr_schedule}")
        if self.lora_rank and self.zero_stage == 3:
            raise ValueError("LoRA with ZeRO-3 is not supported yet; use ZeRO 0-2 with --lora-rank")
        round_numbers(self.rounds)
        if self.batch_pairs < 1 or self.grad_accum < 1 or self.max_length < 8:
            raise ValueError("batch_pairs and grad_accum must be >= 1 and max_length >= 8")


def round_numbers(text: str) -> list[int] | None:
    """'2,3' -> [2, 3]; '' -> None (every round). ValueError on anything but positive whole numbers."""
    return positive_ints(text, "rounds") if text.strip() else None

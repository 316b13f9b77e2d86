"""KTO settings: one dataclass, the source of `rlhf train-kto`'s flags, the app's form and every run's config.json.
Defaults follow TRL's KTOConfig (beta 0.1, desirable and undesirable weights 1, the KL reference point from
mismatched prompt-completion pairs), with the data options every trainer on a snapshot shares
(training/pairwise/pairs_config.py): here a "pair" of the batch size is one unpaired row."""

from __future__ import annotations

from dataclasses import dataclass, field

from training.pairwise.pairs_config import PairsConfig


@dataclass
class KTOConfig(PairsConfig):
    KIND = "kto"

    data: str = field(
        default="",
        metadata={"help": "snapshot folder, or an unpaired (prompt, completion, label) or pairs .jsonl/.parquet"},
    )
    model: str = field(default="default", metadata={"help": "SFT model the policy starts from: 'default' or a folder"})
    batch_pairs: int = field(default=8, metadata={"help": "unpaired rows per rank per micro-batch"})
    lr: float = field(default=1e-6, metadata={"help": "peak learning rate"})
    lr_schedule: str = field(default="linear", metadata={"help": "linear, cosine or constant after warm-up"})
    reference: str = field(default="", metadata={"help": "frozen reference model (default: the SFT model)"})
    beta: float = field(default=0.1, metadata={"help": "KTO's beta: how far the policy may move from the reference"})
    desirable_weight: float = field(default=1.0, metadata={"help": "weight of a thumbs-up row's loss (TRL's lambda_D)"})
    undesirable_weight: float = field(
        default=1.0, metadata={"help": "weight of a thumbs-down row's loss (TRL's lambda_U)"}
    )

    def check(self) -> None:
        super().check()
        if self.beta <= 0:
            raise ValueError(f"beta must be > 0, got {self.beta}")
        if self.desirable_weight <= 0 or self.undesirable_weight <= 0:
            raise ValueError("desirable_weight and undesirable_weight must be > 0")

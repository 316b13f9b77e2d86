"""DPO settings: one dataclass, the source of `rlhf train-dpo`'s flags, the app's form and every run's config.json.
Defaults follow TRL's DPOTrainer where it has one (beta 0.1, sigmoid loss, no label smoothing, linear decay), with
the reward model's data options (a snapshot, a pairs file, or the store) and its ranking-aware batches: the
settings every trainer on pairs shares are training/pairwise/pairs_config.py's."""

from __future__ import annotations

from dataclasses import dataclass, field

from training.pairwise.pairs_config import PairsConfig

LOSSES = ("sigmoid", "ipo")


@dataclass
class DPOConfig(PairsConfig):
    KIND = "dpo"

    model: str = field(default="default", metadata={"help": "SFT model the policy starts from: 'default' or a folder"})
    lr: float = field(default=1e-6, metadata={"help": "peak learning rate"})
    lr_schedule: str = field(default="linear", metadata={"help": "linear, cosine or constant after warm-up"})
    reference: str = field(default="", metadata={"help": "frozen reference model (default: the SFT model)"})
    loss: str = field(default="sigmoid", metadata={"help": "sigmoid (DPO) or ipo"})
    beta: float = field(default=0.1, metadata={"help": "DPO's beta (IPO's tau): how far the policy may move"})
    label_smoothing: float = field(default=0.0, metadata={"help": "share of labels assumed wrong (sigmoid loss)"})

    def check(self) -> None:
        super().check()
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be sigmoid or ipo, got {self.loss}")
        if self.beta <= 0:
            raise ValueError(f"beta must be > 0, got {self.beta}")
        if not 0 <= self.label_smoothing < 0.5:
            raise ValueError(f"label_smoothing must be in [0, 0.5), got {self.label_smoothing}")

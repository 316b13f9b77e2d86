"""Reward-model training settings: one dataclass, the source of the CLI flags, the app's form and the saved
`config.json` of every run (so any run can be launched again as it was). The settings every trainer on pairs
shares are training/pairwise/pairs_config.py's."""

from __future__ import annotations

from dataclasses import dataclass, field

from training.pairwise.pairs_config import PairsConfig


@dataclass
class RewardConfig(PairsConfig):
    KIND = "reward"
    seed: int = field(default=0, metadata={"help": "seed for the head, the data order and the split"})
    margin_scale: float = field(default=0.0, metadata={"help": "margin = scale x rank gap in the loss (0 = off)"})
    margin_from: str = field(
        default="rank",
        metadata={
            "help": "with margin_scale: 'rank' (the rank gap) or 'strength' (Llama 2's margin by the annotator's "
            "preference strength: 0, 1/3, 2/3, 1; pairs without one get 0)"
        },
    )
    center_coef: float = field(default=0.0, metadata={"help": "weight of the score-centring term (0 = off)"})
    ensemble: int = field(
        default=1,
        metadata={
            "help": "train N reward models in one run (seeds seed..seed+N-1, alternate halves of the training "
            "prompts; same held-out split), saved in RUN/members/0..N-1, member 0 also as RUN/model"
        },
    )
    member: int = field(default=0, metadata={"help": "the ensemble member this config trains", "internal": True})

    def check(self) -> None:
        super().check()
        if self.margin_from not in ("rank", "strength"):
            raise ValueError(f"margin_from must be rank or strength, got {self.margin_from}")
        if self.ensemble < 1 or not 0 <= self.member < self.ensemble:
            raise ValueError(f"ensemble must be >= 1 (got {self.ensemble}) and member in 0..ensemble-1")

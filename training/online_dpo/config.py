"""Online DPO settings (Guo et al. 2024; iterative DPO, Xiong et al. 2024): the fields every trainer on prompts
shares are training/rollouts/prompts_config.py's (its kl_ctl only shapes what the metrics call the KL penalty: here beta
anchors the policy to the reference); these are its own. Each step samples k responses per prompt from the current
policy, the reward model picks the best and the worst of each prompt, and DPO learns from those pairs. Defaults:
k = 4 (the paper's K of the demo's rankings too), beta = 0.1 (DPO's), every pair kept, one pass."""

from __future__ import annotations

from dataclasses import dataclass, field

from training.rollouts.prompts_config import PromptsConfig


@dataclass
class OnlineDPOConfig(PromptsConfig):
    KIND = "online_dpo"
    k: int = field(default=4, metadata={"help": "responses per prompt; the best and the worst make its pair"})
    beta: float = field(default=0.1, metadata={"help": "DPO's beta: how strongly the reference anchors the policy"})
    min_gap: float = field(
        default=0.0, metadata={"help": "a prompt gives a pair only if its best score beats its worst by more than this"}
    )
    update_epochs: int = field(default=1, metadata={"help": "passes over each step's pairs (1: on-policy)"})

    @property
    def sequences(self) -> int:
        """Sequences per rank per step: generation_batch_size prompts, k responses each."""
        return self.generation_batch_size * self.k

    @property
    def minibatch_size(self) -> int:
        """Every rank updates on all its pairs at once, once per pass, so ranks take the same optimizer steps
        however many pairs each kept."""
        return self.sequences

    def check(self) -> None:
        super().check()
        if self.k < 2:
            raise ValueError(f"k must be >= 2: a pair needs two responses to the same prompt, got {self.k}")
        if self.beta <= 0:
            raise ValueError(f"beta must be > 0, got {self.beta}")
        if self.min_gap < 0:
            raise ValueError(f"min_gap must be >= 0, got {self.min_gap}")
        if self.update_epochs < 1:
            raise ValueError("update_epochs must be >= 1")

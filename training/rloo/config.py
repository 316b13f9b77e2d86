"""RLOO settings (Ahmadian et al. 2024): the fields every trainer on prompts shares are
training/rollouts/prompts_config.py's; these are RLOO's own: k responses per prompt, the loss (PPO's clipped ratio or
plain REINFORCE) and the passes over each rollout. Defaults follow TRL's RLOOTrainer where it has one (k = 4 in the
paper's strongest setting, one pass)."""

from __future__ import annotations

from dataclasses import dataclass, field

from training.rollouts.prompts_config import PromptsConfig

LOSSES = ("clipped", "reinforce")
REWARDS = ("score", "win_fraction", "quantile")


@dataclass
class RLOOConfig(PromptsConfig):
    KIND = "rloo"
    k: int = field(default=4, metadata={"help": "responses per prompt; each is baselined by the other k - 1's reward"})
    loss: str = field(
        default="clipped", metadata={"help": "clipped (PPO's clipped ratio, token mean) or reinforce (plain)"}
    )
    reward_shape: str = field(
        default="score",
        metadata={
            "help": "score (the reward model's, clipped), win_fraction (each response's mean Bradley-Terry chance "
            "of beating the prompt's other k - 1) or quantile (its score's quantile among calibration_samples "
            "samples of the reference: InfAlign's calibrated reward); the last two are scale-free"
        },
    )
    calibration_samples: int = field(
        default=4, metadata={"help": "with reward_shape=quantile: reference samples per prompt each step"}
    )
    update_epochs: int = field(default=1, metadata={"help": "passes over each rollout batch (reinforce: 1)"})
    minibatch_size: int = field(default=8, metadata={"help": "sequences per rank per update micro-batch"})

    @property
    def sequences(self) -> int:
        """Sequences per rank per step: generation_batch_size prompts, k responses each."""
        return self.generation_batch_size * self.k

    @property
    def single_pass(self) -> bool:
        """One pass over one minibatch holding the whole rollout: the old log-probs are exactly those of the
        update's own forward, so the scoring forward of the actor is the update's (as single-pass PPO)."""
        return self.update_epochs == 1 and self.minibatch_size >= self.sequences

    def check(self) -> None:
        super().check()
        if self.k < 2:
            raise ValueError(f"k must be >= 2: the leave-one-out baseline needs another response, got {self.k}")
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be clipped or reinforce, got {self.loss}")
        if self.reward_shape not in REWARDS:
            raise ValueError(f"reward_shape must be score, win_fraction or quantile, got {self.reward_shape}")
        if self.calibration_samples < 1:
            raise ValueError(f"calibration_samples must be >= 1, got {self.calibration_samples}")
        if min(self.update_epochs, self.minibatch_size) < 1:
            raise ValueError("update_epochs and minibatch_size must be >= 1")
        if self.loss == "reinforce" and self.update_epochs != 1:
            raise ValueError("plain REINFORCE is on-policy: update_epochs must be 1 (use loss=clipped for more)")

"""PPO settings: one dataclass, the source of `rlhf train-ppo`'s flags, the app's form and every run's config.json.
The fields every trainer on prompts shares are training/rollouts/prompts_config.py's; these are PPO's own (the critic,
GAE, the PPO epochs over a buffer, the EMAs, PPO-ptx). Defaults follow DeepSpeed-Chat step 3 (reward clip 5, clip
ranges 0.2, gamma 1, lambda 0.95, one PPO epoch, critic learning rate 5e-6) except four: 32 prompts a rollout batch
(DS-Chat 8), advantages whitened per batch, the KL coefficient 0.05 (DS-Chat 0.1) and the actor's learning rate 2e-5
(DS-Chat 9.65e-6). Those four were chosen on earlier default-model demo trials whose results files did not record
their provenance and were removed (issue 53). The rest beyond DS-Chat is off by default."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from training.models import reward_folder
from training.rollouts.prompts_config import PromptsConfig


@dataclass
class PPOConfig(PromptsConfig):
    KIND = "ppo"
    RETIRED = {"watch_patience": "the alarm decides on checkpoint evaluations now (--watch-alpha)"}
    actor: str = field(
        default="default",
        metadata={"help": "starting policy: 'default', a local HF folder, or a PPO run (its actor: the next round)"},
    )
    reference: str = field(
        default="",
        metadata={"help": "KL anchor (default: the actor's start; a PPO run's actor keeps that run's reference)"},
    )
    keep_best: bool = field(
        default=False,
        metadata={"help": "RUN/actor = the checkpoint the held-out judge scores best (the last one in RUN/actor_last)"},
    )
    critic: str = field(default="", metadata={"help": "critic start: a reward run or HF folder (default: --reward)"})
    # PPO's own defaults of the shared settings (see the module's docstring; DeepSpeed-Chat's are 8, 9.65e-6 and 0.1)
    generation_batch_size: int = field(
        default=32,
        metadata={"help": "prompts per rank per rollout batch (fewer where the prompts do not fill one for each rank)"},
    )
    actor_lr: float = field(default=2e-5, metadata={"help": "actor learning rate"})
    # rollouts and updates
    whiten_advantages: bool = field(default=True, metadata={"help": "normalise advantages per batch"})
    generation_batches: int = field(default=1, metadata={"help": "rollout batches buffered before each update"})
    ppo_epochs: int = field(default=1, metadata={"help": "passes over each buffer of experience"})
    minibatch_size: int = field(default=8, metadata={"help": "sequences per rank per PPO micro-batch"})
    critic_lr: float = field(default=5e-6, metadata={"help": "critic learning rate"})
    # the PPO objective (DeepSpeed-Chat's constants)
    cliprange_value: float = field(default=0.2, metadata={"help": "value clip around the old values"})
    gamma: float = field(default=1.0, metadata={"help": "discount"})
    lam: float = field(default=0.95, metadata={"help": "GAE lambda"})
    # beyond DeepSpeed-Chat, off by default
    adaptive_kl: bool = field(default=False, metadata={"help": "adapt kl_ctl toward --kl-target (Ziegler et al.)"})
    kl_target: float = field(default=6.0, metadata={"help": "target KL (nats per sequence) of the adaptive control"})
    kl_horizon: int = field(default=10000, metadata={"help": "horizon of the adaptive KL controller"})
    ema_beta: float = field(default=0.0, metadata={"help": "keep an EMA of the actor (0 = off; DS-Chat uses 0.992)"})
    ref_ema_beta: float = field(
        default=0.0,
        metadata={
            "help": "after each step the reference moves toward the actor: beta ref + (1 - beta) actor (0 = off)"
        },
    )
    critic_lora_rank: int = field(default=0, metadata={"help": "LoRA rank for the critic (0 = full fine-tuning)"})
    reuse_rollout_logprobs: bool = field(
        default=True, metadata={"help": "fp32: old log-probs from the rollout's logits (saves an actor forward)"}
    )
    unsupervised_data: str = field(
        default="",
        metadata={"help": "PPO-ptx: a .txt/.jsonl of unlabelled text; an LM step on it follows each actor step"},
    )
    unsup_coef: float = field(default=27.8, metadata={"help": "PPO-ptx: weight of the LM loss (InstructGPT: 27.8)"})

    @property
    def single_pass(self) -> bool:
        """One PPO epoch over one minibatch holding the whole rollout (DeepSpeed-Chat's default shape): the old
        log-probs and values are exactly those of the update's own forward passes, so the scoring forwards of
        actor and critic are skipped and their training forwards serve both."""
        return (
            self.ppo_epochs == 1 and self.generation_batches == 1 and self.minibatch_size >= self.generation_batch_size
        )

    def check(self) -> None:
        super().check()
        if self.critic_lora_rank and self.zero_stage == 3:
            raise ValueError("LoRA with ZeRO-3 is not supported yet; use ZeRO 0-2 with LoRA")
        if min(self.generation_batches, self.ppo_epochs, self.minibatch_size) < 1:
            raise ValueError("batch sizes, generation_batches and ppo_epochs must be >= 1")
        if self.ema_beta and self.zero_stage == 3:
            raise ValueError("the EMA actor needs ZeRO 0-2 (its weights are not partitioned)")
        if not 0.0 <= self.ema_beta < 1.0:
            raise ValueError("ema_beta must be in [0, 1)")
        if not 0.0 <= self.ref_ema_beta < 1.0:
            raise ValueError("ref_ema_beta must be in [0, 1)")
        if self.ref_ema_beta and (self.zero_stage == 3 or self.actor_lora_rank):
            raise ValueError("the reference's EMA needs ZeRO 0-2 and a fully fine-tuned actor (no LoRA)")

    def resolved(self) -> PPOConfig:
        """The reward model's path (PromptsConfig.resolved), the critic's start (default: the reward model) and
        PPO-ptx's text file checked and made absolute; ModelError or DataError (ValueErrors) otherwise."""
        cfg = super().resolved()
        critic = reward_folder(self.critic) if self.critic else reward_folder(self.reward)
        cfg = dataclasses.replace(cfg, critic=str(critic.resolve()))
        if cfg.unsupervised_data:  # PPO-ptx's text: a bad file is one error line before the run exists
            from training.ppo.data import read_texts

            read_texts(cfg.unsupervised_data)
            cfg = dataclasses.replace(cfg, unsupervised_data=str(Path(cfg.unsupervised_data).resolve()))
        return cfg

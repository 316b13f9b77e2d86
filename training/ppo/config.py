"""PPO settings: one dataclass, the source of `rlhf train-ppo`'s flags, the app's form and every run's config.json.
Defaults follow DeepSpeed-Chat step 3 (kl_ctl 0.1, reward clip 5, clip ranges 0.2, gamma 1, lambda 0.95, one PPO
epoch, learning rates 9.65e-6 / 5e-6); everything beyond it is off by default."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

from training.config_file import ConfigFile
from training.precision import check_dtype


@dataclass
class PPOConfig(ConfigFile):
    KIND = "ppo"
    RETIRED = {"watch_patience": "the alarm decides on checkpoint evaluations now (--watch-alpha)"}
    # models and data
    actor: str = field(
        default="default",
        metadata={"help": "starting policy: 'default', a local HF folder, or a PPO run (its actor: the next round)"},
    )
    reference: str = field(
        default="",
        metadata={"help": "KL anchor (default: the actor's start; a PPO run's actor keeps that run's reference)"},
    )
    reward: str = field(default="", metadata={"help": "reward model: a reward run folder or an HF folder"})
    critic: str = field(default="", metadata={"help": "critic start: a reward run or HF folder (default: --reward)"})
    prompts: str = field(default="", metadata={"help": "prompts .txt/.jsonl or a snapshot folder (set by the CLI)"})
    output_dir: str = field(default="", metadata={"help": "run folder (set by the launcher)"})
    # rollouts
    max_prompt_length: int = field(default=256, metadata={"help": "prompts longer than this (tokens) are skipped"})
    max_new_tokens: int = field(default=128, metadata={"help": "longest response, in tokens"})
    min_new_tokens: int = field(default=1, metadata={"help": "shortest response (EOS is held back until then)"})
    temperature: float = field(default=1.0, metadata={"help": "rollout sampling temperature (> 0, never greedy)"})
    top_p: float = field(default=1.0, metadata={"help": "rollout nucleus mass (1.0 = off)"})
    top_k: int = field(default=0, metadata={"help": "rollout top-k (0 = off)"})
    generation_batch_size: int = field(default=8, metadata={"help": "prompts per rank per rollout batch"})
    generation_batches: int = field(default=1, metadata={"help": "rollout batches buffered before each update"})
    # updates
    ppo_epochs: int = field(default=1, metadata={"help": "passes over each buffer of experience"})
    minibatch_size: int = field(default=8, metadata={"help": "sequences per rank per PPO micro-batch"})
    epochs: int = field(default=1, metadata={"help": "passes over the prompts"})
    max_steps: int = field(default=0, metadata={"help": "stop after this many PPO steps (0 = all epochs)"})
    actor_lr: float = field(default=9.65e-6, metadata={"help": "actor learning rate"})
    critic_lr: float = field(default=5e-6, metadata={"help": "critic learning rate"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay (actor and critic)"})
    warmup_steps: int = field(default=0, metadata={"help": "linear warm-up steps"})
    lr_schedule: str = field(default="constant", metadata={"help": "constant, cosine or linear after warm-up"})
    # the PPO objective (DeepSpeed-Chat's constants)
    kl_ctl: float = field(default=0.1, metadata={"help": "KL penalty coefficient (initial value if adaptive)"})
    clip_reward_value: float = field(default=5.0, metadata={"help": "reward-model score clipped to +-this"})
    cliprange: float = field(default=0.2, metadata={"help": "policy ratio clip"})
    cliprange_value: float = field(default=0.2, metadata={"help": "value clip around the old values"})
    gamma: float = field(default=1.0, metadata={"help": "discount"})
    lam: float = field(default=0.95, metadata={"help": "GAE lambda"})
    # beyond DeepSpeed-Chat, off by default
    adaptive_kl: bool = field(default=False, metadata={"help": "adapt kl_ctl toward --kl-target (Ziegler et al.)"})
    kl_target: float = field(default=6.0, metadata={"help": "target KL (nats per sequence) of the adaptive control"})
    kl_horizon: int = field(default=10000, metadata={"help": "horizon of the adaptive KL controller"})
    kl_estimator: str = field(default="k1", metadata={"help": "per-token KL in the reward: k1 or k3"})
    whiten_advantages: bool = field(default=False, metadata={"help": "normalise advantages per batch"})
    normalize_reward: bool = field(default=False, metadata={"help": "score -> (score - mean) / std of the RM's eval"})
    missing_eos_penalty: float = field(default=0.0, metadata={"help": "subtracted from the score of cut responses"})
    ema_beta: float = field(default=0.0, metadata={"help": "keep an EMA of the actor (0 = off; DS-Chat uses 0.992)"})
    ref_ema_beta: float = field(
        default=0.0,
        metadata={
            "help": "after each step the reference moves toward the actor: beta ref + (1 - beta) actor (0 = off)"
        },
    )
    actor_lora_rank: int = field(default=0, metadata={"help": "LoRA rank for the actor (0 = full fine-tuning)"})
    critic_lora_rank: int = field(default=0, metadata={"help": "LoRA rank for the critic (0 = full fine-tuning)"})
    lora_alpha: float = field(default=16.0, metadata={"help": "LoRA scaling numerator"})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "actor and critic, during updates"})
    reuse_rollout_logprobs: bool = field(
        default=True, metadata={"help": "fp32: old log-probs from the rollout's logits (saves an actor forward)"}
    )
    # engine and bookkeeping
    zero_stage: int = field(default=0, metadata={"help": "DeepSpeed ZeRO stage 0-3 (actor and critic)"})
    dtype: str = field(
        default="auto",
        metadata={"help": "auto (bf16 where the CPU or GPU computes it natively, else fp32), fp32, bf16, fp16 (GPU)"},
    )
    save_every: int = field(default=0, metadata={"help": "checkpoint every N steps (0 = only at the end)"})
    sample_every: int = field(default=1, metadata={"help": "log sample completions every N steps (0 = never)"})
    tensorboard: bool = field(default=False, metadata={"help": "also write TensorBoard events to RUN/tensorboard"})
    seed: int = field(default=0, metadata={"help": "seed for prompt order and sampling"})
    unsupervised_data: str = field(
        default="",
        metadata={"help": "PPO-ptx: a .txt/.jsonl of unlabelled text; an LM step on it follows each actor step"},
    )
    unsup_coef: float = field(default=27.8, metadata={"help": "PPO-ptx: weight of the LM loss (InstructGPT: 27.8)"})
    # the over-optimisation watch (training/watch.py)
    reward_combine: str = field(
        default="first",
        metadata={"help": "score from the optimised ensemble members: first, mean, min or mean-minus-std"},
    )
    heldout_judges: int = field(
        default=-1,
        metadata={"help": "ensemble members PPO never optimises, only watches (-1: 1 if the ensemble has 2+ members)"},
    )
    kl_budget: float = field(default=0.0, metadata={"help": "the watch's alarm fires when KL passes this (0 = off)"})
    watch_alpha: float = field(
        default=0.05,
        metadata={"help": "the alarm's false-alarm rate per run: it tests each checkpoint evaluation's fall"},
    )
    watch_tolerance: float = field(
        default=0.0, metadata={"help": "the alarm ignores a fall of the held-out judge smaller than this (score units)"}
    )
    eval_prompts: str = field(
        default="",
        metadata={"help": "held-out prompts for the checkpoints' evaluation (the store's held-out ones by default)"},
    )
    eval_limit: int = field(default=32, metadata={"help": "evaluate checkpoints on at most this many held-out prompts"})
    keep_best: bool = field(
        default=False,
        metadata={"help": "RUN/actor = the checkpoint the held-out judge scores best (the last one in RUN/actor_last)"},
    )
    stop_on_overoptimization: bool = field(
        default=False, metadata={"help": "when the alarm fires, checkpoint and stop (resumable)"}
    )

    @property
    def single_pass(self) -> bool:
        """One PPO epoch over one minibatch holding the whole rollout (DeepSpeed-Chat's default shape): the old
        log-probs and values are exactly those of the update's own forward passes, so the scoring forwards of
        actor and critic are skipped and their training forwards serve both."""
        return (
            self.ppo_epochs == 1 and self.generation_batches == 1 and self.minibatch_size >= self.generation_batch_size
        )

    def check(self) -> None:
        if not self.reward:
            raise ValueError("a reward model is required: --reward RUN|PATH")
        check_dtype(self.dtype)
        if self.zero_stage not in (0, 1, 2, 3):
            raise ValueError(f"zero_stage must be 0..3, got {self.zero_stage}")
        if self.lr_schedule not in ("cosine", "linear", "constant"):
            raise ValueError(f"lr_schedule must be constant, cosine or linear, got {self.lr_schedule}")
        if self.kl_estimator not in ("k1", "k3"):
            raise ValueError(f"kl_estimator must be k1 or k3, got {self.kl_estimator}")
        if self.temperature <= 0:
            raise ValueError("temperature must be > 0: rollouts sample, they never decode greedily")
        if (self.actor_lora_rank or self.critic_lora_rank) and self.zero_stage == 3:
            raise ValueError("LoRA with ZeRO-3 is not supported yet; use ZeRO 0-2 with LoRA")
        if min(self.generation_batch_size, self.generation_batches, self.ppo_epochs, self.minibatch_size) < 1:
            raise ValueError("batch sizes, generation_batches and ppo_epochs must be >= 1")
        if not 1 <= self.min_new_tokens <= self.max_new_tokens:
            raise ValueError("need 1 <= min_new_tokens <= max_new_tokens")
        if self.ema_beta and self.zero_stage == 3:
            raise ValueError("the EMA actor needs ZeRO 0-2 (its weights are not partitioned)")
        if self.tensorboard and importlib.util.find_spec("tensorboard") is None:
            raise ValueError("--tensorboard needs the tensorboard package: pip install 'rlhf-studio[tensorboard]'")
        if not 0.0 <= self.ema_beta < 1.0:
            raise ValueError("ema_beta must be in [0, 1)")
        if not 0.0 <= self.ref_ema_beta < 1.0:
            raise ValueError("ref_ema_beta must be in [0, 1)")
        if self.ref_ema_beta and (self.zero_stage == 3 or self.actor_lora_rank):
            raise ValueError("the reference's EMA needs ZeRO 0-2 and a fully fine-tuned actor (no LoRA)")
        from training.watch import RULES

        if self.reward_combine not in RULES:
            raise ValueError(f"reward_combine must be one of {', '.join(RULES)}, got {self.reward_combine}")
        if self.kl_budget < 0 or not 0 < self.watch_alpha < 1 or self.heldout_judges < -1 or self.watch_tolerance < 0:
            raise ValueError("kl_budget and watch_tolerance must be >= 0, watch_alpha in (0, 1), heldout_judges >= -1")

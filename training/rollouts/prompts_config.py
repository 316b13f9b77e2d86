"""The settings every trainer on prompts shares (PPO, and the critic-free ones): the actor and its KL anchor, the
reward model, the prompts, the rollouts, the actor's optimiser, the KL-shaped reward, DeepSpeed and precision, LoRA,
checkpoints and the over-optimisation watch. Each trainer's config subclasses it and adds its own fields (a field
redeclared keeps its place in the flags). `resolved()` checks the models and files a run will read and returns the
config with their paths made absolute, before any run folder exists."""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from training.config_file import ConfigFile
from training.models import reward_folder
from training.precision import check_dtype
from training.runs import ENSEMBLE_FILE


@dataclass
class PromptsConfig(ConfigFile):
    # models and data
    actor: str = field(
        default="default",
        metadata={"help": "starting policy: 'default', a local HF folder, or a run (its policy: the next round)"},
    )
    reference: str = field(
        default="",
        metadata={"help": "KL anchor (default: the actor's start; a run's policy keeps that run's reference)"},
    )
    reward: str = field(default="", metadata={"help": "reward model: a reward run folder or an HF folder"})
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
    rollout_engine: str = field(
        default="auto",
        metadata={"help": "auto (vLLM where it is installed and loads the actor, else hf), vllm or hf (own decode)"},
    )
    # the actor's updates
    epochs: int = field(default=1, metadata={"help": "passes over the prompts"})
    max_steps: int = field(default=0, metadata={"help": "stop after this many steps (0 = all epochs)"})
    actor_lr: float = field(default=9.65e-6, metadata={"help": "actor learning rate"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    warmup_steps: int = field(default=0, metadata={"help": "linear warm-up steps"})
    lr_schedule: str = field(default="constant", metadata={"help": "constant, cosine or linear after warm-up"})
    # the reward the actor maximises: the reward model's score less a KL penalty to the reference
    kl_ctl: float = field(default=0.05, metadata={"help": "KL penalty coefficient"})
    clip_reward_value: float = field(default=5.0, metadata={"help": "reward-model score clipped to +-this"})
    cliprange: float = field(default=0.2, metadata={"help": "policy ratio clip"})
    kl_estimator: str = field(default="k1", metadata={"help": "per-token KL in the reward: k1 or k3"})
    normalize_reward: bool = field(default=False, metadata={"help": "score -> (score - mean) / std of the RM's eval"})
    missing_eos_penalty: float = field(default=0.0, metadata={"help": "subtracted from the score of cut responses"})
    actor_lora_rank: int = field(default=0, metadata={"help": "LoRA rank for the actor (0 = full fine-tuning)"})
    lora_alpha: float = field(default=16.0, metadata={"help": "LoRA scaling numerator"})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "trade compute for activation memory"})
    # engine and bookkeeping
    zero_stage: int = field(default=0, metadata={"help": "DeepSpeed ZeRO stage 0-3"})
    dtype: str = field(
        default="auto",
        metadata={"help": "auto (bf16 where the CPU or GPU computes it natively, else fp32), fp32, bf16, fp16 (GPU)"},
    )
    save_every: int = field(default=0, metadata={"help": "checkpoint every N steps (0 = only at the end)"})
    sample_every: int = field(default=1, metadata={"help": "log sample completions every N steps (0 = never)"})
    tensorboard: bool = field(default=False, metadata={"help": "also write TensorBoard events to RUN/tensorboard"})
    seed: int = field(default=0, metadata={"help": "seed for prompt order and sampling"})
    # the over-optimisation watch (training/watch.py)
    reward_combine: str = field(
        default="first",
        metadata={"help": "score from the optimised ensemble members: first, mean, min or mean-minus-std"},
    )
    heldout_judges: int = field(
        default=-1,
        metadata={"help": "ensemble members the actor never optimises, only watches (-1: 1 if the ensemble has 2+)"},
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
        metadata={"help": "the saved policy = the checkpoint the held-out judge scores best (the last one: *_last)"},
    )
    stop_on_overoptimization: bool = field(
        default=False, metadata={"help": "when the alarm fires, checkpoint and stop (resumable)"}
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
        if self.actor_lora_rank and self.zero_stage == 3:
            raise ValueError("LoRA with ZeRO-3 is not supported yet; use ZeRO 0-2 with LoRA")
        if self.generation_batch_size < 1:
            raise ValueError("generation_batch_size must be >= 1")
        if self.rollout_engine not in ("auto", "vllm", "hf"):
            raise ValueError(f"rollout_engine must be auto, vllm or hf, got {self.rollout_engine}")
        if not 1 <= self.min_new_tokens <= self.max_new_tokens:
            raise ValueError("need 1 <= min_new_tokens <= max_new_tokens")
        if self.tensorboard and importlib.util.find_spec("tensorboard") is None:
            raise ValueError("--tensorboard needs the tensorboard package: pip install 'rlhf-studio[tensorboard]'")
        from training.watch import RULES

        if self.reward_combine not in RULES:
            raise ValueError(f"reward_combine must be one of {', '.join(RULES)}, got {self.reward_combine}")
        if self.kl_budget < 0 or not 0 < self.watch_alpha < 1 or self.heldout_judges < -1 or self.watch_tolerance < 0:
            raise ValueError("kl_budget and watch_tolerance must be >= 0, watch_alpha in (0, 1), heldout_judges >= -1")

    def resolved(self):
        """This config with the reward model's path made absolute: a reward run's folder stays (an ensemble's members
        are read from it), a run without an ensemble becomes its model/ folder. ModelError (a ValueError) when the
        reward model is missing. Subclasses resolve their own models and files after calling this."""
        folder = reward_folder(self.reward)
        ensemble = (Path(self.reward) / ENSEMBLE_FILE).is_file()
        self.check_combine()
        return dataclasses.replace(self, reward=str((Path(self.reward) if ensemble else folder).resolve()))

    def check_combine(self) -> None:
        """--reward-combine other than `first` needs two or more optimised members: with one (a single reward model,
        or a two-member ensemble whose second member watches as the held-out judge) it would change nothing."""
        if self.reward_combine == "first":
            return
        from training.judges import judge_folders
        from training.watch import split_members

        members = len(judge_folders(self.reward))
        heldout = self.heldout_judges if self.heldout_judges >= 0 else int(members > 1)
        optimised, _ = split_members(members, min(heldout, members - 1))
        if len(optimised) < 2:
            raise ValueError(
                f"--reward-combine {self.reward_combine} needs 2+ optimised reward models; {self.reward} has "
                f"{members} member(s), {heldout} of them held out to watch: train `--ensemble 3`, or pass "
                "--heldout-judges 0 to optimise every member"
            )

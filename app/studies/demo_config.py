"""The demo's settings, apart from the demo itself: the CLI builds its flags from them without importing torch."""

from __future__ import annotations

from dataclasses import dataclass, field

from training.ppo.config import PPOConfig


@dataclass
class DemoConfig:
    model: str = field(default="default", metadata={"help": "SFT model: 'default', 'tiny' or a local HF folder"})
    reward_base: str = field(default="", metadata={"help": "reward-model base (default: the SFT model)"})
    n_prompts: int = field(default=0, metadata={"help": "use the first N bundled prompts (0 = all 500)"})
    split: str = field(
        default="topic",
        metadata={
            "help": "topic (train, validation and test by topic, a template kept for test: docs/evaluation.md) or "
            "tail (the last --heldout prompts held out, as demos before 2026-12-07)"
        },
    )
    split_seed: int = field(
        default=0, metadata={"help": "seed of the topic split: the same for every run, so no test topic is tuned on"}
    )
    evaluate_on: str = field(
        default="test",
        metadata={"help": "the topic split's part every model is judged on: test (claims) or validation (choices)"},
    )
    heldout: int = field(
        default=64,
        metadata={"help": "prompts judged on: tail, the last N held out; topic, at most N of the part (0 = all)"},
    )
    taste: str = field(
        default="population",
        metadata={
            "help": "population (scripted annotators with several criteria rank, the panel judges) or concise (the "
            "word counter ranks and judges, as demos before 2026-12-07)"
        },
    )
    annotators: int = field(default=8, metadata={"help": "the population's size: each ranks its share of prompts"})
    k: int = field(default=4, metadata={"help": "responses per prompt"})
    max_new_tokens: int = field(default=64, metadata={"help": "longest response (sampling, PPO, evaluation)"})
    min_new_tokens: int = field(default=8, metadata={"help": "shortest response in tokens (EOS held back until then)"})
    dtype: str = field(default="auto", metadata={"help": "auto (bf16 where the CPU or GPU computes it), fp32 or bf16"})
    engine: str = field(
        default="auto",
        metadata={
            "help": "what samples: auto (vLLM where it loads the model; on a CPU PPO's and RLOO's rollouts keep the "
            "trainers' own decode), vllm (everywhere; --quick then gives its actor 32-wide heads, as vLLM's CPU "
            "kernels need) or hf"
        },
    )
    rm_epochs: int = field(default=3, metadata={"help": "reward-model epochs"})
    rm_ensemble: int = field(
        default=2,
        metadata={"help": "reward models on alternate halves of the prompts: PPO optimises the first, the last judges"},
    )
    rm_lr: float = field(default=1e-5, metadata={"help": "reward-model learning rate"})
    ppo_epochs: int = field(default=2, metadata={"help": "PPO passes over the training prompts"})
    ppo_steps: int = field(default=0, metadata={"help": "stop PPO after this many steps (0 = all epochs)"})
    actor_lr: float = field(default=PPOConfig.actor_lr, metadata={"help": "actor learning rate"})
    critic_lr: float = field(default=5e-6, metadata={"help": "critic learning rate"})
    kl_ctl: float = field(default=PPOConfig.kl_ctl, metadata={"help": "KL penalty coefficient"})
    save_every: int = field(default=4, metadata={"help": "PPO checkpoints every N steps, each judged held out"})
    ppo_settings: str = field(
        default="",
        metadata={
            "help": "more PPO settings, as `rlhf train-ppo` names them: whiten_advantages=false,"
            "generation_batch_size=16 (with --quick, --rounds or --fork, on top of their settings)"
        },
    )
    best_of: int = field(default=16, metadata={"help": "best-of-N of the reference for N = 1, 2, 4, ... up to this"})
    methods: str = field(
        default="ppo,dpo",
        metadata={
            "help": "ppo, plus dpo and kto (the same pairs; KTO's split into thumbs by net wins) and, against the "
            "same reward model, rloo, rloo_pairwise (RLOO on win fractions) and online_dpo: ppo,dpo,rloo,online_dpo"
        },
    )
    campaign: bool = field(
        default=False,
        metadata={
            "help": "the labeling-campaign study: three scripted annotators (one noisy) and gold prompts, the "
            "dashboard on them, and two more reward models (every pair; the noisy left out by gold); on in --quick"
        },
    )
    dpo_lr: float = field(default=5e-6, metadata={"help": "DPO learning rate"})
    dpo_beta: float = field(default=0.1, metadata={"help": "DPO's beta"})
    dpo_epochs: int = field(default=2, metadata={"help": "DPO passes over the training pairs (KTO's over its rows)"})
    kto_lr: float = field(default=5e-6, metadata={"help": "KTO's learning rate (DPO's by default: not tuned)"})
    kto_beta: float = field(default=0.1, metadata={"help": "KTO's beta"})
    method_steps: int = field(
        default=0,
        metadata={"help": "steps of rloo, rloo_pairwise and online_dpo (0: as many as PPO took, as many sequences)"},
    )
    rloo_settings: str = field(
        default="",
        metadata={
            "help": "RLOO's own settings for rloo and rloo_pairwise, over the PPO settings they take, as "
            "`rlhf train-rloo` names them: kl_ctl=0.1,actor_lr=1e-5,k=8"
        },
    )
    online_dpo_lr: float = field(default=5e-6, metadata={"help": "online DPO's learning rate"})
    online_dpo_beta: float = field(default=0.1, metadata={"help": "online DPO's beta"})
    recommend: str = field(
        default="ppo",
        metadata={
            "help": "the method whose one sample the report's verdict puts against best-of-N: the one chosen on "
            "validation (docs/evaluation.md), never picked on the numbers it is judged by"
        },
    )
    rounds: int = field(
        default=1, metadata={"help": "2+: the rounds study, the label budget spent in 1 round against R rounds"}
    )
    label_budget: int = field(default=0, metadata={"help": "rankings the rounds study spends (0 = half the prompts)"})
    select: str = field(default="random,uncertain", metadata={"help": "the rounds study's rules for rounds 2+"})
    seed: int = field(default=0, metadata={"help": "seed of sampling, training and evaluation"})


# What a demo folder written before a setting existed ran with: its settings file lacks the key, and reads as this,
# not as today's default (app/studies/demo_stages.py::load_settings, demo_seeds.py).
LEGACY = {"taste": "concise", "split": "tail"}

# The quick demo and the rounds study keep the PPO settings they were first run with, DeepSpeed-Chat's (8 prompts a
# step, no whitening, kl_ctl 0.1); PPO's defaults changed after, chosen on earlier trials whose results files did not
# record their provenance and were removed (issue 53).
DS_CHAT_PPO = dict(kl_ctl=0.1, ppo_settings="whiten_advantages=false,generation_batch_size=8")

# Quick mode: tiny models, a few dozen prompts; a couple of minutes on two CPU cores.
QUICK = dict(
    model="tiny",
    n_prompts=120,
    heldout=24,
    max_new_tokens=32,
    dtype="fp32",
    rm_epochs=4,
    rm_lr=2e-3,
    ppo_epochs=3,
    actor_lr=5e-3,
    critic_lr=1e-3,
    save_every=9,
    dpo_lr=5e-3,
    dpo_epochs=2,
    kto_lr=5e-3,
    online_dpo_lr=5e-3,
    campaign=True,
    **DS_CHAT_PPO,
)

# The rounds study on the default model (`rlhf demo --rounds R`, not --quick): 200 training prompts, 120 labels, 48 PPO
# steps per arm at twice the actor's learning rate.
ROUNDS = dict(n_prompts=264, label_budget=120, ppo_steps=48, actor_lr=2e-5, **DS_CHAT_PPO)

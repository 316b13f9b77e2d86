"""`rlhf round start`'s settings, apart from the round itself: the CLI builds its flags from them without importing
torch."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RoundConfig:
    policy: str = field(
        default="default",
        metadata={"help": "model to sample: 'default', a HF folder, or a PPO/DPO run folder (its actor or policy)"},
    )
    k: int = field(default=4, metadata={"help": "responses per prompt from the policy"})
    mix_previous: int = field(
        default=0, metadata={"help": "also M responses of the previous round's policy in each ranking (Llama 2)"}
    )
    select: str = field(default="random", metadata={"help": "random, uncertain or disagree (needs a reward ensemble)"})
    n: int = field(default=0, metadata={"help": "prompts to ask (0 = every candidate)"})
    prompts: str = field(default="", metadata={"help": "fresh prompts from a .txt/.jsonl/.csv file (else the store's)"})
    reask: bool = field(default=False, metadata={"help": "candidates include prompts ranked in earlier rounds"})
    reward: str = field(
        default="", metadata={"help": "reward run that scores candidates for uncertain/disagree (default: the latest)"}
    )
    temperature: float = field(default=0.8, metadata={"help": "sampling temperature"})
    max_new_tokens: int = field(default=128, metadata={"help": "longest response, in tokens"})
    dtype: str = field(default="auto", metadata={"help": "auto, fp32 or bf16"})
    seed: int = field(default=0, metadata={"help": "seed of the selection and the sampling"})

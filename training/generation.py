"""Sampling K responses per prompt from the SFT model: all K samples of a prompt in one `generate` call and
several prompts per call, the model's chat template applied, left padding."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from training.models import SAFE_LOAD, SAFE_WEIGHTS, ModelError, model_id, resolve_model
from training.precision import check_dtype, resolve_dtype


@dataclass
class SamplingConfig:
    """How responses are sampled. Stored with every response (except `model`, stored as its model id)."""

    model: str = field(default="default", metadata={"help": "'default' (SmolLM2-135M-Instruct) or a local HF folder"})
    temperature: float = field(default=0.8, metadata={"help": "softmax temperature (> 0; sampling is never greedy)"})
    top_p: float = field(default=0.95, metadata={"help": "nucleus sampling mass (1.0 = off)"})
    top_k: int = field(default=0, metadata={"help": "keep the k most likely tokens (0 = off)"})
    max_new_tokens: int = field(default=128, metadata={"help": "longest response, in tokens"})
    min_new_tokens: int = field(default=1, metadata={"help": "shortest response, in tokens (EOS is held back)"})
    batch_prompts: int = field(default=16, metadata={"help": "prompts per generate call (x K sequences)"})
    dtype: str = field(
        default="auto",
        metadata={"help": "auto (bf16 where the CPU or GPU computes it natively, else fp32), fp32 or bf16"},
    )
    seed: int = field(default=0, metadata={"help": "base seed; each generate call uses seed + its first prompt id"})

    def params(self, k: int) -> dict:
        """What is stored with each response."""
        d = asdict(self)
        d.pop("model")
        d["k"] = k
        return d


@dataclass
class Generated:
    text: str
    n_tokens: int  # generated tokens up to and including EOS
    finish_reason: str  # 'eos' or 'length'


class Sampler:
    """Holds one loaded model and tokenizer; `__call__` samples K responses for each prompt of a batch."""

    def __init__(self, config: SamplingConfig):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # our own progress bar is the one users watch
        if config.temperature <= 0:
            raise ModelError("temperature must be > 0: rlhf-studio samples, it never decodes greedily")
        try:
            check_dtype(config.dtype, ("fp32", "bf16"))
            self.dtype, why = resolve_dtype(config.dtype)
        except ValueError as e:
            raise ModelError(str(e)) from None
        self.dtype_line = f"{self.dtype} ({why})"  # said with every sampling report: which dtype was picked
        self.config = config
        folder = resolve_model(config.model)
        self.model_id = model_id(config.model)
        dtype = torch.bfloat16 if self.dtype == "bf16" else torch.float32
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(folder, **SAFE_LOAD)
            self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **SAFE_WEIGHTS)
        except (OSError, ValueError, KeyError) as e:
            raise ModelError(f"cannot load a causal LM from {folder}: {str(e).splitlines()[0][:200]}") from None
        self.tokenizer.padding_side = "left"
        self.model.eval()  # dropout off
        eos = self.tokenizer.eos_token_id
        self.eos_ids = set([eos] if isinstance(eos, int) else eos)
        self.eos_ids |= set(_as_list(self.model.generation_config.eos_token_id))
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos

    def params(self, k: int) -> dict:
        """What is stored with each response: the config, with the dtype it actually sampled in."""
        return {**self.config.params(k), "dtype": self.dtype}

    def chat_prompt(self, prompt: str) -> str:
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
            )
        return prompt

    def __call__(self, prompts: list[str], k: int, seed: int) -> list[list[Generated]]:
        """K samples for each prompt, from one generate call; out[i][j] is sample j of prompts[i]."""
        import torch

        from training.linear import packed_linears

        c = self.config
        enc = self.tokenizer(
            [self.chat_prompt(p) for p in prompts], return_tensors="pt", padding=True, add_special_tokens=False
        )
        torch.manual_seed(seed)
        rows = len(prompts) * k
        with torch.inference_mode(), packed_linears(self.model, rows):  # weights read at memory speed
            out = self.model.generate(
                **enc,
                do_sample=True,
                temperature=c.temperature,
                top_p=c.top_p,
                top_k=c.top_k or None,
                max_new_tokens=c.max_new_tokens,
                min_new_tokens=c.min_new_tokens,
                num_return_sequences=k,
                pad_token_id=self.pad_id,
                eos_token_id=sorted(self.eos_ids),
            )
        new = out[:, enc["input_ids"].shape[1] :].tolist()  # (B*K, T_new); generate orders the K copies together
        results = [self._finish(ids) for ids in new]
        return [results[i * k : (i + 1) * k] for i in range(len(prompts))]

    def _finish(self, ids: list[int]) -> Generated:
        end = next((n for n, t in enumerate(ids) if t in self.eos_ids), None)
        kept = ids if end is None else ids[:end]
        text = self.tokenizer.decode(kept, skip_special_tokens=True).strip()
        return Generated(
            text=text, n_tokens=len(ids) if end is None else end + 1, finish_reason="length" if end is None else "eos"
        )


def _as_list(x: object) -> list[int]:
    if x is None:
        return []
    return [x] if isinstance(x, int) else list(x)

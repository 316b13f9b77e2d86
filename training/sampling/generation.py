"""Sampling K responses per prompt from the SFT model, the model's chat template applied, on one of two engines
(training/sampling/vllm_engine.py's engine_for picks): vLLM (the K samples of a prompt as n=K over one shared prefill,
several prompts per call) or transformers' `generate` (all K samples of a prompt in one call, several prompts per
call, left padding). `open_sampler(config)` returns the one the config and the machine call for."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from training.models import (
    SAFE_LOAD,
    SAFE_WEIGHTS,
    ModelError,
    folder_json,
    model_id,
    plain_chat,
    prompt_messages,
    resolve_model,
)
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
    engine: str = field(
        default="auto",
        metadata={"help": "auto (vLLM where it is installed and loads the model, else hf), vllm or hf (generate)"},
    )

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


def open_sampler(config: SamplingConfig, sequences: int | None = None) -> Sampler | VllmSampler:
    """The sampler for `config` on the engine training/sampling/vllm_engine.py's open_engine picks (vLLM, else
    transformers' generate); `sequences`, the job's size where the caller knows it, lets `auto` leave a small job to
    generate."""
    from training.sampling.vllm_engine import EngineError, open_engine

    try:
        return open_engine(
            resolve_model(config.model),
            config.engine,
            lambda why: VllmSampler(config, why),
            lambda why: Sampler(config, why),
            sequences,
        )
    except EngineError as e:
        raise ModelError(str(e)) from None


class _Base:
    """The tokenizer, the chat template, the EOS ids and the dtype: what both engines share."""

    engine = ""

    def __init__(self, config: SamplingConfig, engine_why: str = "as configured"):
        from transformers import AutoTokenizer
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
        self.engine_line = f"{self.engine} ({engine_why})"  # and which engine sampled
        self.config = config
        self.folder = resolve_model(config.model)
        self.model_id = model_id(config.model)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.folder, **SAFE_LOAD)
        except (OSError, ValueError, KeyError) as e:
            raise ModelError(f"cannot load a tokenizer from {self.folder}: {str(e).splitlines()[0][:200]}") from None
        self.tokenizer.padding_side = "left"
        eos = self.tokenizer.eos_token_id
        self.eos_ids = stop_ids(self.folder, self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos

    def params(self, k: int) -> dict:
        """What is stored with each response: the config, with the dtype and the engine it actually sampled with."""
        return {**self.config.params(k), "dtype": self.dtype, "engine": self.engine}

    def chat_prompt(self, prompt: str) -> str:
        """What the sampler feeds the model: the prompt (a conversation: all its turns) through the chat template."""
        messages = prompt_messages(prompt)
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return plain_chat(messages)

    def _finish(self, ids: list[int]) -> Generated:
        end = next((n for n, t in enumerate(ids) if t in self.eos_ids), None)
        kept = ids if end is None else ids[:end]
        text = self.tokenizer.decode(kept, skip_special_tokens=True).strip()
        return Generated(
            text=text, n_tokens=len(ids) if end is None else end + 1, finish_reason="length" if end is None else "eos"
        )

    def close(self) -> None:
        """Free the engine (vLLM's, with its processes where it has some); the HF sampler's model goes with the
        object."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Sampler(_Base):
    """transformers' generate over one loaded model; `__call__` samples K responses for each prompt of a batch."""

    engine = "hf"

    def __init__(self, config: SamplingConfig, engine_why: str = "as configured"):
        import torch
        from transformers import AutoModelForCausalLM

        super().__init__(config, engine_why)
        dtype = torch.bfloat16 if self.dtype == "bf16" else torch.float32
        try:
            self.model = AutoModelForCausalLM.from_pretrained(self.folder, dtype=dtype, **SAFE_WEIGHTS)
        except (OSError, ValueError, KeyError) as e:
            raise ModelError(f"cannot load a causal LM from {self.folder}: {str(e).splitlines()[0][:200]}") from None
        self.model.eval()  # dropout off

    def __call__(self, prompts: list[str], k: int, seed: int) -> list[list[Generated]]:
        """K samples for each prompt, from one generate call; out[i][j] is sample j of prompts[i]."""
        import torch

        from training.kernels.linear import packed_linears

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


class VllmSampler(_Base):
    """vLLM over one model (training/sampling/vllm_engine.py); `__call__` samples K responses for each prompt of a
    batch, the K of a prompt as n=K over its one prefill. Prompt i of a call draws from seed + i."""

    engine = "vllm"

    def __init__(self, config: SamplingConfig, engine_why: str = "as configured"):
        from training.sampling.vllm_engine import Settings, VllmEngine

        super().__init__(config, engine_why)
        self.settings = Settings(
            config.temperature, config.top_p, config.top_k, config.max_new_tokens, config.min_new_tokens
        )
        # an EngineError here is open_sampler's: it falls back to generate under auto, else it is the one line
        self.vllm = VllmEngine(self.folder, self.dtype, sorted(self.eos_ids), context_window(self.folder), config.seed)

    def __call__(self, prompts: list[str], k: int, seed: int) -> list[list[Generated]]:
        from training.sampling.vllm_engine import EngineError

        ids = [self.tokenizer(self.chat_prompt(p), add_special_tokens=False)["input_ids"] for p in prompts]
        try:
            outs = self.vllm.sample(ids, k, self.settings, seed)
        except EngineError as e:
            raise ModelError(str(e)) from None
        return [[self._finish(o.token_ids) for o in row] for row in outs]

    def close(self) -> None:
        self.vllm.close()


def context_window(folder, most: int = 8192) -> int:
    """The longest prompt + response the engine holds: the model's max_position_embeddings, at most `most`."""
    return min(int(folder_json(folder).get("max_position_embeddings") or most), most)


def stop_ids(folder, tokenizer) -> set[int]:
    """Where a reply ends, as transformers' generate ends it: the tokenizer's EOS and the model's generation EOS."""
    return {*_as_list(tokenizer.eos_token_id), *_as_list(_generation_eos(folder))}


def _generation_eos(folder) -> object:
    """The eos_token_id transformers' generate stops at (an id, a list or None): generation_config.json's, else
    config.json's; read without loading the model."""
    for name in ("generation_config.json", "config.json"):
        eos = folder_json(folder, name).get("eos_token_id")
        if eos is not None:
            return eos
    return None


def _as_list(x: object) -> list[int]:
    if x is None:
        return []
    return [x] if isinstance(x, int) else list(x)

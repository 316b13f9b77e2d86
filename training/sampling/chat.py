"""Chat with two models side by side (the Compare tab): both replies stream token by token in lockstep with the
same sampling parameters and the same seed, and a reward model can score each reply.

A chat model samples on the engine training/sampling/vllm_engine.py's open_engine picks for its folder: vLLM (the reply
streamed from the engine; best-of-N's N replies as n=N over one prefill) or the trainers' own decode
(training/sampling/decode.py) over a transformers model. Models load on first use; the cache keeps the few used last
(`Models(max_loaded)`) and drops them all on `release()` (the app frees them when a training run starts)."""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from training.judges import reward_scores
from training.loaders import load_scalar_model, load_tokenizer
from training.models import SAFE_WEIGHTS, ModelError, resolve_model, reward_folder
from training.registry import policy_folder
from training.sampling.decode import decode_steps


@dataclass
class ChatParams:
    temperature: float = field(default=0.8, metadata={"help": "sampling temperature (> 0)"})
    top_p: float = field(default=0.95, metadata={"help": "nucleus mass (1.0 = off)"})
    top_k: int = field(default=0, metadata={"help": "top-k (0 = off)"})
    max_new_tokens: int = field(default=128, metadata={"help": "longest reply, in tokens"})
    min_new_tokens: int = 1
    seed: int = field(default=0, metadata={"help": "the same seed drives both sides"})


def model_folder(ref: str) -> Path:
    """'default', an HF folder, or a run folder of a trainer that makes a policy (PPO's actor/, DPO's policy/)."""
    return policy_folder(Path(ref).expanduser()) or resolve_model(ref)


class HfChatModel:
    """A transformers model sampled with the trainers' decode (training/sampling/decode.py), on this process's CPU."""

    engine = "hf"

    def __init__(self, folder: Path, why: str = "as configured"):
        from transformers import AutoModelForCausalLM

        try:
            self.model = AutoModelForCausalLM.from_pretrained(folder, **SAFE_WEIGHTS).eval()
        except (OSError, ValueError) as e:
            raise ModelError(f"cannot load {folder}: {str(e).splitlines()[0][:200]}") from None
        self.tokenizer = load_tokenizer(folder)
        self.why = why
        n = getattr(self.model.config, "max_position_embeddings", None)
        self.context = int(n) if n else None  # the longest sequence its positions cover (None: not said)

    def tokens(self, ids: list[int], params: ChatParams) -> Iterator[int]:
        """The reply's token ids as they are sampled, up to (not including) EOS."""
        x = torch.tensor([ids])
        gen = torch.Generator().manual_seed(params.seed)
        eos = self.tokenizer.eos_token_id
        for token, _ in decode_steps(
            self.model, x, torch.ones_like(x), params, eos, self.tokenizer.pad_token_id, generator=gen
        ):
            t = int(token[0])
            if t == eos:
                return
            yield t

    def replies(self, ids: list[int], params: ChatParams, n: int) -> list[list[int]]:
        """n whole replies, seeds seed .. seed + n - 1."""
        return [list(self.tokens(ids, replace(params, seed=params.seed + j))) for j in range(n)]

    def close(self) -> None:
        """Nothing to end: the model's memory goes with the object."""


class VllmChatModel:
    """A vLLM engine over the model and the model's tokenizer; the engine runs in this process, or in processes of
    its own beside another engine (training/sampling/vllm_engine.py's in_process). The reply ends at the
    tokenizer's EOS or generation_config's, as transformers' generate ends it. `vllm`: an engine already open over
    `folder` with those stop ids (a sampler's), shared rather than started again; its owner closes it."""

    engine = "vllm"

    def __init__(self, folder: Path, why: str = "as configured", vllm=None):
        from training.precision import resolve_dtype
        from training.sampling.generation import context_window, stop_ids
        from training.sampling.vllm_engine import VllmEngine

        self.tokenizer = load_tokenizer(folder)
        self.why = why
        self.eos = stop_ids(folder, self.tokenizer)
        self.context = context_window(folder)
        self.owned = vllm is None
        self.vllm = vllm or VllmEngine(folder, resolve_dtype("auto")[0], sorted(self.eos), self.context)

    @staticmethod
    def settings(params: ChatParams):
        from training.sampling.vllm_engine import Settings

        # EOS held back at the first min_new_tokens - 1 positions, as the trainers' decode holds it
        return Settings(
            params.temperature, params.top_p, params.top_k, params.max_new_tokens, max(0, params.min_new_tokens - 1)
        )

    def tokens(self, ids: list[int], params: ChatParams) -> Iterator[int]:
        """The reply's token ids as the engine sends them, up to (not including) EOS."""
        for delta in self.vllm.stream(ids, self.settings(params), params.seed):
            for t in delta:
                if t in self.eos:
                    return
                yield t

    def replies(self, ids: list[int], params: ChatParams, n: int) -> list[list[int]]:
        """n whole replies as n=n samples over the conversation's one prefill."""
        outs = self.vllm.sample([ids], n, self.settings(params), params.seed)[0]
        return [o.token_ids[:-1] if o.ended else o.token_ids for o in outs]

    def close(self) -> None:
        if self.owned:
            self.vllm.close()

    def __del__(self):  # dropped by the cache and no reply streaming from it: its engine goes now
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown; the engine's watchdog ends it then
            pass


def open_chat_model(folder: Path, engine: str = "auto"):
    """The chat model over `folder` on the engine open_engine picks (`engine`: auto, vllm or hf)."""
    from training.sampling.vllm_engine import EngineError, open_engine

    try:
        return open_engine(folder, engine, lambda why: VllmChatModel(folder, why), lambda why: HfChatModel(folder, why))
    except EngineError as e:
        raise ModelError(str(e)) from None


class Models:
    """A small cache of loaded models, shared by every session of the app: at most `max_loaded` of them, the least
    recently used dropped first (a reply streaming from a dropped model keeps it until the reply ends). `engine`:
    what chat models sample on (auto, vllm or hf)."""

    def __init__(self, max_loaded: int = 3, engine: str = "auto"):
        if max_loaded < 1:
            raise ValueError(f"the chat model cache needs room for at least 1 model, got {max_loaded}")
        self.max_loaded, self.engine = max_loaded, engine
        self._cache: OrderedDict[tuple[str, str], object] = OrderedDict()
        self._lock = threading.Lock()

    def causal(self, ref: str):
        """The chat model (HfChatModel or VllmChatModel) for a model reference."""
        folder = model_folder(ref)
        return self._get(("causal", str(folder.resolve())), lambda: open_chat_model(folder, self.engine))

    def reward(self, ref: str):
        def load():
            return load_scalar_model(ref, "fp32").eval(), load_tokenizer(reward_folder(ref))

        return self._get(("reward", str(Path(ref).resolve())), load)

    def _get(self, key: tuple[str, str], load):
        with self._lock:
            if key not in self._cache:
                # room first: the model evicted is freed before the new one takes its memory
                dropped = []
                while len(self._cache) >= self.max_loaded:
                    dropped.append(self._cache.popitem(last=False)[0][1])
                self._cache[key] = load()
                # the app's log says what the chat holds (an admin sizing --max-chat-models reads it)
                gone = f"; dropped {', '.join(dropped)}" if dropped else ""
                print(
                    f"chat: loaded {key[0]} model {key[1]} ({len(self._cache)} of {self.max_loaded} held{gone})",
                    file=sys.stderr,
                    flush=True,
                )
            self._cache.move_to_end(key)
            return self._cache[key]

    def loaded(self) -> list[tuple[str, str]]:
        """(kind, folder) of the models held, least recently used first."""
        with self._lock:
            return list(self._cache)

    def release(self) -> int:
        """Drop every loaded model (a training run needs the memory); returns how many were loaded."""
        with self._lock:
            n = len(self._cache)
            self._cache.clear()
        return n


def check_fits(context: int | None, prompt_tokens: int, max_new_tokens: int) -> None:
    """A reply must fit the model's context (None: not said): the decode sizes its cache for prompt + new tokens
    up front."""
    if context is not None and prompt_tokens + max_new_tokens > context:
        raise ModelError(
            f"the conversation is {prompt_tokens} tokens and {max_new_tokens} new ones would pass this model's "
            f"context of {context}: ask for fewer new tokens or clear the chat"
        )


def chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The conversation so far, in the model's chat template, ending where the assistant speaks next."""
    if tokenizer.chat_template:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    else:
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _tokens(model, messages: list[dict], params: ChatParams) -> Iterator[int | None]:
    """Token ids of one reply as they are sampled; None once it has ended (so two streams can be zipped)."""
    ids = chat_ids(model.tokenizer, messages)
    check_fits(model.context, len(ids), params.max_new_tokens)
    yield from model.tokens(ids, params)
    while True:
        yield None


def stream_pair(
    left: tuple | str, right: tuple | str, left_messages: list[dict], right_messages: list[dict], params: ChatParams
) -> Iterator[tuple[str, str, bool, bool]]:
    """(left text, right text, left done, right done) after each step; both sides advance together.
    left/right: a chat model (Models.causal), or a finished reply (best-of-N's pick) shown whole from the first
    step; each side has its own history (its own earlier replies)."""
    sides = (left, right)
    messages = (left_messages, right_messages)
    streams = [None if isinstance(x, str) else _tokens(x, m, params) for x, m in zip(sides, messages, strict=True)]
    ids: list[list[int]] = [[], []]
    done = [isinstance(x, str) for x in sides]

    def texts() -> list[str]:
        return [
            x if isinstance(x, str) else x.tokenizer.decode(i, skip_special_tokens=True)
            for x, i in zip(sides, ids, strict=True)
        ]

    if all(done):
        yield *texts(), True, True
    while not all(done):
        for side in (0, 1):
            if done[side]:
                continue
            t = next(streams[side])
            if t is None:
                done[side] = True
            else:
                ids[side].append(t)
        yield *texts(), done[0], done[1]


def sample_reply(model, messages: list[dict], params: ChatParams) -> str:
    """One whole reply of a chat model to the conversation."""
    ids = []
    for t in _tokens(model, messages, params):
        if t is None:
            break
        ids.append(t)
    return model.tokenizer.decode(ids, skip_special_tokens=True)


def best_of_reply(model, reward: tuple, messages: list[dict], params: ChatParams, n: int) -> tuple:
    """(the pick, every reply, their scores): n replies of a chat model, the reward model's favourite
    (training/sampling/best_of_n.py's rule: the first of the highest)."""
    from training.watch import best_index

    ids = chat_ids(model.tokenizer, messages)
    check_fits(model.context, len(ids), params.max_new_tokens)
    replies = [model.tokenizer.decode(r, skip_special_tokens=True) for r in model.replies(ids, params, n)]
    scores = [score_reply(reward, messages, r) for r in replies]
    return replies[best_index(scores)], replies, scores


@torch.no_grad()
def score_reply(reward: tuple, messages: list[dict], reply: str) -> float:
    """The reward model's score of `reply` to the conversation: chat template + reply + EOS, read at EOS (the
    sequence ending it was trained on)."""
    model, tokenizer = reward
    ids = chat_ids(tokenizer, messages) + tokenizer(reply + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
    x = torch.tensor([ids])
    return float(reward_scores(model, x, torch.ones_like(x), torch.tensor([len(ids) - 1]))[0])

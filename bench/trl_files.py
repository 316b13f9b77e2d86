"""Issue 31: the pairs rlhf-studio writes (`rlhf pairs --format trl`) train TRL's RewardTrainer and DPOTrainer
unchanged. A store gets rankings whose prompts are text, and another whose prompts include conversations (system,
user and assistant turns); each store's pairs go out to .jsonl, .parquet and a `datasets` folder; each file is read
the way a TRL user reads one (`datasets.load_dataset("json" | "parquet")`, `datasets.load_from_disk`) and handed
as it is to RewardTrainer and DPOTrainer, two steps each on a tiny Llama with the default model's tokenizer and
chat template. A run counts when TRL took every pair, its losses are finite, and its weights moved.

Needs TRL (`make bench` installs it; the app never imports it). Prints one line per file and trainer; exits 1 if
any fails. `python -m bench.trl_files [--out FOLDER]`."""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

TURNS = [
    {"role": "system", "content": "Answer in a few words."},
    {"role": "user", "content": "Name a fruit."},
    {"role": "assistant", "content": "An apple."},
]


def _rows(conversational: bool) -> list[dict]:
    """Native ranking lines: 8 prompts, K = 3 (3 pairs each); the polite answer first."""
    rows = []
    for n in range(8):
        ask = f"Name thing number {n}."
        prompt = [*TURNS, {"role": "user", "content": ask}] if conversational and n % 2 == 0 else ask
        answers = [f"Thing {n}, thank you.", f"thing {n}", f"no {n}"]
        rows.append({"prompt": prompt, "responses": answers, "ranks": [1, 2, 3], "annotator": "bench"})
    return rows


def write_files(folder: Path, conversational: bool) -> list[Path]:
    """A store with these rankings, and its pairs as TRL files; returns the files (24 pairs each)."""
    from annotation.actions import write_trl_pairs
    from annotation.imports import import_preferences

    db = str(folder / "store.duckdb")
    lines = folder / "rankings.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in _rows(conversational)))
    import_preferences(db, str(lines), "auto", "")  # what `rlhf import` does
    files = [folder / "pairs.jsonl", folder / "pairs.parquet", folder / "pairs-ds"]
    for out in files:
        write_trl_pairs(db, out)  # what `rlhf pairs --format trl --out OUT` does
    return files


def load(path: Path):
    """The file as a TRL user loads it."""
    import datasets

    if path.suffix == ".jsonl":
        return datasets.load_dataset("json", data_files=str(path), split="train")
    if path.suffix == ".parquet":
        return datasets.load_dataset("parquet", data_files=str(path), split="train")
    return datasets.load_from_disk(str(path))


def _weights(model) -> list:
    return [p.detach().clone() for p in model.parameters() if p.requires_grad]


def train(kind: str, data, model_dir: Path, out: Path) -> dict:
    """Two steps of TRL's `kind` trainer on `data`, unchanged; what it took and did."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer
    from trl import DPOConfig, DPOTrainer, RewardConfig, RewardTrainer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.pad_token = "<|endoftext|>" if tok.pad_token in (None, tok.eos_token) else tok.pad_token
    torch.manual_seed(0)
    common = dict(
        output_dir=str(out),
        per_device_train_batch_size=4,
        max_steps=2,
        learning_rate=1e-3,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        seed=0,
    )
    if kind == "reward":
        model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1, dtype=torch.float32)
        model.config.pad_token_id = tok.pad_token_id
        trainer = RewardTrainer(
            model=model, args=RewardConfig(**common, max_length=256), train_dataset=data, processing_class=tok
        )
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        model.config.pad_token_id = tok.pad_token_id
        args = DPOConfig(**common, max_length=256, beta=0.1)
        trainer = DPOTrainer(model=model, args=args, train_dataset=data, processing_class=tok)
    before = _weights(trainer.model)
    trainer.train()
    losses = [row["loss"] for row in trainer.state.log_history if "loss" in row]
    moved = any(not torch.equal(a, b) for a, b in zip(before, _weights(trainer.model), strict=True))
    return {"pairs": len(trainer.train_dataset), "losses": losses, "moved": moved}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="keep the files and runs here (default: a temporary folder)")
    args = p.parse_args()
    from training.models import resolve_model
    from training.tiny import build_plain_model

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.out or tmp)
        resolve_model("default")  # the tokenizer and chat template the tiny model copies
        model_dir = root / "tiny"
        if not (model_dir / "config.json").exists():
            model_dir = build_plain_model(model_dir, hidden=32, seed=0)
        failed, rows = 0, []
        for conversational in (False, True):
            folder = root / ("conversations" if conversational else "text")
            folder.mkdir(parents=True, exist_ok=True)
            for path in write_files(folder, conversational):
                data = load(path)
                for kind in ("reward", "dpo"):
                    got = train(kind, data, model_dir, folder / f"{kind}-{path.stem}")
                    ok = got["pairs"] == len(data) == 24 and got["moved"]
                    ok = ok and bool(got["losses"]) and all(math.isfinite(x) for x in got["losses"])
                    failed += not ok
                    rows.append({"file": f"{folder.name}/{path.name}", "trainer": kind, **got, "ok": ok})
                    losses = ", ".join(f"{x:.4f}" for x in got["losses"])
                    print(
                        f"{'ok  ' if ok else 'FAIL'} {folder.name}/{path.name:<14} {kind:<6} pairs {got['pairs']} "
                        f"losses {losses} weights moved: {got['moved']}",
                        flush=True,
                    )
        (root / "trl_files.json").write_text(json.dumps(rows, indent=1))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

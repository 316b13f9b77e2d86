"""The bench workloads on a CUDA GPU, rlhf-studio alone, one process, bf16; prints one table. Called by
bench/gpu_check.sh. The peers are not run here: their CPU figures come from `make bench`.

- PPO: bench/ppo.py's workload (8 prompts of 64 tokens, exactly 64 new tokens, ppo_epochs 1), ZeRO 2 and 3;
- DPO: bench/dpo.py's ranking-shaped pairs (192 pairs, 12 per step, 64 + 64 tokens), ZeRO 0 and 3;
- reward model: bench/reward.py's pairs (64 rankings of K = 4, 384 pairs, 12 per step, 128 tokens), ZeRO 0.

`--model FOLDER` runs them on another model folder; one holding a config and a tokenizer but no weights gets
seeded random weights first (same architecture, same shapes: the speed of a step does not depend on the weights,
and a fixed number of new tokens keeps PPO's decode the same length)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path


def random_weights(folder: Path) -> None:
    """Seeded random weights for a folder that has a config and a tokenizer only."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if any(folder.glob("*.safetensors")):
        return
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(folder))
    model.save_pretrained(folder)


def ppo_rows(model: str, tmp: Path) -> list[dict]:
    from bench.ppo import run_ours, workload

    w = workload(tmp, model)
    rows = []
    for stage in (2, 3):
        r = run_ours(w, tmp, "bf16", zero_stage=stage)
        rows.append({"what": "PPO step", "zero": stage, "unit": "s/step", "value": r["s_per_step"], **r})
    return rows


def dpo_rows(model: str, tmp: Path) -> list[dict]:
    from transformers import AutoTokenizer

    from bench.dpo import _ours, make_pairs
    from training.models import pick_pad_token, resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model(model))
    pick_pad_token(tok)
    pairs_file = tmp / "dpo-pairs.jsonl"
    pairs_file.write_text("".join(json.dumps(r) + "\n" for r in make_pairs(tok, 192, "ranking")))
    rows = []
    for stage in (0, 3):
        r = _ours(tmp, model, f"dpo-z{stage}", pairs_file, "bf16", zero_stage=stage)
        rows.append({"what": "DPO, ranking-shaped", "zero": stage, "unit": "pairs/s", "value": r["pairs_per_s"], **r})
    return rows


def reward_rows(model: str, tmp: Path) -> list[dict]:
    from transformers import AutoTokenizer

    from bench.reward import _ours, make_pairs
    from training.models import pick_pad_token, resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model(model))
    pick_pad_token(tok)
    pairs_file = tmp / "rm-pairs.jsonl"
    pairs_file.write_text("".join(json.dumps(r) + "\n" for r in make_pairs(tok, 64)))
    r = _ours(tmp, pairs_file, "bf16", model=model)
    return [{"what": "reward model", "zero": 0, "unit": "pairs/s", "value": r["pairs_per_s"], **r}]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="default")
    p.add_argument("--only", default="ppo,dpo,reward")
    p.add_argument("--out", help="also write the rows as JSON here")
    p.add_argument("--record", help="a note for docs/benchmarks.md: keep these rows there as its GPU section")
    args = p.parse_args()
    if args.model != "default":
        random_weights(Path(args.model))
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as d:
        for name, fn in (("ppo", ppo_rows), ("dpo", dpo_rows), ("reward", reward_rows)):
            if name in args.only.split(","):
                (Path(d) / name).mkdir()
                try:
                    rows += fn(args.model, Path(d) / name)
                except Exception as e:  # one workload failing still reports the others
                    rows.append({"what": name, "error": f"{type(e).__name__}: {e}"})
                if args.out:
                    Path(args.out).write_text(json.dumps(rows, indent=1))
    if args.record and not any("error" in r for r in rows):
        record(rows, args.record)
    print("\nbf16, one GPU, one process")
    print("| workload | ZeRO | value | peak GPU MB | peak host MB |")
    print("|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['what']} | failed: {r['error'][:300]} | | | |")
            continue
        print(
            f"| {r['what']} | {r['zero']} | {r['value']:.2f} {r['unit']} | "
            f"{r.get('peak_gpu_mb', 0):.0f} | {r['peak_rss_mb']:.0f} |"
        )


def record(rows: list[dict], note: str) -> None:
    """The rows as docs/benchmarks.json's "gpu" entry (the CPU results kept), and the page written again."""
    import datetime as dt

    import torch

    from bench import report as page

    results = json.loads(page.RESULTS.read_text())
    import deepspeed
    import transformers

    machine = f"one {torch.cuda.get_device_name(0)} (torch {torch.__version__}, DeepSpeed {deepspeed.__version__}, "
    machine += f"transformers {transformers.__version__})"
    from bench.run import provenance

    results["gpu"] = {"machine": machine, "rows": rows, "note": note}
    results.setdefault("ran_at", {})["gpu"] = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    made = provenance(1) | {"command": "bash bench/gpu_check.sh " + " ".join(sys.argv[1:]), "machine": machine}
    results.setdefault("provenance", {})["gpu"] = made
    page.RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    page.write(results)


if __name__ == "__main__":
    main()

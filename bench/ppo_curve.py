"""Does a change keep PPO's learning the same? 20-step score and KL curves, seed by seed, and their comparison.

    python -m bench.ppo_curve run --seeds 0 1 2 --out new.json    # on this checkout (PYTHONPATH picks another)
    python -m bench.ppo_curve compare old.json new.json
    python -m bench.ppo_curve run --seeds 0 1 --min-new-tokens 8 --out eos.json   # EOS allowed from token 8
    python -m bench.ppo_curve run --engine hf --out decode.json   # rollouts by the hand-made decode, not vLLM

`run`: `bench/ppo.py`'s fixed workload (SmolLM2-135M actor and reference, the seeded scalar-head critic and
reward, 8 prompts of 64 tokens a step, exactly 64 new tokens), bf16, 20 steps per seed; writes each seed's
reward/score_mean, reward/kl and seconds per step. `compare`: per-run means of score and KL (over the 20 steps
and over steps 11-20) and the difference of the two sets' means with a Welch 95% interval. Seeds change the
sampling, so a kernel that rounds differently gives a different trajectory; what must hold is the mean within
the interval. Not part of `make bench`: it checks learning, not speed (about 2.5 minutes a seed here)."""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import tempfile
from pathlib import Path

STEPS = 20
T975 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26, 10: 2.23}


def welch_interval(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """(mean(b) - mean(a), low, high): Welch's 95% interval, with Welch-Satterthwaite's degrees of freedom rounded
    down (t = 2.0 past ten)."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    diff, se = statistics.mean(b) - statistics.mean(a), math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if va + vb else 1.0
    half = T975.get(max(1, math.floor(df)), 2.0) * se
    return diff, diff - half, diff + half


def run_seed(w: dict, seed: int, tmp: Path, min_new_tokens: int | None = None, engine: str = "auto") -> dict:
    from bench.ppo import ours_config, train_ours
    from training.runs import read_metrics

    cfg = ours_config(w, "bf16", engine=engine)
    cfg.max_steps, cfg.seed = STEPS, seed
    if min_new_tokens is not None:  # EOS allowed from this token on (the workload holds it back to the last)
        cfg.min_new_tokens = min_new_tokens
    run, rows = train_ours(cfg, w["prompts"], tmp, f"curve-seed{seed}")
    keys = {"score": "reward/score_mean", "kl": "reward/kl", "step_s": "perf/step_s"}
    engine = next(r.get("rollout_engine", "hf") for r in read_metrics(run) if r.get("event") == "start")
    return {"seed": seed, "engine": engine} | {name: [r[key] for r in rows] for name, key in keys.items()}


def run(seeds: list[int], out: Path, min_new_tokens: int | None = None, engine: str = "auto") -> None:
    """Each seed's curves into `out` as it finishes, with the record of what made them (command, commit, date,
    machine, CPU)."""
    import sys

    from app.jobs.provenance import provenance
    from bench.ppo import workload

    made = provenance(sys.argv[1:], "python -m bench.ppo_curve")
    work = Path(tempfile.mkdtemp(prefix="ppo-curve-"))
    try:
        w = workload(work)
        results = []
        for seed in seeds:
            tmp = Path(tempfile.mkdtemp(prefix="seed-", dir=work))
            results.append(run_seed(w, seed, tmp, min_new_tokens, engine))
            shutil.rmtree(tmp)  # its checkpoints: about 4 GB a run
            out.write_text(json.dumps({"provenance": made, "seeds": results}, indent=1) + "\n")
            print(f"seed {seed}: {summary(results[-1])}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def summary(r: dict) -> str:
    mean = statistics.mean
    return (
        f"score {mean(r['score']):.3f} (steps 11-20 {mean(r['score'][10:]):.3f}), "
        f"KL {mean(r['kl']):+.3f} (steps 11-20 {mean(r['kl'][10:]):+.3f}), "
        f"{statistics.median(r['step_s'][2:]):.2f} s/step, rollouts by {r.get('engine') or 'hf'}"
    )


def compare(old: list[dict], new: list[dict]) -> list[str]:
    lines = []
    for name, runs in (("old", old), ("new", new)):
        lines += [f"{name} seed {r['seed']}: {summary(r)}" for r in runs]
    for key in ("score", "kl"):
        for label, part in (("20 steps", slice(None)), ("steps 11-20", slice(10, None))):
            a = [statistics.mean(r[key][part]) for r in old]
            b = [statistics.mean(r[key][part]) for r in new]
            diff, lo, hi = welch_interval(a, b)
            lines.append(f"{key} over {label}: new - old = {diff:+.3f}, 95% interval [{lo:+.3f}, {hi:+.3f}]")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--min-new-tokens", type=int, help="hold EOS back this long only (default: all 64 tokens)")
    r.add_argument(
        "--engine", default="auto", choices=["auto", "vllm", "hf"], help="the rollouts' (auto: vLLM where installed)"
    )
    c = sub.add_parser("compare")
    c.add_argument("old", type=Path)
    c.add_argument("new", type=Path)
    args = parser.parse_args()
    if args.command == "run":
        run(args.seeds, args.out, args.min_new_tokens, args.engine)
    else:
        print("\n".join(compare(seeds_of(args.old), seeds_of(args.new))))


def seeds_of(path: Path) -> list[dict]:
    """A run file's seeds: {"provenance", "seeds"}, or a bare list of seeds as files from before the record."""
    data = json.loads(path.read_text())
    return data["seeds"] if isinstance(data, dict) else data


if __name__ == "__main__":
    main()

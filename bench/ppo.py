"""PPO speed and memory, rlhf-studio against TRL 0.29.1's `trl.experimental.ppo.PPOTrainer` (the last TRL with PPO,
in the bench-only venv .venv-trl029), on one workload (research/peer_benchmarks.md):

SmolLM2-135M-Instruct as actor and reference; critic and reward the same backbone with one seeded scalar head;
chat-templated prompts of exactly 64 tokens; exactly 64 new tokens (min = max), sampling T = 1, top_p = 1;
8 prompts per step; ppo_epochs 1; one minibatch; ZeRO 0; one process. Metric: median seconds per step over
steps 3..8, tokens/s = 8 x (64 + 64) / median, the generation share, peak RSS of the training process.

Beside that fixed shape, the shape a user runs by default (bf16): `rlhf train-ppo`'s defaults but the batch, 8
prompts as TRL's (up to 128 new tokens, EOS ends a response, a sample logged every step) on everyday prompts of
mixed length, the critic and reward the default model with a scalar head (what `rlhf train-rm` trains by default);
TRL with the same lengths and `stop_token="eos"`. The decode steps each side took (to the last row's EOS) are
reported with it: sampling makes them differ from run to run."""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
from pathlib import Path

from bench.fair import PRECISION, peer_env, wall_step_s

ROOT = Path(__file__).resolve().parent.parent
TRL_PYTHON = ROOT / ".venv-trl029" / "bin" / "python"
PROMPT_TOKENS, NEW_TOKENS, BATCH, STEPS = 64, 64, 8, 8
TOPICS = (
    "how to bake bread at home",
    "why the sky is blue",
    "a good way to learn a new language",
    "how plants make food from light",
    "what to pack for a weekend hike",
    "how to write a polite email to a teacher",
    "the history of the bicycle",
    "tips for sleeping better",
)
FILLER = "please explain it simply with one clear example and a short summary at the end for a beginner".split()


def fixed_length_prompts(tokenizer, n: int = 64, length: int = PROMPT_TOKENS) -> list[str]:
    """Everyday prompts whose chat-templated form is exactly `length` tokens (filler words added one by one)."""
    from training.models import chat_prompt

    out = []
    for i in range(n * 4):
        words = f"Question {i}: tell me {TOPICS[i % len(TOPICS)]}".split()
        for w in FILLER * 4:
            n_tokens = len(tokenizer(chat_prompt(tokenizer, " ".join(words)), add_special_tokens=False)["input_ids"])
            if n_tokens >= length:
                break
            words.append(w)
        if n_tokens == length:
            out.append(" ".join(words))
        if len(out) == n:
            return out
    raise RuntimeError(f"could not build {n} prompts of exactly {length} tokens")


def mixed_length_prompts(n: int = BATCH * STEPS) -> list[str]:
    """The app's example prompts (one line each, 8-25 words), then questions on TOPICS with 0-18 filler words."""
    from annotation.actions import example_prompts_path

    prompts = example_prompts_path().read_text().splitlines()
    i = 0
    while len(prompts) < n:
        prompts.append(" ".join([f"Tell me {TOPICS[i % len(TOPICS)]},", *FILLER[: (i * 7) % 22]]))
        i += 1
    return prompts[:n]


def workload(tmp: Path, model: str = "default") -> dict:
    """The model's folder (the default one unless told), the seeded scalar-head model (critic and reward) and the
    prompts file."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from training.models import resolve_model

    actor = resolve_model(model)
    scalar = tmp / "scalar-head"
    if not (scalar / "config.json").exists():
        torch.manual_seed(0)
        model = AutoModelForSequenceClassification.from_pretrained(actor, num_labels=1)
        model.save_pretrained(scalar)
        AutoTokenizer.from_pretrained(actor).save_pretrained(scalar)
    prompts = fixed_length_prompts(AutoTokenizer.from_pretrained(actor))
    path, mixed_path, mixed = tmp / "prompts.jsonl", tmp / "mixed.jsonl", mixed_length_prompts()
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    mixed_path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in mixed))
    return {
        "actor": str(actor),
        "scalar": str(scalar),
        "prompts": str(path),
        "prompt_list": prompts,
        "mixed": str(mixed_path),
        "mixed_list": mixed,
    }


def summarize(step_s: list[float], gen_s: list[float], peak_mb: float, decoded: list[float], fixed: bool) -> dict:
    """Medians over steps 3..8; the decode steps each step took, as the run counted them (the default shape's vary,
    so its ratio carries that noise), and the fixed shape's tokens a second."""
    window = slice(2, STEPS)  # steps 3..8
    median = statistics.median(step_s[window])
    extra = {"decoded": statistics.median(decoded[window])}
    if fixed:
        extra["tokens_per_s"] = BATCH * (PROMPT_TOKENS + NEW_TOKENS) / median
    return extra | {
        "s_per_step": median,
        "gen_share": statistics.median(gen_s[window]) / median,
        "gen_s": statistics.median(gen_s[window]),
        "peak_rss_mb": peak_mb,
        "steps": len(step_s),
    }


def ours_config(w: dict, dtype: str, zero_stage: int = 0, shape: str = "fixed", engine: str = "auto"):
    """Ours on the workload: the fixed shape pins prompt and response lengths and the batch to the TRL run's; the
    default shape leaves PPOConfig's defaults but the batch, which both shapes pin to TRL's (8 prompts, one
    minibatch)."""
    from training.ppo.config import PPOConfig

    fixed = dict(
        max_prompt_length=PROMPT_TOKENS,
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        sample_every=0,
        zero_stage=zero_stage,
    )
    return PPOConfig(
        actor=w["actor"],
        reward=w["scalar"],
        critic=w["scalar"],
        max_steps=STEPS,
        dtype=dtype,
        rollout_engine=engine,
        generation_batch_size=BATCH,
        minibatch_size=BATCH,
        **({} if shape == "default" else fixed),
    )


def train_ours(cfg, prompts: str, tmp: Path, name: str) -> tuple[Path, list[dict]]:
    """One rlhf-studio PPO run through the launcher, as the app starts it: (run folder, its step rows)."""
    from app.jobs.training import follow, prepare_run
    from training.launcher import launch
    from training.registry import step_rows
    from training.runs import read_metrics

    run = prepare_run(str(tmp / f"{name}.duckdb"), cfg, tmp / "runs", prompts)
    status = follow(run, launch("ppo", run), poll_s=2.0)
    if status.get("state") != "finished":
        raise RuntimeError(f"rlhf-studio PPO run failed: {status.get('error')} (see {run / 'train.log'})")
    return run, step_rows("ppo", read_metrics(run))


def run_ours(w: dict, tmp: Path, dtype: str, zero_stage: int = 0, shape: str = "fixed", engine: str = "auto") -> dict:
    """One PPO run of ours on the workload; engine: the rollouts' (auto: vLLM where it is installed)."""
    from training.runs import read_metrics

    cfg = ours_config(w, dtype, zero_stage, shape, engine)
    prompts = w["mixed"] if shape == "default" else w["prompts"]
    run, rows = train_ours(cfg, prompts, tmp, f"bench-{dtype}-{shape}-{engine}")
    metrics = read_metrics(run)
    final = next(r for r in metrics if r.get("event") == "final")
    start = next(r for r in metrics if r.get("event") == "start")["time"]
    # by the wall clock between step ends, as TRL's callback times its steps (bench/fair.py)
    step_s = wall_step_s(start, [r["time"] for r in rows])
    decoded = [r["response/decoded"] for r in rows]
    out = summarize(step_s, [r["perf/gen_s"] for r in rows], final["perf/peak_rss_mb"], decoded, shape != "default")
    out["precision"] = PRECISION[dtype]["rlhf_studio"]
    if "perf/peak_gpu_mb" in final:
        out["peak_gpu_mb"] = final["perf/peak_gpu_mb"]
    out["score_s"] = statistics.median(r["perf/score_s"] for r in rows[2:])
    out["train_s"] = statistics.median(r["perf/train_s"] for r in rows[2:])
    out["parts"] = parts(rows[2:])
    out["memory"] = {
        k.removeprefix("memory/").removesuffix("_mb"): v for k, v in final.items() if k.startswith("memory/")
    }
    line = next(r for r in metrics if r.get("event") == "start").get("rollout_engine", "hf")
    out["engine"], out["engine_why"] = line.split(" ", 1)[0], line  # 'hf' or 'vllm', and the run's own line
    return out


def parts(rows: list[dict]) -> dict[str, float]:
    """The profile: median seconds of each timed part of a step (training/rollouts/profile.py) over these steps."""
    names = sorted({k for r in rows for k in r if k.startswith("perf/part/")})
    return {
        n.removeprefix("perf/part/").removesuffix("_s"): statistics.median(r.get(n, 0.0) for r in rows) for n in names
    }


def run_trl(w: dict, tmp: Path, dtype: str, shape: str = "fixed") -> dict:
    if not TRL_PYTHON.exists():
        raise RuntimeError("the TRL 0.29.1 bench venv is missing: run `make bench` (it creates .venv-trl029)")
    spec = tmp / f"trl-ppo-{dtype}-{shape}.json"
    shaped = {"prompt_list": w["mixed_list"], "new_tokens": 128, "stop_at_eos": True} if shape == "default" else {}
    spec.write_text(
        json.dumps({**w, "dtype": dtype, "out": str(tmp / f"trl-ppo-{dtype}-{shape}"), "steps": STEPS, **shaped})
    )
    env = peer_env({"PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    if dtype == "bf16":  # TRL 0.29.1 ignores bf16=True under transformers 5 unless accelerate is told as well
        env["ACCELERATE_MIXED_PRECISION"] = "bf16"
    proc = subprocess.run(
        [str(TRL_PYTHON), str(Path(__file__).parent / "trl_ppo.py"), str(spec)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"TRL PPO failed: {proc.stderr.strip().splitlines()[-1:]}")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    out = summarize(r["step_s"], r["gen_s"], r["peak_rss_mb"], r["decoded"], shape != "default")
    return out | {"precision": PRECISION[dtype]["trl"]}


def run(cases: tuple[tuple[str, str], ...] = (("fp32", "fixed"), ("bf16", "fixed"), ("bf16", "default"))) -> list[dict]:
    """One row per (dtype, shape): ours with the rollouts `auto` picks on this machine (on a CPU the own decode,
    on a GPU vLLM), ours with the other engine where vLLM is installed, then TRL's, on the same prompts. The speed
    ratio is TRL's median seconds per step over ours (auto's); the engine ratio the own decode's over vLLM's."""
    from training.sampling.vllm_engine import vllm_installed

    results = []
    with tempfile.TemporaryDirectory(prefix="bench-ppo-") as d:
        tmp = Path(d)
        w = workload(tmp)
        for dtype, shape in cases:
            ours = run_ours(w, tmp, dtype, shape=shape)
            arms = {ours["engine"]: ours}
            if vllm_installed():
                other = "vllm" if ours["engine"] == "hf" else "hf"
                arms[other] = run_ours(w, tmp, dtype, shape=shape, engine=other)
            trl = run_trl(w, tmp, dtype, shape)
            row = {
                "dtype": dtype,
                "shape": shape,
                "rlhf_studio": ours,
                "trl": trl,
                "speed_ratio": trl["s_per_step"] / ours["s_per_step"],
                "memory_ratio": ours["peak_rss_mb"] / trl["peak_rss_mb"],
            }
            if len(arms) == 2:
                row["rlhf_studio_vllm"], row["rlhf_studio_own_decode"] = arms["vllm"], arms["hf"]
                row["engine_speed_ratio"] = arms["hf"]["s_per_step"] / arms["vllm"]["s_per_step"]
            results.append(row)
    return results

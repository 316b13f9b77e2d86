"""`rlhf demo`: the whole loop on the bundled prompts with a scripted annotator, and a report that says whether it
worked.

1. A store of its own (DEMO/store.duckdb) gets the training prompts; the last `heldout` prompts of the set are kept
   out of everything until the evaluation.
2. The SFT model samples K responses per prompt; the scripted annotator (annotation/scripted.py: "concise") ranks
   them, and the store expands the rankings into pairs.
3. `train-rm` on a snapshot of the store, then `train-ppo` from the SFT model with that reward model, both through
   the DeepSpeed launcher exactly as the CLI runs them.
4. On the held-out prompts: K samples from the reference (the SFT model) and from the tuned actor. The reward
   model's accuracy on the annotator's pairs of the reference samples, the mean score of each model's samples,
   and the actor's win rate over the reference as judged by the scripted annotator (not by the reward model).
5. DEMO/report.md with PNG plots, DEMO/results.json, and the headline numbers printed.

`--quick` runs the same steps on tiny models built on the spot (training/tiny.py) with a few dozen prompts, for
CI: there the checks ask only that every quantity moves the right way."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import secrets
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from annotation import scripted
from annotation.imports import ImportSummary, store_rankings
from annotation.winrate import bootstrap_ci
from app.demo_config import DemoConfig
from app.demo_methods import method_rows, methods_of, run_dpo, run_rloo
from app.sampling import run_sampling
from app.training import prepare_run, run_training
from store.db import connect, write
from store.errors import UserError
from store.prompts import add_prompts
from store.rankings import RankedItem, RankingIn
from training.generation import Sampler, SamplingConfig
from training.ppo.config import PPOConfig
from training.registry import step_rows, trainer
from training.reward.config import RewardConfig
from training.runs import read_metrics, read_status
from training.scoring import score_texts

DEMO_PROMPTS = "demo_prompts.txt"
SAMPLE_KEYS = (
    ("reference", "reference"),
    ("actor", "ppo"),
    ("dpo", "dpo"),
    ("rloo", "rloo"),
)  # samples.jsonl key, method


# What "it worked" means: the thresholds for the full demo, the right direction for --quick. A bar at
# chance (0.5) must be beaten, not met: a win rate of exactly 0.5 is no evidence that PPO did anything.
FULL_BARS = {"rm_accuracy": 0.85, "win_rate": 0.65}
QUICK_BARS = {"rm_accuracy": 0.5, "win_rate": 0.5}
CHANCE = 0.5


def demo_prompts_path() -> Path:
    return Path(str(resources.files("annotation").joinpath("data", DEMO_PROMPTS)))


def split_prompts(texts: list[str], heldout: int) -> tuple[list[str], list[str]]:
    if heldout < 1 or len(texts) - heldout < 16:
        raise UserError(f"{len(texts)} prompts cannot give {heldout} held-out ones and 16+ to train on")
    return texts[:-heldout], texts[-heldout:]


def bundled_prompts(n: int) -> list[str]:
    texts = [line.strip() for line in demo_prompts_path().read_text().splitlines() if line.strip()]
    return texts[:n] if n else texts


def check(cfg: DemoConfig) -> None:
    """Every setting that can be wrong, before anything is written."""
    from training.models import resolve_model

    if cfg.k < 2:
        raise UserError(f"--k must be at least 2 to rank responses, got {cfg.k}")
    if cfg.dtype not in ("auto", "fp32", "bf16"):
        raise UserError(f"--dtype must be auto, fp32 or bf16, got {cfg.dtype}")
    if not 1 <= cfg.min_new_tokens < cfg.max_new_tokens:
        raise UserError("--min-new-tokens must be at least 1 and below --max-new-tokens")
    train, _ = split_prompts(bundled_prompts(cfg.n_prompts), cfg.heldout)
    methods_of(cfg)
    try:
        dataclasses.replace(PPOConfig(reward="r"), **ppo_settings(cfg.ppo_settings)).check()
    except ValueError as e:
        raise UserError(f"--ppo-settings: {e}") from None
    if cfg.rounds < 1:
        raise UserError(f"--rounds must be at least 1, got {cfg.rounds}")
    if cfg.rounds > 1:
        from app.demo_rounds import budget_of, selects_of

        budget_of(cfg, len(train))
        selects_of(cfg)
    for ref in (cfg.model, cfg.reward_base):
        if ref and ref != "tiny":
            resolve_model(ref)


def rank_samples(db: str | Path, round_: int | None = None) -> ImportSummary:
    """The scripted annotator ranks every prompt's responses (empty and repeated ones left out), in one transaction;
    with a round, that round's responses only."""
    with connect(db) as con:
        rows = con.execute(
            "SELECT p.text, r.response_id, r.text FROM responses r JOIN prompts p USING (prompt_id) "
            "JOIN response_round x USING (response_id) WHERE ? IS NULL OR x.round = ? "
            "ORDER BY r.prompt_id, r.position",
            [round_, round_],
        ).fetchall()
    by_prompt: dict[str, list[tuple[int, str]]] = {}
    for prompt, rid, text in rows:
        by_prompt.setdefault(prompt, []).append((rid, text))
    rankings, summary = [], ImportSummary()
    for prompt, items in by_prompt.items():
        summary.tasks += 1
        keep = [items[i] for i in scripted.rankable([t for _, t in items])]
        if len(keep) < 2:
            summary.skipped["fewer than 2 distinct responses"] += 1
            continue
        ranks = scripted.rank([t for _, t in keep])
        rankings.append(
            RankingIn(
                prompt=prompt,
                items=[
                    RankedItem(text=t, rank=r, shown_position=i, response_id=rid)
                    for i, ((rid, t), r) in enumerate(zip(keep, ranks, strict=True))
                ],
                annotator=scripted.NAME,
                source="scripted",
                external_key=f"scripted:{keep[0][0]}",
            )
        )
    summary.annotations = len(rankings)
    return store_rankings(db, rankings, summary, source="scripted", origin=scripted.NAME, content_sha256=None)


def sampling_config(cfg: DemoConfig, model: str) -> SamplingConfig:
    """One way of sampling for the annotation data, PPO's rollouts and the evaluation: temperature 1, no top-p."""
    return SamplingConfig(
        model=model,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=cfg.max_new_tokens,
        min_new_tokens=cfg.min_new_tokens,
        batch_prompts=8,
        dtype=cfg.dtype,
        seed=cfg.seed,
    )


def sample_texts(sampler: Sampler, prompts: list[str], k: int, seed: int) -> list[list[str]]:
    out, step = [], sampler.config.batch_prompts
    for start in range(0, len(prompts), step):
        out += [[g.text for g in gens] for gens in sampler(prompts[start : start + step], k, seed + start)]
    return out


def pair_counts(texts: list[list[str]], scores: list[list[float]]) -> list[tuple[int, int]]:
    """Per prompt: (pairs the reward model orders as the annotator does, the annotator's pairs); ties make no pair,
    a tied score counts as wrong."""
    out = []
    for ts, ss in zip(texts, scores, strict=True):
        keep = scripted.rankable(ts)
        ranks = scripted.rank([ts[i] for i in keep])
        right = total = 0
        for a in range(len(keep)):
            for b in range(len(keep)):
                if ranks[a] < ranks[b]:
                    total += 1
                    right += ss[keep[a]] > ss[keep[b]]
        out.append((right, total))
    return out


def pair_accuracy(texts: list[list[str]], scores: list[list[float]]) -> tuple[float, int]:
    """Share of the annotator's pairs (within each prompt) that the reward model orders the same way, and how many."""
    counts = pair_counts(texts, scores)
    right, total = sum(r for r, _ in counts), sum(t for _, t in counts)
    return (right / total if total else float("nan")), total


def win_rates(actor: list[list[str]], reference: list[list[str]]) -> list[float]:
    """Per prompt: the annotator's mean verdict over every (actor sample, reference sample) couple."""
    return [
        sum(scripted.judge(a, r) for a in acts for r in refs) / (len(acts) * len(refs))
        for acts, refs in zip(actor, reference, strict=True)
    ]


def compare(a: list[list[str]], b: list[list[str]], seed: int) -> dict:
    """a's win rate over b by the scripted annotator (per prompt, then the mean), with its bootstrap interval over
    prompts: every matchup of the report (PPO or DPO against the reference, PPO against DPO) is judged this way."""
    per_prompt = win_rates(a, b)
    lo, hi = bootstrap_ci(per_prompt, seed=seed)
    return {"win_rate": sum(per_prompt) / len(per_prompt), "ci95": [lo, hi]}


def mean_words(texts: list[list[str]]) -> float:
    flat = [len(t.split()) for ts in texts for t in ts]
    return sum(flat) / len(flat)


def _mean(xs: list[list[float]]) -> float:
    flat = [x for row in xs for x in row]
    return sum(flat) / len(flat)


def new_demo_dir(runs_dir: Path) -> Path:
    folder = runs_dir / f"demo-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    folder.mkdir(parents=True)
    return folder


def _finished(kind: str, run: Path, status: dict) -> None:
    if status.get("state") != "finished":
        raise UserError(f"the demo's {kind} run {run.name} {status.get('state')}: {status.get('error', run)}")


def run_demo(cfg: DemoConfig, folder: Path, quick: bool = False, log: Callable[[str], None] = print) -> dict:
    """Every step of the demo into `folder`; returns the results (also written to folder/results.json)."""
    from app.demo_watch import run_watch_part
    from training.precision import with_resolved_dtype

    t0 = time.time()
    timings: dict[str, float] = {}
    cfg, dtype_line = with_resolved_dtype(cfg)  # every step, and results.json, name the dtype it ran in
    log(dtype_line)

    def lap(name: str, since: float) -> float:
        timings[name] = round(time.time() - since, 1)
        log(f"[{time.time() - t0:6.0f} s] {name}: {timings[name]:.0f} s")
        return time.time()

    t = time.time()
    model, reward_base, train, heldout, db = set_up(cfg, folder)
    t = lap("set-up", t)
    reference, ranked = sample_and_rank(cfg, db, model, heldout, log)
    t = lap("sampling (training prompts, and the reference on held-out prompts)", t)
    runs = folder / "runs"
    rm_cfg, rm_run, rm_final = train_reward(cfg, db, reward_base, runs, log)
    t = lap("reward model", t)
    ppo_run = train_ppo(cfg, db, model, rm_run, runs, log)
    t = lap("PPO", t)
    actor, scored = evaluate_actor(cfg, rm_run, ppo_run, heldout, reference, rm_cfg.max_length)
    t = lap("evaluation", t)
    texts = {"reference": reference, "ppo": actor}
    watch = run_watch_part(cfg, model, rm_run, ppo_run, heldout, texts, rm_cfg.max_length, log)
    t = lap("checkpoints and best-of-N", t)
    dpo = run_dpo(cfg, db, model, rm_run, heldout, texts, log) if "dpo" in methods_of(cfg) else {}
    if dpo:
        t = lap("DPO (training and evaluation)", t)
    rloo = run_rloo(cfg, db, model, rm_run, ppo_run, heldout, texts, log) if "rloo" in methods_of(cfg) else {}
    if rloo:
        t = lap("RLOO (training and evaluation)", t)

    results = {
        "quick": quick,
        "config": dataclasses.asdict(cfg),
        "folder": str(folder),
        "reward_run": rm_run.name,
        "ppo_run": ppo_run.name,
        "train_prompts": len(train),
        "heldout_prompts": len(heldout),
        "rankings": ranked.added,
        "pairs": ranked.pairs,
        **scored,
        "rm_accuracy_eval_split": rm_final["eval/rm_accuracy"],
        "rm_eval_split_pairs": rm_final["eval/pairs"],
        **ppo_curve(ppo_run),
        **watch,
        **dpo,
        **rloo,
        "timings_s": timings,
        "total_s": round(time.time() - t0, 1),
    }
    results["checks"] = checks(results, QUICK_BARS if quick else FULL_BARS)
    (folder / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    write_samples(folder / "samples.jsonl", heldout, texts)
    from app.demo_report import write_report

    write_report(folder, results, rm_run, ppo_run)
    return results


def train_reward(cfg: DemoConfig, db: str, reward_base: str, runs: Path, log) -> tuple[RewardConfig, Path, dict]:
    """The reward model (an ensemble with --rm-ensemble) on the ranked pairs: (config, run folder, final metrics)."""
    rm_cfg = RewardConfig(
        model=reward_base, epochs=cfg.rm_epochs, lr=cfg.rm_lr, dtype=cfg.dtype, seed=cfg.seed, ensemble=cfg.rm_ensemble
    )
    rm_run = prepare_run(db, rm_cfg, runs)
    _finished("reward", rm_run, run_training("reward", rm_run))
    rm_final = read_status(rm_run)["final"]
    log(f"reward model: held-out accuracy {rm_final['eval/rm_accuracy']:.3f} on {rm_final['eval/pairs']} pairs")
    return rm_cfg, rm_run, rm_final


def evaluate_actor(
    cfg: DemoConfig, rm_run: Path, ppo_run: Path, heldout: list[str], reference: list, max_length: int
) -> tuple[list, dict]:
    """The PPO actor's samples on the held-out prompts, and the results' evaluation fields: the reward model's
    scores and pair accuracy, mean words, and the annotator's win rate against the reference."""
    actor_sampler = Sampler(sampling_config(cfg, str(ppo_run / "actor")))
    actor = sample_texts(actor_sampler, heldout, cfg.k, cfg.seed + 2 * 10**6)
    del actor_sampler
    ref_scores = score_texts(rm_run / "model", heldout, reference, cfg.dtype, max_length)
    actor_scores = score_texts(rm_run / "model", heldout, actor, cfg.dtype, max_length)
    accuracy, acc_pairs = pair_accuracy(reference, ref_scores)
    ppo_vs_ref = compare(actor, reference, cfg.seed)
    return actor, {
        "rm_accuracy_heldout_prompts": accuracy,
        "rm_accuracy_pairs": acc_pairs,
        "score_reference": _mean(ref_scores),
        "score_actor": _mean(actor_scores),
        "words_reference": mean_words(reference),
        "words_actor": mean_words(actor),
        "win_rate": ppo_vs_ref["win_rate"],
        "win_rate_ci95": ppo_vs_ref["ci95"],
    }


def write_samples(path: Path, heldout: list[str], texts: dict) -> None:
    """One line per held-out prompt with each model's samples (samples.jsonl)."""
    path.write_text(
        "".join(
            json.dumps({"prompt": p, **{k: texts[name][i] for k, name in SAMPLE_KEYS if name in texts}}) + "\n"
            for i, p in enumerate(heldout)
        )
    )


def set_up(cfg: DemoConfig, folder: Path) -> tuple[str, str, list[str], list[str], str]:
    """The models (tiny ones built on the spot for --quick), the prompts split, and the demo's store with the
    training prompts: (model, reward base, training prompts, held-out prompts, store path)."""
    from training.models import resolve_model
    from training.tiny import build_plain_model, build_talking_model

    if cfg.model == "tiny":
        model = str(build_talking_model(folder / "models" / "actor"))
        reward_base = cfg.reward_base or str(build_plain_model(folder / "models" / "reward-base"))
    else:
        resolve_model(cfg.model)
        model, reward_base = cfg.model, cfg.reward_base or cfg.model
    train, heldout = split_prompts(bundled_prompts(cfg.n_prompts), cfg.heldout)
    (folder / "heldout_prompts.txt").write_text("\n".join(heldout) + "\n")
    db = str(folder / "store.duckdb")
    with write(db) as con:
        add_prompts(con, train, source="demo")
    return model, reward_base, train, heldout, db


def sample_and_rank(
    cfg: DemoConfig, db: str, model: str, heldout: list[str], log: Callable[[str], None]
) -> tuple[list[list[str]], ImportSummary]:
    """K samples of the SFT model per training prompt into the store, ranked there by the scripted annotator;
    returns the reference's samples on the held-out prompts and the ranking summary."""
    sampler = Sampler(sampling_config(cfg, model))
    report = run_sampling(db, sampler, cfg.k)
    log(report.line())
    reference = sample_texts(sampler, heldout, cfg.k, cfg.seed + 10**6)
    del sampler
    ranked = rank_samples(db)
    log(f"scripted annotator: {ranked.added} rankings, {ranked.pairs} pairs")
    if ranked.pairs == 0:
        raise UserError("the scripted annotator found no pair to rank: every prompt's responses tied")
    return reference, ranked


def ppo_settings(text: str) -> dict:
    """--ppo-settings "key=value,key=value" as PPOConfig fields of their types; one error line for a key PPO does
    not have, one the demo sets itself, or a value of the wrong type."""
    import dataclasses as dc
    import typing

    hints = typing.get_type_hints(PPOConfig)
    own = set(_ppo_kwargs(DemoConfig(), "", Path(), 0, 0, 0)) | {"output_dir", "prompts"}  # the launcher's two
    known = {f.name for f in dc.fields(PPOConfig)}
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in known:
            raise UserError(f"--ppo-settings: {item!r} is not key=value with a PPO setting as the key")
        if key in own:
            raise UserError(f"--ppo-settings: {key} is the demo's own flag (--{key.replace('_', '-')})")
        kind = hints[key]
        try:
            if kind is bool:
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(value)
                out[key] = value.lower() in ("true", "1")
            else:
                out[key] = kind(value)
        except ValueError:
            raise UserError(f"--ppo-settings: {key} must be {kind.__name__}, got {value!r}") from None
    return out


def ppo_config(cfg: DemoConfig, actor: str, reward: Path, max_steps: int, seed: int, save_every: int = 0) -> PPOConfig:
    """The demo's PPO settings (the rounds study's too) for one run, with --ppo-settings on top."""
    return PPOConfig(**_ppo_kwargs(cfg, actor, reward, max_steps, seed, save_every), **ppo_settings(cfg.ppo_settings))


def _ppo_kwargs(cfg: DemoConfig, actor: str, reward: Path, max_steps: int, seed: int, save_every: int) -> dict:
    """The PPO settings the demo sets itself (--ppo-settings may not name them)."""
    return dict(
        actor=actor,
        reward=str(reward),
        max_new_tokens=cfg.max_new_tokens,
        min_new_tokens=cfg.min_new_tokens,
        epochs=cfg.ppo_epochs,
        max_steps=max_steps,
        actor_lr=cfg.actor_lr,
        critic_lr=cfg.critic_lr,
        kl_ctl=cfg.kl_ctl,
        save_every=save_every,
        dtype=cfg.dtype,
        seed=seed,
    )


def train_ppo(cfg: DemoConfig, db: str, model: str, rm_run: Path, runs: Path, log: Callable[[str], None]) -> Path:
    """PPO from the SFT model against the reward run (its ensemble's member 0, the last member watching),
    checkpointing every cfg.save_every steps, through the launcher as `rlhf train-ppo` runs it."""
    ppo_cfg = ppo_config(cfg, model, rm_run, cfg.ppo_steps, cfg.seed, save_every=cfg.save_every)
    ppo_run = prepare_run(db, ppo_cfg, runs)

    def show(row: dict) -> None:
        line = trainer("ppo").progress(row)
        if line:
            log(f"PPO {line}")

    _finished("PPO", ppo_run, run_training("ppo", ppo_run, on_metrics=show))
    return ppo_run


def ppo_curve(run: Path) -> dict:
    """The run's own count of steps (its status.json) and, for each step 1..N, the KL and score its metrics row
    reports, None where no row or no value is there: a step that logged no KL is a gap the checks can see, not a
    step that is missing from both sides of the comparison."""
    by_step = {r["step"]: r for r in step_rows("ppo", read_metrics(run))}
    n = int(read_status(run).get("step") or 0)
    rows = [by_step.get(step, {}) for step in range(1, n + 1)]
    return {
        "ppo_steps": n,
        "kl_per_step": [r.get("reward/kl") for r in rows],
        "score_per_step": [r.get("reward/score_mean") for r in rows],
    }


def _passes(value: float, bar: float) -> bool:
    return value > bar if bar == CHANCE else value >= bar


def _bar(bar: float) -> str:
    return f"above {bar:.0%} (chance)" if bar == CHANCE else f">= {bar:.0%}"


def _finite(x: object) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def checks(r: dict, bars: dict) -> dict[str, bool]:
    """The demo's claims, each true or false (the watch's two only in the full demo: on tiny models they are noise,
    and the report states them either way)."""
    from app.demo_watch import watch_checks

    kl = r["kl_per_step"]
    return {
        f"reward-model accuracy on held-out prompts {_bar(bars['rm_accuracy'])}": _passes(
            r["rm_accuracy_heldout_prompts"], bars["rm_accuracy"]
        ),
        "the actor's mean reward-model score rose": r["score_actor"] > r["score_reference"],
        "KL to the reference reported at every PPO step": r["ppo_steps"] > 0
        and len(kl) == r["ppo_steps"]
        and all(_finite(x) for x in kl),
        f"win rate over the reference by the scripted annotator {_bar(bars['win_rate'])}": _passes(
            r["win_rate"], bars["win_rate"]
        ),
        **(
            {f"DPO's win rate over the reference {_bar(CHANCE)}": _passes(r["dpo_vs_reference"]["win_rate"], CHANCE)}
            if "dpo_vs_reference" in r
            else {}
        ),
        **(watch_checks(r["watch"]) if r.get("watch") and not r.get("quick") else {}),
    }


def _nats(x: object) -> str:
    return f"{x:.3f}" if _finite(x) else "missing"


def headline(r: dict) -> list[str]:
    lines = [
        f"reward model: {r['rm_accuracy_heldout_prompts']:.1%} of {r['rm_accuracy_pairs']} annotator pairs on "
        f"{r['heldout_prompts']} held-out prompts ({r['rm_accuracy_eval_split']:.1%} on its own eval split)",
        f"mean reward-model score on held-out prompts: reference {r['score_reference']:.3f} -> actor "
        f"{r['score_actor']:.3f}; mean words {r['words_reference']:.1f} -> {r['words_actor']:.1f}",
        f"KL to the reference per PPO step: first {_nats((r['kl_per_step'] or [None])[0])}, last "
        f"{_nats((r['kl_per_step'] or [None])[-1])} nats ({r['ppo_steps']} steps)",
        f"win rate of the actor over the reference (scripted annotator): {r['win_rate']:.1%} "
        f"(95% CI {r['win_rate_ci95'][0]:.1%}-{r['win_rate_ci95'][1]:.1%})",
    ]
    lines += [f"{name}: {w:.1%} (95% CI {lo:.1%}-{hi:.1%})" for name, w, (lo, hi) in method_rows(r)[1:]]
    if "rloo_kl" in r:
        lines.append(
            f"KL to the reference at the last training step: PPO {_nats(r['kl_per_step'][-1])}, RLOO "
            f"{_nats(r['rloo_kl'])} nats"
        )
    if r.get("watch"):
        from app.demo_watch import finding_lines

        lines += finding_lines(r["watch"], r["config"]["best_of"])
    lines += [f"{'PASS' if ok else 'FAIL'}  {name}" for name, ok in r["checks"].items()]
    lines.append(f"report: {Path(r['folder']) / 'report.md'} ({r['total_s'] / 60:.1f} min)")
    return lines

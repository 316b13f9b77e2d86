"""`rlhf demo`: the whole loop on the bundled prompts with scripted annotators, and a report that says whether it
worked.

1. A store of its own (DEMO/store.duckdb) gets the training prompts. With --split topic (the default,
   docs/evaluation.md) the prompts are split by topic into train, validation and test (a template kept for test),
   and every model is judged on the --evaluate-on part only; --split tail holds out the last `heldout` prompts.
2. The SFT model samples K responses per prompt; the taste's labelers rank them (app/studies/demo_taste.py: a
   population of scripted annotators, or the word counter of earlier demos), and the store expands the rankings
   into pairs.
3. `train-rm` on a snapshot of the store, then `train-ppo` from the SFT model with that reward model, both through
   the DeepSpeed launcher exactly as the CLI runs them; then the other --methods.
4. On the judged prompts: K samples from the reference (the SFT model) and from each tuned policy. The reward
   model's accuracy on the truth's pairs of the reference samples, the mean score of each model's samples, and
   each policy's win rate over the reference as the judge sees it (the panel's noise-free taste, which labeled
   nothing; never the reward model), with the share of off-topic answers.
5. DEMO/report.md with PNG plots, DEMO/results.json, and the headline numbers printed.

`--quick` runs the same steps on tiny models built on the spot (training/tiny.py) with a few dozen prompts, for
CI: there the checks ask only that every quantity moves the right way."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from annotation.imports import ImportSummary
from app.jobs.sampling import run_sampling
from app.jobs.training import prepare_run
from app.studies.demo_common import (
    CHANCE,
    compare,
    demo_split,
    demo_taste,
    drop_resume_state,
    finite,
    judging,
    mean_words,
    pair_accuracy,
    ppo_config,
    ppo_settings,
    rank_samples,
    rloo_settings,
    sample_texts,
    sampling_config,
    set_up,
)
from app.studies.demo_config import DemoConfig
from app.studies.demo_methods import ON_PROMPTS, methods_of, run_on_prompts, run_on_snapshot, with_kept_matchup
from app.studies.demo_rm import rm_report, within_prompt_std
from app.studies.demo_taste import off_topic_share
from store.db import StoreRef
from store.errors import UserError
from training.pairwise.scoring import score_texts
from training.ppo.config import PPOConfig
from training.registry import step_rows, trainer
from training.reward.config import RewardConfig
from training.runs import read_metrics, read_status
from training.sampling.generation import open_sampler

SAMPLE_KEYS = (
    ("reference", "reference"),
    ("actor", "ppo"),
    ("dpo", "dpo"),
    ("kto", "kto"),
    ("kept_checkpoint", "ppo_kept"),
    ("rloo", "rloo"),
    ("rloo_pairwise", "rloo_pairwise"),
    ("online_dpo", "online_dpo"),
)  # samples.jsonl key, method


RM_ROWS = "rm_best_of_k.jsonl"

# What "it worked" means: the thresholds for the full demo, the right direction for --quick. A bar at
# chance (0.5) must be beaten, not met: a win rate of exactly 0.5 is no evidence that PPO did anything.
FULL_BARS = {"rm_accuracy": 0.85, "win_rate": 0.65}
QUICK_BARS = {"rm_accuracy": 0.5, "win_rate": 0.5}


def check(cfg: DemoConfig) -> None:
    """Every setting that can be wrong, before anything is written."""
    from training.models import resolve_model

    if cfg.k < 2:
        raise UserError(f"--k must be at least 2 to rank responses, got {cfg.k}")
    if cfg.dtype not in ("auto", "fp32", "bf16"):
        raise UserError(f"--dtype must be auto, fp32 or bf16, got {cfg.dtype}")
    if cfg.engine not in ("auto", "vllm", "hf"):
        raise UserError(f"--engine must be auto, vllm or hf, got {cfg.engine}")
    if not 1 <= cfg.min_new_tokens < cfg.max_new_tokens:
        raise UserError("--min-new-tokens must be at least 1 and below --max-new-tokens")
    if cfg.split not in ("topic", "tail") or cfg.evaluate_on not in ("test", "validation"):
        raise UserError(
            f"--split must be topic or tail and --evaluate-on test or validation, got {cfg.split}, {cfg.evaluate_on}"
        )
    if cfg.heldout < 0:
        raise UserError(f"--heldout must be at least 0, got {cfg.heldout}")
    train, _, _ = demo_split(cfg)
    demo_taste(cfg)
    methods = methods_of(cfg)
    if cfg.recommend not in methods:
        raise UserError(f"--recommend must be one of the demo's --methods ({', '.join(methods)}), got {cfg.recommend}")
    if "online_dpo" in methods:
        from training.online_dpo.config import OnlineDPOConfig

        try:
            OnlineDPOConfig(reward="r", beta=cfg.online_dpo_beta, actor_lr=cfg.online_dpo_lr).check()
        except ValueError as e:
            raise UserError(f"--online-dpo-*: {e}") from None
    if "kto" in methods:
        from training.kto.config import KTOConfig

        try:
            KTOConfig(beta=cfg.kto_beta, lr=cfg.kto_lr).check()
        except ValueError as e:
            raise UserError(f"--kto-*: {e}") from None
    try:
        dataclasses.replace(PPOConfig(reward="r"), **ppo_settings(cfg.ppo_settings)).check()
    except ValueError as e:
        raise UserError(f"--ppo-settings: {e}") from None
    if cfg.rloo_settings:
        from training.rloo.config import RLOOConfig

        try:
            RLOOConfig(reward="r", **rloo_settings(cfg.rloo_settings)).check()
        except ValueError as e:
            raise UserError(f"--rloo-settings: {e}") from None
    if cfg.rounds < 1:
        raise UserError(f"--rounds must be at least 1, got {cfg.rounds}")
    if cfg.rounds > 1:
        from app.studies.demo_rounds import budget_of, selects_of

        budget_of(cfg, len(train))
        selects_of(cfg)
    for ref in (cfg.model, cfg.reward_base):
        if ref and ref != "tiny":
            resolve_model(ref)


def _mean(xs: list[list[float]]) -> float:
    flat = [x for row in xs for x in row]
    return sum(flat) / len(flat)


def new_demo_dir(runs_dir: Path) -> Path:
    folder = runs_dir.resolve() / f"demo-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    folder.mkdir(parents=True)
    return folder


def _finished(kind: str, run: Path, status: dict) -> None:
    if status.get("state") != "finished":
        raise UserError(f"the demo's {kind} run {run.name} {status.get('state')}: {status.get('error', run)}")


def run_demo(cfg: DemoConfig, folder: Path, quick: bool = False, log: Callable[[str], None] = print) -> dict:
    """Every step of the demo into `folder`; returns the results (also written to folder/results.json)."""
    from app.jobs.provenance import provenance
    from app.studies.demo_stages import Stages, run_stage
    from app.studies.demo_watch import run_watch_part, run_watch_stage
    from training.precision import with_resolved_dtype

    t0 = time.time()
    cfg, dtype_line = with_resolved_dtype(cfg)  # every step, and results.json, name the dtype it ran in
    log(dtype_line)
    stages, runs = Stages(folder), folder / "runs"  # what an earlier sitting finished (rlhf demo --resume) is kept
    stages.begin_sitting(provenance())

    def stage(name: str, fn: Callable, encode: Callable = lambda v: v, decode: Callable = lambda v: v):
        return run_stage(stages, name, fn, lambda line: log(f"[{time.time() - t0:6.0f} s] {line}"), encode, decode)

    model, reward_base, train, heldout, db = stage("set-up", lambda: set_up(cfg, folder))
    reference, ranked = stage(
        "sampling",
        lambda: sample_and_rank(cfg, db, model, heldout, log),
        encode=lambda v: [v[0], v[1].added, v[1].pairs],
        decode=lambda v: (v[0], ImportSummary(added=v[1], pairs=v[2])),
    )
    rm_cfg, rm_run, rm_final = stage(
        "reward",
        lambda: train_reward(cfg, db, reward_base, runs, log, stages),
        encode=lambda v: [dataclasses.asdict(v[0]), v[1].name, v[2]],
        decode=lambda v: (RewardConfig(**v[0]), runs / v[1], v[2]),
    )
    ppo_run = stage(
        "ppo", lambda: train_ppo(cfg, db, model, rm_run, runs, log, stages), lambda v: v.name, lambda v: runs / v
    )
    actor, scored = stage(
        "evaluation", lambda: evaluate_actor(cfg, rm_run, ppo_run, heldout, reference, rm_cfg.max_length)
    )
    texts = {"reference": reference, "ppo": actor}
    part = functools.partial(run_watch_part, cfg, model, rm_run, ppo_run, heldout, texts, rm_cfg.max_length, log)
    watch = run_watch_stage(stage, part, cfg, ppo_run, heldout, texts, log)

    def method(kind: str, fn: Callable) -> dict:  # a method's results, and its held-out samples into texts
        result, texts[kind] = stage(
            kind, lambda: (fn(cfg, db, model, rm_run, ppo_run, heldout, texts, log, stages), texts[kind])
        )
        return result

    after = after_ppo(cfg, stage, method, texts, heldout, (db, folder, reward_base, reference, log))
    results = {
        **run_facts(cfg, folder, quick, rm_run, ppo_run, train, heldout, ranked),
        **scored,
        "rm_accuracy_eval_split": rm_final["eval/rm_accuracy"],
        "rm_eval_split_pairs": rm_final["eval/pairs"],
        **ppo_curve(ppo_run),
        **watch,
        **after,
        **stage_times(stages),
    }
    return finish(folder, results, heldout, texts, rm_run, ppo_run)


def after_ppo(
    cfg: DemoConfig, stage: Callable, method: Callable, texts: dict, heldout: list[str], campaign_args: tuple
) -> dict:
    """The stages after PPO's: DPO (with the kept checkpoint's matchup against it), the methods on prompts, and the
    labeling-campaign study, each as --methods and --campaign ask (the campaign's (db, folder, reward_base,
    reference, log) in `campaign_args`)."""
    out = {}
    if "dpo" in methods_of(cfg):
        out |= with_kept_matchup(
            method("dpo", functools.partial(run_on_snapshot, "dpo")), texts, cfg.seed, judging(cfg, heldout)
        )
    if "kto" in methods_of(cfg):
        out |= method("kto", functools.partial(run_on_snapshot, "kto"))
    for name in (m for m in ON_PROMPTS if m in methods_of(cfg)):
        out |= method(name, functools.partial(run_on_prompts, name))
    if cfg.campaign:
        from app.studies.demo_campaign import run_campaign

        db, folder, reward_base, reference, log = campaign_args
        out["campaign"] = stage("campaign", lambda: run_campaign(cfg, db, folder, reward_base, heldout, reference, log))
    return out


def run_facts(cfg: DemoConfig, folder: Path, quick: bool, rm_run: Path, ppo_run: Path, train, heldout, ranked) -> dict:
    """What the demo ran: its settings, folder, runs, prompts and rankings (the head of results.json)."""
    return {
        "quick": quick,
        "config": dataclasses.asdict(cfg),
        "folder": str(folder),
        "reward_run": rm_run.name,
        "ppo_run": ppo_run.name,
        "train_prompts": len(train),
        "heldout_prompts": len(heldout),
        "rankings": ranked.added,
        "pairs": ranked.pairs,
        "split": json.loads((folder / "split.json").read_text()) if (folder / "split.json").is_file() else {},
    }


def stage_times(stages) -> dict:
    """Each stage's own seconds over every sitting, their sum, where a fork's kept stages came from, and the
    sittings that ran the others (command, commit, date, machine, the stages each finished)."""
    timings = stages.seconds()
    return {
        "timings_s": timings,
        "total_s": round(sum(timings.values()), 1),
        "forked": stages.state.get("forked"),  # rlhf demo --fork: {"from": that demo, "kept": its stages kept here}
        "sittings": stages.sittings(),
    }


def finish(folder: Path, results: dict, heldout: list[str], texts: dict, rm_run: Path, ppo_run: Path) -> dict:
    """The comparison at equal KL and the checks onto the results, then results.json, the samples and the report."""
    from app.jobs.provenance import provenance
    from app.studies.demo_report import write_report
    from app.studies.demo_samples import one_sample_verdict
    from app.studies.demo_watch import at_equal_kl, method_curves

    results["equal_kl"] = at_equal_kl(method_curves(results))
    results["one_sample"] = one_sample_verdict(results)
    results["checks"] = checks(results, QUICK_BARS if results["quick"] else FULL_BARS)
    results["provenance"] = provenance()  # the command (its last sitting's, for a resumed demo), commit, date, CPU
    rows = (results.get("reward_model") or {}).pop("best_of_k_rows", None)
    if rows is not None:  # RewardBench 2's row shape: chosen list, rejected list (app/studies/demo_rm.py)
        (folder / RM_ROWS).write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    write_samples(folder / "samples.jsonl", heldout, texts)
    write_report(folder, results, rm_run, ppo_run)
    return results


# The reward model checkpoints every RM_SAVE_EVERY steps (a checkpoint changes nothing it computes): a sitting cut
# in a member's training costs at most that many steps, not the member (hours each for the default model on a CPU).
RM_SAVE_EVERY = 50


def train_reward(
    cfg: DemoConfig, db: StoreRef, reward_base: str, runs: Path, log, stages=None
) -> tuple[RewardConfig, Path, dict]:
    """The reward model (an ensemble with --rm-ensemble) on the ranked pairs: (config, run folder, final metrics).
    A run an earlier sitting started goes on: its finished members kept, the one it was in from its last
    checkpoint (app/studies/demo_stages.py, training/reward/ensemble.py)."""
    from app.studies.demo_stages import prepared_run, train_run

    rm_cfg = RewardConfig(
        model=reward_base,
        epochs=cfg.rm_epochs,
        lr=cfg.rm_lr,
        dtype=cfg.dtype,
        seed=cfg.seed,
        ensemble=cfg.rm_ensemble,
        save_every=RM_SAVE_EVERY,
    )
    rm_run, mode = prepared_run(stages, "reward", runs, lambda: prepare_run(db, rm_cfg, runs))
    _finished("reward", rm_run, train_run("reward", rm_run, mode, lambda row: None, log))
    drop_resume_state(rm_run)  # trained: PPO and the judges read its models, nothing resumes it
    rm_cfg = RewardConfig.load(rm_run / "config.json") if mode != "new" else rm_cfg
    rm_final = read_status(rm_run)["final"]
    log(f"reward model: held-out accuracy {rm_final['eval/rm_accuracy']:.3f} on {rm_final['eval/pairs']} pairs")
    return rm_cfg, rm_run, rm_final


def evaluate_actor(
    cfg: DemoConfig, rm_run: Path, ppo_run: Path, heldout: list[str], reference: list, max_length: int
) -> tuple[list, dict]:
    """The PPO actor's samples on the held-out prompts, and the results' evaluation fields: the reward model's
    scores and pair accuracy, mean words, and the annotator's win rate against the reference."""
    with open_sampler(sampling_config(cfg, str(ppo_run / "actor"))) as actor_sampler:
        actor = sample_texts(actor_sampler, heldout, cfg.k, cfg.seed + 2 * 10**6)
    ref_scores = score_texts(rm_run / "model", heldout, reference, cfg.dtype, max_length)
    actor_scores = score_texts(rm_run / "model", heldout, actor, cfg.dtype, max_length)
    judge = judging(cfg, heldout)
    accuracy, acc_pairs = pair_accuracy(heldout, reference, ref_scores, judge.taste)
    rm, rows = rm_report(heldout, reference, ref_scores, judge.taste)
    rm["score_std_within_prompt_actor"] = within_prompt_std(actor_scores)
    ppo_vs_ref = compare(actor, reference, cfg.seed, judge)
    return actor, {
        "rm_accuracy_heldout_prompts": accuracy,
        "rm_accuracy_pairs": acc_pairs,
        "reward_model": {**rm, "best_of_k_rows": rows},
        "score_reference": _mean(ref_scores),
        "score_actor": _mean(actor_scores),
        "words_reference": mean_words(reference),
        "words_actor": mean_words(actor),
        "off_topic_reference": off_topic_share(heldout, reference),
        "off_topic_actor": off_topic_share(heldout, actor),
        "win_rate": ppo_vs_ref["win_rate"],
        "win_rate_ci95": ppo_vs_ref["ci95"],
    }


def write_samples(path: Path, heldout: list[str], texts: dict) -> None:
    """One line per held-out prompt with each model's samples (samples.jsonl)."""
    path.write_text(
        "".join(
            json.dumps({"prompt": p, **{k: texts[name][i] for k, name in SAMPLE_KEYS if texts.get(name)}}) + "\n"
            for i, p in enumerate(heldout)
        )
    )


def sample_and_rank(
    cfg: DemoConfig, db: StoreRef, model: str, heldout: list[str], log: Callable[[str], None]
) -> tuple[list[list[str]], ImportSummary]:
    """K samples of the SFT model per training prompt into the store, ranked there by the taste's labelers;
    returns the reference's samples on the held-out prompts and the ranking summary."""
    with open_sampler(sampling_config(cfg, model)) as sampler:
        report = run_sampling(db, sampler, cfg.k)
        log(report.line())
        reference = sample_texts(sampler, heldout, cfg.k, cfg.seed + 10**6)
    ranked = rank_samples(db, demo_taste(cfg))
    log(f"scripted annotators ({cfg.taste}): {ranked.added} rankings, {ranked.pairs} pairs")
    if ranked.pairs == 0:
        raise UserError("the scripted annotators found no pair to rank: every prompt's responses tied")
    return reference, ranked


def train_ppo(
    cfg: DemoConfig, db: StoreRef, model: str, rm_run: Path, runs: Path, log: Callable[[str], None], stages=None
) -> Path:
    """PPO from the SFT model against the reward run (its ensemble's member 0, the last member watching),
    checkpointing every cfg.save_every steps, through the launcher as `rlhf train-ppo` runs it. A run an earlier
    sitting started goes on from its last checkpoint (app/studies/demo_stages.py)."""
    from app.studies.demo_stages import prepared_run, train_run

    ppo_cfg = ppo_config(cfg, model, rm_run, cfg.ppo_steps, cfg.seed, save_every=cfg.save_every)
    ppo_run, mode = prepared_run(stages, "ppo", runs, lambda: prepare_run(db, ppo_cfg, runs))

    def show(row: dict) -> None:
        line = trainer("ppo").progress(row)
        if line:
            log(f"PPO {line}")

    _finished("PPO", ppo_run, train_run("ppo", ppo_run, mode, show, log))
    return ppo_run


def ppo_curve(run: Path) -> dict:
    """The run's own count of steps (its status.json) and, for each step 1..N, the KL, score and mean length its
    metrics row reports (the report's PPO table reads them here, so its figures are in results.json), None where
    no row or no value is there: a step that logged no KL is a gap the checks can see, not a step that is missing
    from both sides of the comparison."""
    by_step = {r["step"]: r for r in step_rows("ppo", read_metrics(run))}
    n = int(read_status(run).get("step") or 0)
    rows = [by_step.get(step, {}) for step in range(1, n + 1)]
    return {
        "ppo_steps": n,
        "kl_per_step": [r.get("reward/kl") for r in rows],
        "score_per_step": [r.get("reward/score_mean") for r in rows],
        "length_per_step": [r.get("response/length_mean") for r in rows],
    }


def _passes(value: float, bar: float) -> bool:
    return value > bar if bar == CHANCE else value >= bar


def _bar(bar: float) -> str:
    return f"above {bar:.0%} (chance)" if bar == CHANCE else f">= {bar:.0%}"


def checks(r: dict, bars: dict) -> dict[str, bool]:
    """The demo's claims, each true or false (the watch's two only in the full demo: on tiny models they are noise,
    and the report states them either way)."""
    from app.studies.demo_campaign import campaign_checks
    from app.studies.demo_watch import watch_checks

    kl = r["kl_per_step"]
    return {
        f"reward-model accuracy on held-out prompts {_bar(bars['rm_accuracy'])}": _passes(
            r["rm_accuracy_heldout_prompts"], bars["rm_accuracy"]
        ),
        "the actor's mean reward-model score rose": r["score_actor"] > r["score_reference"],
        "KL to the reference reported at every PPO step": r["ppo_steps"] > 0
        and len(kl) == r["ppo_steps"]
        and all(finite(x) for x in kl),
        f"win rate over the reference by the judge {_bar(bars['win_rate'])}": _passes(r["win_rate"], bars["win_rate"]),
        **(
            {f"DPO's win rate over the reference {_bar(CHANCE)}": _passes(r["dpo_vs_reference"]["win_rate"], CHANCE)}
            if "dpo_vs_reference" in r
            else {}
        ),
        **(watch_checks(r["watch"]) if r.get("watch") and not r.get("quick") else {}),
        **(campaign_checks(r["campaign"], r.get("quick", False)) if r.get("campaign") else {}),
    }

"""What the demo family shares (app/studies/demo.py, demo_methods, demo_watch, demo_rounds, demo_report, demo_seeds):
the bundled prompts and their split, the taste's ranking of a store's samples (app/studies/demo_taste.py), one way of
sampling, the judge's win rates and the reward model's pair counts against the taste's truth, and the demo's PPO
settings. It imports none of them: the family
imports it."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from annotation import scripted
from annotation.imports import ImportSummary, store_rankings
from annotation.winrate import bootstrap_ci
from app.studies.demo_config import DemoConfig
from app.studies.demo_taste import Taste, taste_of
from store.db import StoreRef, read, write
from store.errors import UserError
from store.prompts import add_prompts
from store.rankings import RankedItem, RankingIn
from store.responses import responses_by_prompt
from training.ppo.config import PPOConfig
from training.sampling.generation import Sampler, SamplingConfig

DEMO_PROMPTS = "demo_prompts.txt"

# The methods on prompts against PPO's reward model (app/studies/demo_methods.py), each with PPO's sequences per
# step and steps: (trainer kind, title, seed of its held-out samples). rloo_pairwise is RLOO on win fractions
# (training/rloo/losses.py).
ON_PROMPTS = {
    "rloo": ("rloo", "RLOO", 4 * 10**6),
    "rloo_pairwise": ("rloo", "RLOO (win fractions)", 6 * 10**6),
    "online_dpo": ("online_dpo", "Online DPO", 7 * 10**6),
}


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


def demo_split(cfg: DemoConfig) -> tuple[list[str], list[str], dict]:
    """(training prompts, the prompts every model is judged on, what the split was): --split tail holds out the last
    --heldout prompts; --split topic (docs/evaluation.md) trains on the topic split's train part and judges on its
    --evaluate-on part (test or validation), at most --heldout of them in the split's order (0 = all)."""
    from app.studies.prompt_split import split_by_topic

    texts = bundled_prompts(cfg.n_prompts)
    if cfg.split == "tail":
        train, heldout = split_prompts(texts, cfg.heldout)
        return train, heldout, {"split": "tail", "train": len(train), "heldout": len(heldout)}
    part = split_by_topic(texts, cfg.split_seed)
    judged = getattr(part, cfg.evaluate_on)
    judged = judged[: cfg.heldout] if cfg.heldout else judged
    if len(part.train) < 16 or not judged:
        raise UserError(f"{len(texts)} prompts split by topic give {part.counts()}: too few to train on or judge")
    info = {
        "split": "topic",
        "split_seed": cfg.split_seed,
        "evaluate_on": cfg.evaluate_on,
        **part.counts(),
        "judged": len(judged),
        "test_topics": part.test_topics,
        "validation_topics": part.validation_topics,
        "test_templates": part.test_templates,
    }
    return part.train, judged, info


def demo_taste(cfg: DemoConfig) -> Taste:
    """The demo's labelers and judge (app/studies/demo_taste.py); the population is drawn from the run's seed."""
    try:
        return taste_of(cfg.taste, cfg.annotators, cfg.seed)
    except ValueError as e:
        raise UserError(str(e)) from None


def rank_samples(db: StoreRef, taste: Taste, round_: int | None = None) -> ImportSummary:
    """The taste's labelers rank every prompt's responses (empty and repeated ones left out), one prompt each in
    turn, in one transaction; with a round, that round's responses only."""
    with read(db) as con:
        responses = responses_by_prompt(con, round_)
    by_prompt: dict[str, list[tuple[int, str]]] = {}
    for r in responses:
        by_prompt.setdefault(r.prompt, []).append((r.response_id, r.text))
    rankings, summary = [], ImportSummary()
    for i, (prompt, items) in enumerate(by_prompt.items()):
        summary.tasks += 1
        keep = [items[j] for j in scripted.rankable([t for _, t in items])]
        if len(keep) < 2:
            summary.skipped["fewer than 2 distinct responses"] += 1
            continue
        ranks = taste.ranking(i, prompt, [t for _, t in keep])
        rankings.append(
            RankingIn(
                prompt=prompt,
                items=[
                    RankedItem(text=t, rank=r, shown_position=j, response_id=rid)
                    for j, ((rid, t), r) in enumerate(zip(keep, ranks, strict=True))
                ],
                annotator=taste.labeler(i),
                source="scripted",
                external_key=f"scripted:{keep[0][0]}",
            )
        )
    summary.annotations = len(rankings)
    origin = scripted.NAME if taste.name == "concise" else f"scripted population ({len(taste.annotators)})"
    return store_rankings(db, rankings, summary, source="scripted", origin=origin, content_sha256=None)


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
        engine=cfg.engine,
    )


def sample_texts(sampler: Sampler, prompts: list[str], k: int, seed: int) -> list[list[str]]:
    out, step = [], sampler.config.batch_prompts
    for start in range(0, len(prompts), step):
        out += [[g.text for g in gens] for gens in sampler(prompts[start : start + step], k, seed + start)]
    return out


def pair_counts(
    prompts: list[str], texts: list[list[str]], scores: list[list[float]], taste: Taste
) -> list[tuple[int, int]]:
    """Per prompt: (pairs the reward model orders as the taste's truth does, the truth's pairs); ties make no pair,
    a tied score counts as wrong."""
    out = []
    for prompt, ts, ss in zip(prompts, texts, scores, strict=True):
        keep = scripted.rankable(ts)
        ranks = taste.truth(prompt, [ts[i] for i in keep])
        right = total = 0
        for a in range(len(keep)):
            for b in range(len(keep)):
                if ranks[a] < ranks[b]:
                    total += 1
                    right += ss[keep[a]] > ss[keep[b]]
        out.append((right, total))
    return out


def pair_accuracy(
    prompts: list[str], texts: list[list[str]], scores: list[list[float]], taste: Taste
) -> tuple[float, int]:
    """Share of the truth's pairs (within each prompt) that the reward model orders the same way, and how many."""
    counts = pair_counts(prompts, texts, scores, taste)
    right, total = sum(r for r, _ in counts), sum(t for _, t in counts)
    return (right / total if total else float("nan")), total


@dataclass(frozen=True)
class Judging:
    """The judge of the demo's comparisons on the prompts it judges on: texts[i] answers prompts[i]."""

    prompts: list[str]
    taste: Taste


def judging(cfg: DemoConfig, prompts: list[str]) -> Judging:
    return Judging(list(prompts), demo_taste(cfg))


def win_rates(actor: list[list[str]], reference: list[list[str]], judge: Judging) -> list[float]:
    """Per prompt: the judge's mean verdict over every (actor sample, reference sample) couple."""
    return [
        sum(judge.taste.judge(prompt, a, r) for a in acts for r in refs) / (len(acts) * len(refs))
        for prompt, acts, refs in zip(judge.prompts, actor, reference, strict=True)
    ]


def compare(a: list[list[str]], b: list[list[str]], seed: int, judge: Judging) -> dict:
    """a's win rate over b by the judge (per prompt, then the mean), with its bootstrap interval over prompts: every
    matchup of the report (each method against the reference, PPO against each) is judged this way."""
    per_prompt = win_rates(a, b, judge)
    lo, hi = bootstrap_ci(per_prompt, seed=seed)
    return {"win_rate": sum(per_prompt) / len(per_prompt), "ci95": [lo, hi]}


def mean_words(texts: list[list[str]]) -> float:
    flat = [len(t.split()) for ts in texts for t in ts]
    return sum(flat) / len(flat)


def wants_vllm(cfg: DemoConfig) -> bool:
    """vLLM asked for by name: --engine vllm, or RLHF_ENGINE=vllm under --engine auto."""
    import os

    return cfg.engine == "vllm" or (cfg.engine == "auto" and os.environ.get("RLHF_ENGINE") == "vllm")


def set_up(cfg: DemoConfig, folder: Path) -> tuple[str, str, list[str], list[str], str]:
    """The models (tiny ones built on the spot for --quick), the prompts split, and the demo's store with the
    training prompts: (model, reward base, training prompts, held-out prompts, store path)."""
    from training.models import resolve_model
    from training.tiny import build_plain_model, build_talking_model

    if cfg.model == "tiny":
        heads = 2 if wants_vllm(cfg) else 4  # vLLM's CPU kernels take heads of 32 and wider (hidden 64: 2 heads)
        model = str(build_talking_model(folder / "models" / "actor", heads=heads))
        reward_base = cfg.reward_base or str(build_plain_model(folder / "models" / "reward-base"))
    else:
        resolve_model(cfg.model)
        model, reward_base = cfg.model, cfg.reward_base or cfg.model
    train, heldout, info = demo_split(cfg)
    (folder / "heldout_prompts.txt").write_text("\n".join(heldout) + "\n")
    (folder / "split.json").write_text(json.dumps(info, indent=2) + "\n")
    db = str(folder / "store.duckdb")
    with write(db) as con:
        add_prompts(con, train, source="demo")
    return model, reward_base, train, heldout, db


OWN_FLAGS = {"epochs": "ppo_epochs", "max_steps": "ppo_steps", "rollout_engine": "engine"}  # PPO's name: the demo's


def ppo_settings(text: str) -> dict:
    """--ppo-settings "key=value,key=value" as PPOConfig fields of their types; one error line for a key PPO does
    not have, one the demo sets itself, or a value of the wrong type."""
    own = set(_ppo_kwargs(DemoConfig(), "", Path(), 0, 0, 0)) | {"output_dir", "prompts"}  # the launcher's two
    return settings_of(text, PPOConfig, "--ppo-settings", {k: OWN_FLAGS.get(k, k) for k in own}, "a PPO setting")


# what the demo sets for RLOO itself: the models, the data, the run's folder, the reward shape (the method's name
# says it), and the steps (--method-steps)
RLOO_OWN = {
    "actor": "",
    "reward": "",
    "prompts": "",
    "output_dir": "",
    "reward_shape": "methods",
    "max_steps": "method_steps",
    "epochs": "method_steps",
}


def rloo_settings(text: str) -> dict:
    """--rloo-settings "key=value,..." (say kl_ctl=0.1,actor_lr=1e-5) as RLOOConfig fields of their types, for RLOO
    and RLOO on win fractions, over the PPO settings they otherwise take; one error line as --ppo-settings gives."""
    from training.rloo.config import RLOOConfig

    return settings_of(text, RLOOConfig, "--rloo-settings", RLOO_OWN, "an RLOO setting")


def settings_of(text: str, cls: type, flag: str, own: dict[str, str], what: str) -> dict:
    """ "key=value,key=value" as fields of the dataclass `cls`, of their types; one error line for a key `cls` does
    not have, one the demo sets itself (`own`: key -> the demo's flag for it, "" where it has none), or a value of
    the wrong type."""
    import dataclasses as dc
    import typing

    hints = typing.get_type_hints(cls)
    known = {f.name for f in dc.fields(cls)}
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in known:
            raise UserError(f"{flag}: {item!r} is not key=value with {what} as the key")
        if key in own:
            named = f" flag (--{own[key].replace('_', '-')})" if own[key] else " to set"
            raise UserError(f"{flag}: {key} is the demo's own{named}")
        kind = hints[key]
        try:
            if kind is bool:
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(value)
                out[key] = value.lower() in ("true", "1")
            else:
                out[key] = kind(value)
        except ValueError:
            raise UserError(f"{flag}: {key} must be {kind.__name__}, got {value!r}") from None
    return out


def merged_ppo_settings(base: str, extra: str) -> str:
    """--ppo-settings `extra` on top of `base` (a preset's): base's keys in order, each given in extra taking its
    value, then extra's others; both checked as --ppo-settings is."""
    items = {}
    for text in (base, extra):
        ppo_settings(text)  # one error line for a bad key or value, in either
        for item in filter(None, (x.strip() for x in text.split(","))):
            key, _, value = item.partition("=")
            items[key.strip().replace("-", "_")] = value.strip()
    return ",".join(f"{k}={v}" for k, v in items.items())


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
        rollout_engine=cfg.engine,
    )


def finite(x: object) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def drop_resume_state(run: Path) -> None:
    """A finished run's DeepSpeed resume state, each folder of tags under a `checkpoints` folder that names its
    `latest` (weights and optimizer moments: about 2 GB a model at 135M; a reward ensemble's in each member's
    folder), which nothing reads again. The saved models stay, PPO's judged actor snapshots
    (checkpoints/actor-stepN) among them."""
    import shutil

    for latest in sorted(run.glob("**/checkpoints/**/latest"), key=lambda p: len(p.parts), reverse=True):
        if latest.parent.exists():
            shutil.rmtree(latest.parent)

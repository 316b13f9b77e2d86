"""What the demo family shares (app/studies/demo.py, demo_methods, demo_watch, demo_rounds, demo_report, demo_seeds):
the bundled prompts and their split, the scripted annotator's ranking of a store's samples, one way of sampling, the
scripted annotator's win rates and pair counts, and the demo's PPO settings. It imports none of them: the family
imports it."""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path

from annotation import scripted
from annotation.imports import ImportSummary, store_rankings
from annotation.winrate import bootstrap_ci
from app.studies.demo_config import DemoConfig
from store.db import connect, write
from store.errors import UserError
from store.prompts import add_prompts
from store.rankings import RankedItem, RankingIn
from store.responses import responses_by_prompt
from training.generation import Sampler, SamplingConfig
from training.ppo.config import PPOConfig

DEMO_PROMPTS = "demo_prompts.txt"


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


def rank_samples(db: str | Path, round_: int | None = None) -> ImportSummary:
    """The scripted annotator ranks every prompt's responses (empty and repeated ones left out), in one transaction;
    with a round, that round's responses only."""
    with connect(db) as con:
        responses = responses_by_prompt(con, round_)
    by_prompt: dict[str, list[tuple[int, str]]] = {}
    for r in responses:
        by_prompt.setdefault(r.prompt, []).append((r.response_id, r.text))
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
        engine=cfg.engine,
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
    train, heldout = split_prompts(bundled_prompts(cfg.n_prompts), cfg.heldout)
    (folder / "heldout_prompts.txt").write_text("\n".join(heldout) + "\n")
    db = str(folder / "store.duckdb")
    with write(db) as con:
        add_prompts(con, train, source="demo")
    return model, reward_base, train, heldout, db


OWN_FLAGS = {"epochs": "ppo_epochs", "max_steps": "ppo_steps", "rollout_engine": "engine"}  # PPO's name: the demo's


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
            flag = OWN_FLAGS.get(key, key).replace("_", "-")
            raise UserError(f"--ppo-settings: {key} is the demo's own flag (--{flag})")
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

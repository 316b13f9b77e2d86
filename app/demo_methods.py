"""`rlhf demo --methods ppo,dpo`: DPO from the very pairs the reward model learned from (its snapshot), judged by
the same scripted annotator on the same held-out prompts: each method against the reference, and PPO against DPO,
with bootstrap intervals over prompts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.demo_config import DemoConfig
from app.training import prepare_pairs_run, run_training
from store.errors import UserError
from training.dpo.config import DPOConfig
from training.registry import run_config, trainer

METHODS = ("ppo", "dpo")


def methods_of(cfg: DemoConfig) -> list[str]:
    """The demo's --methods, checked: PPO always (the reward model and its actor are the demo's spine)."""
    names = [m.strip() for m in cfg.methods.split(",") if m.strip()]
    unknown = [m for m in names if m not in METHODS]
    if unknown or "ppo" not in names:
        raise UserError(f"--methods must name ppo and optionally dpo (ppo,dpo), got {cfg.methods!r}")
    return names


def run_dpo(
    cfg: DemoConfig,
    db: str,
    model: str,
    rm_run: Path,
    heldout: list[str],
    texts: dict[str, list[list[str]]],
    log: Callable[[str], None],
) -> dict:
    """Train DPO on the reward model's own snapshot, sample the policy on the held-out prompts, and judge it
    against the reference and against PPO's actor. texts: held-out samples of 'reference' and 'ppo'."""
    from app.demo import compare, mean_words, sample_texts, sampling_config
    from training.generation import Sampler

    data = run_config(rm_run)["data"]  # the reward model's snapshot: the same pairs, split the same way
    dpo_cfg = DPOConfig(
        model=model, beta=cfg.dpo_beta, lr=cfg.dpo_lr, epochs=cfg.dpo_epochs, dtype=cfg.dtype, seed=cfg.seed
    )
    run = prepare_pairs_run(db, dpo_cfg, rm_run.parent, data)

    def show(row: dict) -> None:
        line = trainer("dpo").progress(row)
        if line:
            log(f"DPO {line}")

    status = run_training("dpo", run, on_metrics=show)
    if status.get("state") != "finished":
        raise UserError(f"the demo's DPO run {run.name} {status.get('state')}: {status.get('error', run)}")
    sampler = Sampler(sampling_config(cfg, str(run / trainer("dpo").output)))
    texts["dpo"] = sample_texts(sampler, heldout, cfg.k, cfg.seed + 3 * 10**6)
    del sampler
    return {
        "dpo_run": run.name,
        "dpo_eval_accuracy": status["final"].get("eval/dpo_accuracy"),
        "words_dpo": mean_words(texts["dpo"]),
        "dpo_vs_reference": compare(texts["dpo"], texts["reference"], cfg.seed),
        "ppo_vs_dpo": compare(texts["ppo"], texts["dpo"], cfg.seed),
    }


def method_rows(r: dict) -> list[tuple[str, float, list[float]]]:
    """The report's three-way table: (matchup, win rate, 95% interval)."""
    rows = [("PPO actor vs reference", r["win_rate"], r["win_rate_ci95"])]
    if "dpo_vs_reference" in r:
        rows.append(("DPO policy vs reference", r["dpo_vs_reference"]["win_rate"], r["dpo_vs_reference"]["ci95"]))
        rows.append(("PPO actor vs DPO policy", r["ppo_vs_dpo"]["win_rate"], r["ppo_vs_dpo"]["ci95"]))
    return rows


def method_table(r: dict) -> str:
    """The three-way table (GitHub Markdown; cells unpadded, so the report's one padded table stays the PPO steps)."""
    lines = ["|matchup (scripted annotator)|win rate|95% interval|", "|---|---:|---|"]
    lines += [f"|{name}|{w:.1%}|{lo:.1%}-{hi:.1%}|" for name, w, (lo, hi) in method_rows(r)]
    return "\n".join(lines)

"""`rlhf demo --methods ppo,dpo,rloo`: DPO from the very pairs the reward model learned from (its snapshot), and
RLOO against the very reward model PPO optimised, on the same prompts with the same sequences per step, judged by
the same scripted annotator on the same held-out prompts: each method against the reference, and PPO against each,
with bootstrap intervals over prompts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.jobs.training import prepare_pairs_run, prepare_run
from app.studies.demo_common import ON_PROMPTS, rloo_settings
from app.studies.demo_config import DemoConfig
from app.studies.demo_stages import Stages, prepared_run
from app.studies.demo_taste import off_topic_share
from app.studies.demo_watch import checkpoint_points
from store.db import StoreRef
from store.errors import UserError
from training.dpo.config import DPOConfig
from training.kto.config import KTOConfig
from training.registry import run_config, trainer
from training.rloo.config import RLOOConfig
from training.runs import read_status

METHODS = ("ppo", "dpo", "kto", "rloo", "rloo_pairwise", "online_dpo")
# The methods on the reward model's own snapshot: (title, sampling-seed offset). KTO reads the pairs as thumbs
# (training/pairwise/data_types.py::unpaired_from_pairs).
ON_SNAPSHOT = {"dpo": ("DPO", 3 * 10**6), "kto": ("KTO", 8 * 10**6)}

CHECKPOINTING = ("save_every", "keep_best", "eval_limit")  # PPO's, so RLOO's points sit on the same plot
RLOO_K = 4  # responses per prompt; its steps sample as many sequences as PPO's


def methods_of(cfg: DemoConfig) -> list[str]:
    """The demo's --methods, checked: PPO always (the reward model and its actor are the demo's spine)."""
    names = [m.strip() for m in cfg.methods.split(",") if m.strip()]
    unknown = [m for m in names if m not in METHODS]
    if unknown or "ppo" not in names:
        raise UserError(f"--methods must name ppo and any of {', '.join(METHODS[1:])}, got {cfg.methods!r}")
    return names


def train_and_sample(
    kind: str,
    run: Path,
    cfg: DemoConfig,
    heldout: list[str],
    texts: dict,
    seed: int,
    log: Callable[[str], None],
    mode: str = "new",
    key: str = "",
) -> dict:
    """Train a prepared run through the launcher (its progress logged; mode as demo_stages.prepared_run says),
    then sample its policy on the held-out prompts into texts[key or kind]; returns the run's final status."""
    from app.studies.demo_common import sample_texts, sampling_config
    from app.studies.demo_stages import train_run
    from training.sampling.generation import open_sampler

    spec = trainer(kind)

    def show(row: dict) -> None:
        line = spec.progress(row)
        if line:
            log(f"{spec.title} {line}")

    status = train_run(kind, run, mode, show, log)
    if status.get("state") != "finished":
        raise UserError(f"the demo's {spec.title} run {run.name} {status.get('state')}: {status.get('error', run)}")
    with open_sampler(sampling_config(cfg, str(run / spec.output))) as sampler:
        texts[key or kind] = sample_texts(sampler, heldout, cfg.k, seed)
    return status


def snapshot_config(method: str, cfg: DemoConfig, model: str):
    """DPO's or KTO's settings in the demo: the demo's own (--dpo-*, --kto-*), the same epochs and seed."""
    common = dict(model=model, epochs=cfg.dpo_epochs, dtype=cfg.dtype, seed=cfg.seed)
    if method == "kto":
        return KTOConfig(**common, beta=cfg.kto_beta, lr=cfg.kto_lr)
    return DPOConfig(**common, beta=cfg.dpo_beta, lr=cfg.dpo_lr)


def run_on_snapshot(
    method: str,
    cfg: DemoConfig,
    db: StoreRef,
    model: str,
    rm_run: Path,
    ppo_run: Path,
    heldout: list[str],
    texts: dict[str, list[list[str]]],
    log: Callable[[str], None],
    stages: Stages | None = None,
) -> dict:
    """Train DPO or KTO on the reward model's own snapshot, sample the policy on the held-out prompts, and judge it
    against the reference and against PPO's actor. texts: held-out samples of 'reference' and 'ppo'. Its KL is
    measured as PPO's checkpoints' is (training/rollouts/prompt_run.py::evaluate_policy with PPO's run settings)."""
    from app.studies.demo_common import compare, judging, mean_words

    title, seed = ON_SNAPSHOT[method]
    judge = judging(cfg, heldout)
    data = run_config(rm_run)["data"]  # the reward model's snapshot: the same pairs, split the same way
    run_cfg = snapshot_config(method, cfg, model)
    run, mode = prepared_run(
        stages, method, rm_run.parent, lambda: prepare_pairs_run(db, run_cfg, rm_run.parent, data), resumable=False
    )
    status = train_and_sample(method, run, cfg, heldout, texts, cfg.seed + seed, log, mode)
    point = policy_point(run / trainer(method).output, ppo_run, texts[method], texts["reference"], cfg.seed, judge)
    log(f"{title} policy: KL {point['kl']:.2f}, win rate {point['win_rate']:.1%}")
    result = {
        f"{method}_point": point,
        f"{method}_run": run.name,
        f"{method}_eval_accuracy": status["final"].get(f"eval/{method}_accuracy"),
        f"words_{method}": mean_words(texts[method]),
        f"off_topic_{method}": off_topic_share(heldout, texts[method]),
        f"{method}_vs_reference": compare(texts[method], texts["reference"], cfg.seed, judge),
        f"ppo_vs_{method}": compare(texts["ppo"], texts[method], cfg.seed, judge),
    }
    return with_kept_matchup(result, texts, cfg.seed, judge) if method == "dpo" else result


def with_kept_matchup(dpo: dict, texts: dict[str, list[list[str]]], seed: int, judge) -> dict:
    """DPO's results with PPO's kept checkpoint judged against DPO's policy (`kept_vs_dpo`) where the kept
    checkpoint's samples are known and the results lack it (a DPO stage kept from before 2026-12-06)."""
    from app.studies.demo_common import compare

    if not dpo or "kept_vs_dpo" in dpo or not texts.get("ppo_kept") or not texts.get("dpo"):
        return dpo
    return {**dpo, "kept_vs_dpo": compare(texts["ppo_kept"], texts["dpo"], seed, judge)}


def on_prompts_config(method: str, cfg: DemoConfig, model: str, rm_run: Path, ppo_run: Path):
    """A method on prompts with PPO's settings where they mean the same (reward model, prompts, lengths, learning
    rate, KL coefficient, checkpoints), RLOO_K responses per prompt, and PPO's sequences per step and steps (so as
    many sequences sampled; --method-steps sets other). Online DPO takes its own learning rate and beta
    (--online-dpo-lr, --online-dpo-beta)."""
    from training.online_dpo.config import OnlineDPOConfig

    ppo = run_config(ppo_run)
    shared = ("max_new_tokens", "min_new_tokens", "actor_lr", "kl_ctl", "dtype", "seed", "rollout_engine")
    common = dict(
        actor=model,
        reward=str(rm_run),
        k=RLOO_K,
        generation_batch_size=max(1, ppo["generation_batch_size"] // RLOO_K),
        max_steps=cfg.method_steps or read_status(ppo_run)["total_steps"],  # PPO's steps: as many sequences
        epochs=10**6,  # max_steps decides; these see fewer distinct prompts, each k times
        **{key: ppo[key] for key in shared + CHECKPOINTING},
    )
    if method == "online_dpo":
        return OnlineDPOConfig(**{**common, "actor_lr": cfg.online_dpo_lr}, beta=cfg.online_dpo_beta)
    shape = "win_fraction" if method == "rloo_pairwise" else "score"
    return RLOOConfig(**{**common, **rloo_settings(cfg.rloo_settings)}, reward_shape=shape)


def run_on_prompts(
    method: str,
    cfg: DemoConfig,
    db: StoreRef,
    model: str,
    rm_run: Path,
    ppo_run: Path,
    heldout: list[str],
    texts: dict[str, list[list[str]]],
    log: Callable[[str], None],
    stages: Stages | None = None,
) -> dict:
    """A method on prompts (ON_PROMPTS) trained as `on_prompts_config` sets it, its actor sampled on the held-out
    prompts and judged against the reference and against PPO's actor; its checkpoints as points of the KL plot.
    KL: its last training step's, as PPO's is read."""
    from app.studies.demo_common import compare, judging, mean_words

    kind, _, seed = ON_PROMPTS[method]
    judge = judging(cfg, heldout)
    run_cfg = on_prompts_config(method, cfg, model, rm_run, ppo_run)
    run, mode = prepared_run(
        stages, method, rm_run.parent, lambda: prepare_run(db, run_cfg, ppo_run.parent), resumable=True
    )
    status = train_and_sample(kind, run, cfg, heldout, texts, cfg.seed + seed, log, mode, key=method)
    return {
        f"{method}_run": run.name,
        f"{method}_checkpoints": checkpoint_points(cfg, run, heldout, texts, log, method=method),
        f"{method}_kl": status["final"].get("reward/kl"),
        f"{method}_score": status["final"].get("reward/score_mean"),
        f"words_{method}": mean_words(texts[method]),
        f"off_topic_{method}": off_topic_share(heldout, texts[method]),
        f"{method}_vs_reference": compare(texts[method], texts["reference"], cfg.seed, judge),
        f"ppo_vs_{method}": compare(texts["ppo"], texts[method], cfg.seed, judge),
    }


def policy_point(policy: Path, ppo_run: Path, samples: list, reference: list, seed: int, judge) -> dict:
    """A trained policy as one point of the win-rate-against-KL plot: its KL, scores and length measured as PPO's
    checkpoints' are (PPO's held-out prompts, reference, reward models and sampling), its win rate over the reference
    from the demo's held-out samples."""
    from app.studies.demo_common import compare
    from training.ppo.config import PPOConfig
    from training.rollouts.prompt_run import evaluate_policy

    row = evaluate_policy(str(policy), PPOConfig.load(ppo_run / "config.json"))
    keep = ("kl", "score_mean", "heldout_score_mean", "length_mean")
    return {**{k: row[k] for k in keep if k in row}, **compare(samples, reference, seed, judge)}


def method_rows(r: dict) -> list[tuple[str, float, list[float]]]:
    """The report's methods table: (matchup, win rate, 95% interval)."""
    rows = [("PPO actor vs reference", r["win_rate"], r["win_rate_ci95"])]
    if "dpo_vs_reference" in r:
        rows.append(("DPO policy vs reference", r["dpo_vs_reference"]["win_rate"], r["dpo_vs_reference"]["ci95"]))
        rows.append(("PPO actor vs DPO policy", r["ppo_vs_dpo"]["win_rate"], r["ppo_vs_dpo"]["ci95"]))
    if "kept_vs_dpo" in r:
        rows.append(("PPO's kept checkpoint vs DPO policy", r["kept_vs_dpo"]["win_rate"], r["kept_vs_dpo"]["ci95"]))
    if "kto_vs_reference" in r:
        rows.append(("KTO policy vs reference", r["kto_vs_reference"]["win_rate"], r["kto_vs_reference"]["ci95"]))
        rows.append(("PPO actor vs KTO policy", r["ppo_vs_kto"]["win_rate"], r["ppo_vs_kto"]["ci95"]))
    for method, (_, title, _) in ON_PROMPTS.items():
        if f"{method}_vs_reference" in r:
            ours, ppo = r[f"{method}_vs_reference"], r[f"ppo_vs_{method}"]
            rows.append((f"{title} actor vs reference", ours["win_rate"], ours["ci95"]))
            rows.append((f"PPO actor vs {title} actor", ppo["win_rate"], ppo["ci95"]))
    return rows


def method_table(r: dict) -> str:
    """The three-way table (GitHub Markdown; cells unpadded, so the report's one padded table stays the PPO steps)."""
    lines = ["|matchup (the judge)|win rate|95% interval|", "|---|---:|---|"]
    lines += [f"|{name}|{w:.1%}|{lo:.1%}-{hi:.1%}|" for name, w, (lo, hi) in method_rows(r)]
    return "\n".join(lines)

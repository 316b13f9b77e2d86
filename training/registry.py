"""Every trainer in one table: its kind, config dataclass, entry module, run-folder prefix, saved output, the metric
that marks a training step, what the app plots and the one-line headline of a finished run. The launcher, `rlhf
runs`, the Train tab, the Compare tab and the demo read it instead of guessing from a run's keys; a new trainer is
its package, its entry here, and its tests. Imports no torch (the CLI lists runs without it)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from training.config_file import ConfigFile
from training.dpo.config import DPOConfig
from training.kto.config import KTOConfig
from training.online_dpo.config import OnlineDPOConfig
from training.ppo.config import PPOConfig
from training.reward.config import RewardConfig
from training.rloo.config import RLOOConfig


@dataclass(frozen=True)
class Trainer:
    kind: str  # the store's runs.kind and every run's config.json "kind"
    title: str  # what the app and the CLI call it
    config: type[ConfigFile]  # its settings: CLI flags, the Train tab's form, config.json
    module: str  # run under the DeepSpeed launcher: --module MODULE --config RUN/config.json
    prefix: str  # run folders are PREFIX-<stamp>-<hex>
    output: str  # the saved Hugging Face folder inside the run
    policy: bool  # its output is a policy (Compare, `rlhf sample --model`), not a scorer
    step_key: str  # present on each training step's metrics row, and only there
    plots: tuple[str, ...]  # metric keys the Train tab plots against the step
    headline: Callable[[dict], str]  # a finished run's final metrics -> one line
    progress: Callable[[dict], str | None]  # a metrics row -> the CLI's progress line (None: nothing to say)
    data: str  # what it trains on, one of training/pairwise/data_types.py's DATA_TYPES: pairs, unpaired, prompts
    command: str  # its `rlhf` command
    summary: str  # what it is, in a few words (the app's and the CLI's help say it)

    @property
    def form_skip(self) -> tuple[str, ...]:
        """Fields the form leaves out: the data the buttons choose, the folder the launcher sets, and the fields
        a trainer sets for itself (metadata internal=True)."""
        internal = tuple(f.name for f in fields(self.config) if f.metadata.get("internal"))
        return ("prompts" if self.data == "prompts" else "data", "output_dir", *internal)

    @property
    def form_prefix(self) -> str:
        return f"{self.prefix}-"


def _reward_headline(final: dict) -> str:
    return f"eval accuracy {final['eval/rm_accuracy']:.3f}" if "eval/rm_accuracy" in final else ""


def _reward_progress(row: dict) -> str | None:
    if "loss/rm" in row:
        return (
            f"step {row['step']}: loss {row['loss/rm']:.4f}, train accuracy {row['rm/train_accuracy']:.3f}, "
            f"{row['perf/pairs_per_s']:.1f} pairs/s"
        )
    if "eval/rm_accuracy" in row and "step" in row:
        return (
            f"step {row['step']}: eval accuracy {row['eval/rm_accuracy']:.3f} on {row['eval/pairs']} pairs, "
            f"margin {row['eval/margin_mean']:.3f}"
        )
    return None


def _ppo_headline(final: dict) -> str:
    if "reward/score_mean" not in final:
        return ""
    line = f"score {final['reward/score_mean']:.3f}, KL {final['reward/kl']:.3f}"
    if "best/step" in final:  # the checkpoint the held-out judge scores best (training/rollouts/checkpoints.py)
        judge = final.get("best/heldout_score_mean", final.get("best/score_mean"))
        line += f", best checkpoint: step {final['best/step']} (held-out {judge:.3f})"
    return line


def _ppo_progress(row: dict) -> str | None:
    if row.get("event") == "alarm":
        then = (
            "stopping (resume with --resume)"
            if row.get("stopping")
            else "training on (--stop-on-overoptimization stops)"
        )
        return f"step {row['step']}: OVER-OPTIMISATION ALARM: {row['reason']}; {then}"
    if "loss/actor" not in row:
        return None
    judge = f", held-out judge {row['watch/heldout_score_mean']:.3f}" if "watch/heldout_score_mean" in row else ""
    return (
        f"step {row['step']}: score {row['reward/score_mean']:.3f}{judge}, KL {row['reward/kl']:.3f}, "
        f"length {row['response/length_mean']:.1f}, {row['perf/step_s']:.1f} s "
        f"({row['perf/tokens_per_s']:.0f} tokens/s)"
    )


def _dpo_headline(final: dict) -> str:
    if "eval/dpo_accuracy" not in final:
        return ""
    return f"eval accuracy {final['eval/dpo_accuracy']:.3f}, margin {final['eval/reward_margin']:.3f}"


def _dpo_progress(row: dict) -> str | None:
    if "loss/dpo" in row:
        return (
            f"step {row['step']}: loss {row['loss/dpo']:.4f}, accuracy {row['dpo/accuracy']:.3f}, "
            f"margin {row['dpo/reward_margin']:.3f}, {row['perf/pairs_per_s']:.1f} pairs/s"
        )
    if "eval/dpo_accuracy" in row and "step" in row:
        return (
            f"step {row['step']}: eval accuracy {row['eval/dpo_accuracy']:.3f} on {row['eval/pairs']} pairs, "
            f"margin {row['eval/reward_margin']:.3f}"
        )
    return None


def _kto_headline(final: dict) -> str:
    if "eval/kto_accuracy" not in final:
        return ""
    return f"eval accuracy {final['eval/kto_accuracy']:.3f}, margin {final['eval/margin']:.3f}"


def _kto_progress(row: dict) -> str | None:
    if "loss/kto" in row:
        return (
            f"step {row['step']}: loss {row['loss/kto']:.4f}, accuracy {row['kto/accuracy']:.3f}, "
            f"margin {row['kto/margin']:.3f}, KL {row['kto/kl']:.3f}, {row['perf/rows_per_s']:.1f} rows/s"
        )
    if "eval/kto_accuracy" in row and "step" in row:
        return f"step {row['step']}: eval accuracy {row['eval/kto_accuracy']:.3f} on {row['eval/rows']} rows"
    return None


TRAINERS: dict[str, Trainer] = {
    t.kind: t
    for t in (
        Trainer(
            kind="reward",
            title="Reward model",
            config=RewardConfig,
            module="training.reward.train",
            prefix="rm",
            output="model",
            policy=False,
            step_key="loss/rm",
            plots=("loss/rm", "rm/train_accuracy", "eval/rm_accuracy"),
            headline=_reward_headline,
            progress=_reward_progress,
            data="pairs",
            command="train-rm",
            summary="a scalar score for a response, from the pairs",
        ),
        Trainer(
            kind="ppo",
            title="PPO",
            config=PPOConfig,
            module="training.ppo.train",
            prefix="ppo",
            output="actor",
            policy=True,
            step_key="loss/actor",
            plots=(
                "reward/score_mean",
                "reward/kl",
                "loss/actor",
                "loss/critic",
                "policy/clipfrac",
                "response/length_mean",
                "perf/tokens_per_s",
                "watch/heldout_score_mean",
                "watch/length_score_corr",
                "watch/ref_logprob_mean",
                "response/eos_rate",
                "checkpoint/heldout_score_mean",
                "checkpoint/score_mean",
            ),
            headline=_ppo_headline,
            progress=_ppo_progress,
            data="prompts",
            command="train-ppo",
            summary="actor, critic, reference and reward model; reward: a reward run folder",
        ),
        Trainer(
            kind="dpo",
            title="DPO",
            config=DPOConfig,
            module="training.dpo.train",
            prefix="dpo",
            output="policy",
            policy=True,
            step_key="loss/dpo",
            plots=("loss/dpo", "dpo/accuracy", "dpo/reward_margin", "eval/dpo_accuracy", "dpo/logps_chosen"),
            headline=_dpo_headline,
            progress=_dpo_progress,
            data="pairs",
            command="train-dpo",
            summary="the policy learns from the same pairs; no reward model",
        ),
        Trainer(
            kind="kto",
            title="KTO",
            config=KTOConfig,
            module="training.kto.train",
            prefix="kto",
            output="policy",
            policy=True,
            step_key="loss/kto",
            plots=("loss/kto", "kto/accuracy", "kto/margin", "kto/kl", "eval/kto_accuracy"),
            headline=_kto_headline,
            progress=_kto_progress,
            data="unpaired",
            command="train-kto",
            summary="the policy learns from thumbs up and down (or pairs split); no reward model",
        ),
        Trainer(
            kind="rloo",
            title="RLOO",
            config=RLOOConfig,
            module="training.rloo.train",
            prefix="rloo",
            output="actor",
            policy=True,
            step_key="loss/actor",
            plots=(
                "reward/score_mean",
                "reward/kl",
                "loss/actor",
                "rloo/advantage_abs_mean",
                "policy/clipfrac",
                "response/length_mean",
                "perf/tokens_per_s",
                "watch/heldout_score_mean",
                "checkpoint/heldout_score_mean",
                "checkpoint/score_mean",
            ),
            headline=_ppo_headline,
            progress=_ppo_progress,
            data="prompts",
            command="train-rloo",
            summary="k responses per prompt, each baselined by the others; no critic",
        ),
        Trainer(
            kind="online_dpo",
            title="Online DPO",
            config=OnlineDPOConfig,
            module="training.online_dpo.train",
            prefix="odpo",
            output="actor",
            policy=True,
            step_key="loss/actor",
            plots=(
                "reward/score_mean",
                "reward/kl",
                "loss/actor",
                "online_dpo/accuracy",
                "online_dpo/score_gap",
                "online_dpo/pairs",
                "response/length_mean",
                "perf/tokens_per_s",
                "watch/heldout_score_mean",
                "checkpoint/heldout_score_mean",
                "checkpoint/score_mean",
            ),
            headline=_ppo_headline,
            progress=_ppo_progress,
            data="prompts",
            command="train-online-dpo",
            summary="k responses per prompt from the policy; DPO on the reward model's best against its worst",
        ),
    )
}


def trainer(kind: str) -> Trainer:
    try:
        return TRAINERS[kind]
    except KeyError:
        raise ValueError(f"unknown trainer {kind!r}: one of {', '.join(TRAINERS)}") from None


def run_config(run: str | Path) -> dict:
    """A run folder's config.json as saved; ValueError when the folder has none that reads as an object."""
    try:
        config = json.loads((Path(run) / "config.json").read_text())
    except (OSError, ValueError):
        raise ValueError(f"{run} is not a run folder: no readable config.json") from None
    if not isinstance(config, dict):
        raise ValueError(f"{run} is not a run folder: its config.json is not an object")
    return config


def kind_of(run: str | Path) -> str:
    """The kind a run folder's config.json records; runs made before kinds were recorded are told apart by the
    one setting each has (PPO's `actor`). ValueError when the folder has no readable config.json."""
    config = run_config(run)
    kind = config.get("kind") or ("ppo" if "actor" in config else "reward")
    trainer(kind)
    return kind


def policy_folder(run: str | Path) -> Path | None:
    """The saved policy of a run folder whose trainer makes one (PPO's actor/, DPO's policy/), None otherwise."""
    try:
        spec = trainer(kind_of(run))
    except ValueError:
        return None
    out = Path(run) / spec.output
    return out if spec.policy and (out / "config.json").is_file() else None


def step_rows(kind: str, rows: list[dict]) -> list[dict]:
    """The metrics rows of a run's training steps (one per step; a resumed step keeps its last row)."""
    key = trainer(kind).step_key
    by_step = {r["step"]: r for r in rows if key in r and "step" in r}
    return [by_step[s] for s in sorted(by_step)]

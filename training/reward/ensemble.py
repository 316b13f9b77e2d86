"""An ensemble of reward models in one run (`rlhf train-rm --ensemble N`): a second judge for PPO.

Member i is a whole reward-model run in RUN/members/i (its own config, metrics, checkpoints and model): seed
seed + i for the head and the data order, and the training prompts of half i % 2 (with N = 2, each member never
sees the other's training prompts, as the HH paper's held-out preference model did not); every member keeps the
same held-out prompts, so their accuracies compare. Members train one after the other in the same processes; a
resumed run skips finished members and resumes the one it was in. At the end RUN/model is member 0 (hard links, no
second copy), so everything that reads a reward run reads an ensemble, and RUN/ensemble.json lists the members
with their held-out accuracy and how much they disagree there."""

from __future__ import annotations

import gc
import hashlib
import json
from dataclasses import replace
from pathlib import Path

from training.reward.config import RewardConfig
from training.runs import ENSEMBLE_FILE, MEMBERS, RunFiles, link_tree, read_status, write_json_atomic


def half_of(rows: list[dict], half: int) -> list[dict]:
    """The rows whose prompt falls in `half` (0 or 1) by a stable hash of its text: a ranking stays whole."""
    return [r for r in rows if hashlib.sha1(r["prompt"].encode()).digest()[0] % 2 == half]


def member_config(cfg: RewardConfig, i: int) -> RewardConfig:
    return replace(cfg, member=i, output_dir=str(Path(cfg.output_dir) / MEMBERS / str(i)))


def disagreement(scores: list[dict]) -> dict:
    """How far the members' held-out scores part: the mean over held-out responses of the standard deviation of
    their standardised scores, and the lowest pairwise correlation. scores: each member's eval_scores.json."""
    import torch

    from training.watch import pearson

    rows = torch.tensor([s["chosen"] + s["rejected"] for s in scores], dtype=torch.float64)  # (members, responses)
    z = (rows - rows.mean(1, keepdim=True)) / rows.std(1, keepdim=True).clamp(min=1e-12)
    corr = [pearson(rows[a], rows[b]) for a in range(len(rows)) for b in range(a + 1, len(rows))]
    return {"std_of_standardised_scores": z.std(0, unbiased=False).mean().item(), "min_correlation": min(corr)}


def summarise(cfg: RewardConfig) -> dict:
    """RUN/ensemble.json's content from the finished members' folders."""
    run, members, scores = Path(cfg.output_dir), [], []
    for i in range(cfg.ensemble):
        folder = run / MEMBERS / str(i)
        final = read_status(folder).get("final", {})
        members.append({"model": f"{MEMBERS}/{i}/model", "seed": cfg.seed + i, "half": i % 2, **final})
        if (folder / "eval_scores.json").is_file():
            scores.append(json.loads((folder / "eval_scores.json").read_text()))
    out = {"members": members}
    if len(scores) == cfg.ensemble and scores[0]["chosen"]:
        out["heldout"] = disagreement(scores)
    return out


def train_ensemble(cfg: RewardConfig, train_member, rank: int) -> None:
    """Each member in turn (finished ones skipped), then RUN/model and RUN/ensemble.json; the run's status says
    which member is training."""
    run = RunFiles(cfg.output_dir, rank)
    for i in range(cfg.ensemble):
        mcfg = member_config(cfg, i)
        if read_status(mcfg.output_dir).get("state") == "finished":
            continue
        run.status("running", step=0, member=i, members=cfg.ensemble)
        if rank == 0:
            Path(mcfg.output_dir).mkdir(parents=True, exist_ok=True)
            mcfg.save(Path(mcfg.output_dir) / "config.json")
        train_member(mcfg)
        state = read_status(mcfg.output_dir)
        if state.get("state") != "finished":  # a Stop: the member checkpointed, the run resumes here
            run.status("stopped", step=state.get("step", 0), member=i, members=cfg.ensemble)
            return
        gc.collect()
    summary = summarise(cfg)
    if rank == 0:
        link_tree(Path(cfg.output_dir) / MEMBERS / "0" / "model", Path(cfg.output_dir) / "model")
        write_json_atomic(Path(cfg.output_dir) / ENSEMBLE_FILE, summary)
    first = {k: v for k, v in summary["members"][0].items() if k.startswith("eval/")}
    heldout = {f"ensemble/{k}": v for k, v in summary.get("heldout", {}).items()}
    run.status("finished", step=0, final={**first, **heldout, "ensemble/members": cfg.ensemble})

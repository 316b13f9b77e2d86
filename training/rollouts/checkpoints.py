"""Checkpoints worth keeping: every `--save-every` steps (and at the end) the actor is evaluated on held-out prompts
(ones PPO never trains on) and saved as a plain HF folder, RUN/checkpoints/actor-stepN; the best is the one the
held-out judge scores highest (the optimised reward model's score where there is no judge), not the last.

RUN/checkpoints.jsonl holds one row per evaluated step: the optimised score, the held-out judge's, the sampled KL
from the reference and the mean length, on the same held-out prompts with the same sampling seed at every step,
with both scores per prompt (`scores`, `heldout_scores`: the watch compares evaluations prompt by prompt)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

CHECKPOINTS_FILE = "checkpoints.jsonl"
EVAL_SEED = 1_000_003


def best_checkpoint(rows: list[dict]) -> dict | None:
    """The row with the highest held-out judge score (the optimised score where no row has a judge); the earliest
    such step on a tie; None without rows."""
    if not rows:
        return None
    key = "heldout_score_mean" if all("heldout_score_mean" in r for r in rows) else "score_mean"
    return max(rows, key=lambda r: (r[key], -r["step"]))


def read_checkpoints(run: str | Path) -> list[dict]:
    """The evaluated checkpoints of a PPO run, one per step (a resumed run's repeat of a step counts once)."""
    path = Path(run) / CHECKPOINTS_FILE
    if not path.is_file():
        return []
    rows = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["step"]] = row
    return [rows[s] for s in sorted(rows)]


def checkpoint_folder(run: str | Path, step: int) -> Path:
    return Path(run) / "checkpoints" / f"actor-step{step}"


@torch.no_grad()
def evaluate(m, prompts: list[list[int]], tokenizer, cfg, step: int) -> dict:
    """One reply per held-out prompt from the actor as it is now (seeded the same way at every step, so checkpoints
    differ only by the actor), scored by the judges, with its sampled KL (k1, nats per sequence) from the
    reference. Every rank evaluates every prompt (identical work keeps ZeRO-3's collective decode in step)."""
    from training.rollouts.rollout import rollout, score

    rng = torch.get_rng_state()
    m.actor.eval()
    scores, heldout, kl, lengths = [], [], [], []
    for i in range(0, len(prompts), cfg.generation_batch_size):
        torch.manual_seed(EVAL_SEED + i)
        mine = prompts[i : i + cfg.generation_batch_size]
        batch = rollout(m.generator(), mine, tokenizer, cfg, m.synced, engine=m.engine(mine[0]))
        exp = score(batch, m.actor, m.ref, None, m.judges, (0.0, 1.0), cfg)  # no values: nothing trains here
        scores.append(exp.raw_scores.float().cpu())
        kl.append(((exp.logprobs - exp.ref_logprobs) * exp.mask).sum(1).float().cpu())
        lengths.append(exp.lengths.float().cpu())
        if exp.heldout_scores is not None:
            heldout.append(exp.heldout_scores.float().cpu())
    torch.set_rng_state(rng)
    row = {
        "step": step,
        "score_mean": torch.cat(scores).mean().item(),
        "kl": torch.cat(kl).mean().item(),
        "length_mean": torch.cat(lengths).mean().item(),
        "prompts": len(prompts),
        # which prompts: the first one's text, so a reader (and a test) can tell held-out prompts from training ones
        "first_prompt": tokenizer.decode(prompts[0], skip_special_tokens=True) if prompts else "",
    }
    row["scores"] = [round(x, 6) for x in torch.cat(scores).tolist()]  # per prompt, in order: the watch pairs them
    if heldout:
        row["heldout_score_mean"] = torch.cat(heldout).mean().item()
        row["heldout_scores"] = [round(x, 6) for x in torch.cat(heldout).tolist()]
    return row

"""The reward model as a judge: its backbone and scalar head read one score at the last response token (the EOS
the RM was trained to score on, or the last token of a cut response), an ensemble's members and their held-out
statistics, and `Judges`, the optimised members and the held-out judges that only watch. Used by PPO and the next
trainer on prompts, chat, best-of-N and batched scoring (training/pairwise/scoring.py); PPO's critic reads through the
same `unwrap` and `backbone`."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from training.kernels.logprobs import position_ids
from training.models import reward_folder


def unwrap(model):
    """The transformers model inside a peft wrapper (LoRA layers stay injected in it), else the model itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def backbone(model):
    model = unwrap(model)
    return getattr(model, model.base_model_prefix)


def reward_scores(model, ids: torch.Tensor, attention_mask: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """(B,) reward-model scores read at position `last` (B,) of each row: the sequence's final token."""
    hidden = backbone(model)(
        input_ids=ids, attention_mask=attention_mask, position_ids=position_ids(attention_mask)
    ).last_hidden_state
    rows = torch.arange(ids.shape[0], device=ids.device)
    return model.score(hidden[rows, last]).squeeze(-1).float()


def judge_folders(ref: str) -> list[Path]:
    """The reward model's folders: an ensemble run's members in order (training/reward/ensemble.py), else one."""
    from training.runs import ENSEMBLE_FILE, ensemble_members

    path = Path(ref).expanduser()
    return ensemble_members(path) if (path / ENSEMBLE_FILE).is_file() else [reward_folder(ref)]


def held_stats(folder: Path) -> tuple[float, float]:
    """(mean, std) of a reward model's held-out scores (its reward_stats.json), (0, 1) where it has none."""
    path = folder / "reward_stats.json"
    stats = json.loads(path.read_text()) if path.is_file() else {}
    if "score_mean" not in stats:
        return 0.0, 1.0
    return float(stats["score_mean"]), max(float(stats["score_std"]), 1e-6)


class Judges:
    """The reward model PPO optimises and the held-out judges that only watch (training/watch.py).

    One member: its score, as before. Several optimised members: each member's score standardised by its own
    held-out statistics, combined by `rule`, and put back on member 0's scale (so clipping, normalisation and the
    KL coefficient mean what they mean for one model). Held-out judges: the mean of their standardised scores."""

    def __init__(self, models: list, stats: list[tuple[float, float]], heldout: int, rule: str):
        from training.watch import split_members

        self.models, self.stats, self.rule = models, stats, rule
        self.optimised, self.heldout = split_members(len(models), heldout)

    def _standard(self, i: int, ids, attention_mask, last) -> torch.Tensor:
        mean, std = self.stats[i]
        return (reward_scores(self.models[i], ids, attention_mask, last) - mean) / std

    def __call__(self, ids, attention_mask, last) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(optimised score (B,), held-out judges' mean standardised score (B,) or None)."""
        from training.watch import combine

        if len(self.optimised) == 1:
            score = reward_scores(self.models[self.optimised[0]], ids, attention_mask, last)
        else:
            z = torch.stack([self._standard(i, ids, attention_mask, last) for i in self.optimised])
            mean, std = self.stats[self.optimised[0]]
            score = combine(z, self.rule) * std + mean
        if not self.heldout:
            return score, None
        return score, torch.stack([self._standard(i, ids, attention_mask, last) for i in self.heldout]).mean(0)

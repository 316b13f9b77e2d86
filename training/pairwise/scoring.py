"""Scoring many replies with a reward model, batched: the demo's evaluation, best-of-N's picks and a round's
selection read scores the way the model was trained (training/pairwise/pairs.py's PairEncoder: chat template + reply +
EOS, cut as in training, read at EOS)."""

from __future__ import annotations

from pathlib import Path

BATCH = 16


def score_texts(
    reward_model: str | Path, prompts: list[str], texts: list[list[str]], dtype: str, max_length: int
) -> list[list[float]]:
    """The reward model's score of each reply: texts[i] are prompt i's replies (any number per prompt)."""
    return load_scorer(reward_model, dtype, max_length)(prompts, texts)


def load_scorer(reward_model: str | Path, dtype: str, max_length: int):
    """The reward model loaded once, as a function (prompts, texts) -> scores like `score_texts`: for a caller that
    scores in many batches (app/jobs/rm_agreement.py)."""
    import torch

    from training.judges import reward_scores
    from training.loaders import load_scalar_model, load_tokenizer
    from training.pairwise.pairs import PairEncoder

    model, tok = load_scalar_model(str(reward_model), dtype), load_tokenizer(reward_model)
    encoder = PairEncoder(tok, max_length)

    def score(prompts: list[str], texts: list[list[str]]) -> list[list[float]]:
        flat = [(p, t) for p, ts in zip(prompts, texts, strict=True) for t in ts]
        scores: list[float] = []
        with torch.no_grad():
            for start in range(0, len(flat), BATCH):
                seqs = [encoder.encode(p, t)[0] for p, t in flat[start : start + BATCH]]
                width = max(map(len, seqs))
                ids = torch.tensor([[tok.pad_token_id] * (width - len(s)) + s for s in seqs])
                mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
                last = torch.full((len(seqs),), width - 1)
                scores += reward_scores(model, ids, mask, last).tolist()
        out, i = [], 0
        for ts in texts:
            out.append(scores[i : i + len(ts)])
            i += len(ts)
        return out

    return score

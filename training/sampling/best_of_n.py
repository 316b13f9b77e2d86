"""Best-of-N of a policy (`rlhf best-of-n`): the baseline PPO has to beat at the same KL.

For each prompt, sample max(N) responses from the policy (the reference model, usually) once; best-of-n keeps the
one of the first n the reward model scores highest (n = 1 is a plain sample), so every n reuses the same samples.
Its KL from the policy is at most log n - (n - 1) / n nats (training/watch.py::best_of_n_kl).

The output file is the native ranking format (annotation/native.py), one line per prompt: the distinct samples,
ranked by the reward model (1 = best; equal scores tie), annotator "best-of-n:<reward>", so `rlhf import` reads it
(a prompt whose samples are all one text, or blank, cannot be a ranking and is left out), plus `scores`,
`sample_of` (the response each sample was) and `best_of`: {n: the pick among the first n samples}."""

from __future__ import annotations

import json
from pathlib import Path

from training.config_file import positive_ints
from training.watch import best_index, best_of_n_kl


def ranks_by_score(scores: list[float]) -> list[int]:
    """Dense ranks, 1 = highest score; equal scores share a rank."""
    order = sorted(set(scores), reverse=True)
    return [order.index(s) + 1 for s in scores]


def parse_ns(text: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4]: distinct positive integers, in increasing order."""
    return positive_ints(text, "--n")


def line(prompt: str, samples: list[str], scores: list[float], ns: list[int], annotator: str) -> dict:
    """One output line: the distinct samples (a ranking holds each text once) ranked by score, `sample_of` (the
    distinct response each sample is), and each n's pick among the first n samples, as an index into responses."""
    responses = list(dict.fromkeys(samples))
    sample_of = [responses.index(s) for s in samples]
    distinct_scores = [scores[samples.index(r)] for r in responses]
    return {
        "prompt": prompt,
        "responses": responses,
        "ranks": ranks_by_score(distinct_scores),
        "annotator": annotator,
        "scores": distinct_scores,
        "sample_of": sample_of,
        "best_of": {str(n): sample_of[best_index(scores[:n])] for n in ns},
    }


def importable(x: dict) -> bool:
    """A ranking `rlhf import` takes: two or more responses, none blank."""
    return len(x["responses"]) >= 2 and all(r.strip() for r in x["responses"])


def summary(lines: list[dict], ns: list[int]) -> list[dict]:
    """Per n: the mean reward-model score of the picks, and the KL bound."""
    return [
        {
            "n": n,
            "score_mean": sum(x["scores"][x["best_of"][str(n)]] for x in lines) / len(lines),
            "kl_bound": best_of_n_kl(n),
        }
        for n in ns
    ]


def score_samples(reward_ref: str, prompts: list[str], samples: list[list[str]], dtype: str = "fp32") -> list:
    """The reward model's score of every sample, read where it was trained to read (chat template + reply +
    EOS, at EOS), as the Compare tab scores a reply."""
    from training.loaders import load_scalar_model, load_tokenizer
    from training.models import prompt_messages, reward_folder
    from training.sampling.chat import score_reply

    folder = reward_folder(reward_ref)
    reward = (load_scalar_model(str(folder), dtype).eval(), load_tokenizer(folder))
    return [
        [score_reply(reward, prompt_messages(p), r) for r in replies]
        for p, replies in zip(prompts, samples, strict=True)
    ]


def run(policy_sampler, reward_ref: str, prompts: list[str], ns: list[int], out: Path, seed: int = 0) -> list[dict]:
    """Sample max(ns) replies per prompt with `policy_sampler` (training/sampling/generation.py::Sampler), score them,
    write the file; returns the per-n summary."""
    k = max(ns)
    samples: list[list[str]] = []
    step = policy_sampler.config.batch_prompts
    for i in range(0, len(prompts), step):
        chunk = prompts[i : i + step]
        samples += [[g.text for g in gens] for gens in policy_sampler(chunk, k, seed + i)]
    scores = score_samples(reward_ref, prompts, samples)
    annotator = f"best-of-n:{Path(reward_ref).name}"
    lines = [line(p, r, s, ns, annotator) for p, r, s in zip(prompts, samples, scores, strict=True)]
    tmp = out.with_name(out.name + ".partial")
    tmp.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines if importable(x)))
    tmp.replace(out)  # all or nothing
    return summary(lines, ns)

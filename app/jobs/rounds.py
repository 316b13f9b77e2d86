"""`rlhf round start` and the Train tab's "Start the next round": the tuned policy goes back into the annotation
queue (issue 13, Llama 2's practice).

1. The candidates: fresh prompts from a file, else the store's prompts no round has asked yet (`--reask`: all).
2. The choice (annotation/selection.py): `random` takes n of them by a seeded shuffle; `uncertain` and `disagree`
   first sample K replies of every candidate from the policy and score them with the latest reward run (its
   members, for `disagree`), then keep the n the reward model is least sure about.
3. K replies of the chosen prompts from the policy, plus M from the previous round's policy (`--mix-previous`), so
   each ranking puts old and new side by side and says which one won.
4. One transaction: the round, its prompts in asking order (the Annotate queue hands them out so), its responses.

Models are loaded while the store is closed; nothing is written until every sample exists."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from annotation import selection
from app.jobs.round_config import RoundConfig
from store.db import read, write
from store.errors import UserError
from store.pairs import round_pairs
from store.prompts import add_prompts, all_prompts, prompts_by_text
from store.responses import add_samples, samples_from
from store.rounds import asked_prompts, latest_round, record_round, round_policies
from store.runs import reward_run_paths


def policy_ref(ref: str) -> str:
    """What a round samples from: 'default', a HF folder, or a run folder's saved policy (PPO's actor, DPO's)."""
    from training.registry import policy_folder

    if ref == "default":
        return ref
    path = Path(ref).expanduser()
    if not path.is_dir():
        raise UserError(f"--policy {ref}: no such model or run folder")
    if (path / "config.json").is_file() and (path / "status.json").is_file():  # a run folder
        folder = policy_folder(path)
        if folder is None:
            raise UserError(f"--policy {ref}: this run saved no policy (a reward model, or not finished)")
        return str(folder.resolve())
    return str(path.resolve())


def sampling_ref(model_id: str | None, round_: int) -> str:
    """A stored model id back to something a Sampler loads ('default:<name>' -> 'default', a folder -> itself)."""
    if model_id and model_id.startswith("default:"):
        return "default"
    if model_id and Path(model_id).is_dir():
        return model_id
    raise UserError(
        f"round {round_}'s responses came from {model_id or 'no model'}, which cannot be sampled again: "
        "--mix-previous needs the previous round's policy as a model"
    )


def candidates(db, cfg: RoundConfig) -> list[tuple[int, str]]:
    """(prompt id, text) the round may ask, oldest first: a file's prompts (added to the store), else the store's
    prompts no round has asked yet (all of them with --reask)."""
    if cfg.prompts:
        from annotation.prompt_files import read_prompts

        texts = read_prompts(cfg.prompts)
        with write(db) as con:
            add_prompts(con, texts, source=Path(cfg.prompts).name)
            rows = prompts_by_text(con, texts)
    else:
        with read(db) as con:
            rows = all_prompts(con)
    if cfg.reask:
        return rows
    with read(db) as con:
        asked = asked_prompts(con)
    return [r for r in rows if r[0] not in asked]


def latest_reward(db, ref: str) -> Path:
    """The reward run a selection scores with: --reward, else the store's newest finished reward run."""

    if ref:
        path = Path(ref)
        if not (path / "model").is_dir():
            raise UserError(f"--reward {ref}: not a finished reward-model run (no model/ folder)")
        return path
    with read(db) as con:
        paths = reward_run_paths(con)
    found = first_finished(paths)
    if found:
        return found
    raise UserError("uncertain and disagree selections score with a reward model: train one first (rlhf train-rm)")


def first_finished(paths: list[str]) -> Path | None:
    """The first of these reward runs that finished with a model."""
    from training.runs import effective_status

    for p in paths:
        if effective_status(p).get("state") == "finished" and (Path(p) / "model").is_dir():
            return Path(p)
    return None


def scorer(db, cfg: RoundConfig) -> list[Path]:
    """The reward models a selection scores with, checked before anything is sampled: the latest reward run's model
    for `uncertain`, its ensemble's members for `disagree`; [] for `random`."""
    from training.runs import ensemble_members

    if cfg.select == "random":
        return []
    run = latest_reward(db, cfg.reward)
    members = ensemble_members(run)
    if cfg.select == "uncertain":
        return members[:1]
    if len(members) < 2:
        raise UserError(f"--select disagree needs a reward ensemble (rlhf train-rm --ensemble 2+); {run.name} has none")
    return members


def selection_values(models: list[Path], cfg: RoundConfig, prompts: list[str], replies: list[list[str]]) -> list:
    """Per candidate: the mean score gap of its replies (uncertain) or the ensemble's order disagreement."""
    from training.pairwise.scoring import score_texts
    from training.reward.config import RewardConfig

    max_length = RewardConfig().max_length
    per_member = [score_texts(m, prompts, replies, cfg.dtype, max_length) for m in models]
    if cfg.select == "uncertain":
        return [selection.mean_gap(s) for s in per_member[0]]
    return [selection.order_disagreement([pm[i] for pm in per_member]) for i in range(len(prompts))]


def draw(
    ref: str, cfg: RoundConfig, prompts: list[str], k: int, seed: int, samplers=None
) -> tuple[list[list], str, dict]:
    """k replies per prompt from one model: (Generated lists, its model id, the stored sampling parameters).
    `samplers(config)`: a context manager giving a sampler (the app's, kept warm between rounds); else a sampler
    opened for this call."""
    from training.sampling.generation import SamplingConfig, open_sampler

    config = SamplingConfig(
        model=ref, temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, dtype=cfg.dtype, seed=cfg.seed
    )
    out = []
    # the app's engine is kept, whatever the job's size; a command's own, for this job, is sized by it (too_small)
    opened = samplers(config) if samplers else open_sampler(config, sequences=len(prompts) * k)
    with opened as sampler:
        for i in range(0, len(prompts), config.batch_prompts):
            out += sampler(prompts[i : i + config.batch_prompts], k, seed + i)
        return out, sampler.model_id, sampler.params(k)


def check(cfg: RoundConfig) -> None:
    if cfg.k < 1 or cfg.mix_previous < 0 or cfg.k + cfg.mix_previous < 2:
        raise UserError("a round needs --k >= 1 and --mix-previous >= 0 with at least 2 responses per prompt")
    if cfg.select not in selection.RULES:
        raise UserError(f"--select must be one of {', '.join(selection.RULES)}, got {cfg.select!r}")
    if cfg.select != "random" and cfg.k < 2:
        raise UserError(f"--select {cfg.select} compares the policy's own replies: it needs --k >= 2")
    if cfg.n < 0:
        raise UserError(f"--n must be >= 0, got {cfg.n}")


def start_round(db, cfg: RoundConfig, log: Callable[[str], None] = print, samplers=None) -> dict:
    """Sample, choose and store the next round; returns its summary. `samplers`: the app's warm engines
    (AppContext.sampler), else each draw opens its own."""
    check(cfg)
    policy = policy_ref(cfg.policy)
    with read(db) as con:
        round_ = latest_round(con) + 1
        if cfg.mix_previous and round_ == 1:
            raise UserError("--mix-previous mixes in the previous round's policy: round 1 has none")
        previous = sampling_ref(round_policies(con, round_ - 1)[0], round_ - 1) if cfg.mix_previous else None
    judges = scorer(db, cfg)
    pool = candidates(db, cfg)
    if not pool:
        raise UserError("no prompts to ask: add some (--prompts FILE) or ask ranked ones again (--reask)")
    n = min(cfg.n or len(pool), len(pool))
    texts = [t for _, t in pool]
    if cfg.select == "random":
        order, values = selection.select([0.0] * len(pool), n, "random", cfg.seed), None
        drawn, model_id, params = draw(policy, cfg, [texts[i] for i in order], cfg.k, cfg.seed, samplers)
    else:
        everything, model_id, params = draw(policy, cfg, texts, cfg.k, cfg.seed, samplers)
        values = selection_values(judges, cfg, texts, [[g.text for g in gens] for gens in everything])
        order = selection.select(values, n, cfg.select, cfg.seed)
        drawn = [everything[i] for i in order]
    chosen = [pool[i] for i in order]
    log(f"round {round_}: {len(chosen)} of {len(pool)} candidate prompts chosen ({cfg.select})")
    old = draw(previous, cfg, [t for _, t in chosen], cfg.mix_previous, cfg.seed + 1, samplers) if previous else None
    with write(db) as con:
        if latest_round(con) + 1 != round_:
            raise UserError(f"another round {round_} was started meanwhile: nothing of this one was stored")
        record_round(
            con,
            round_,
            model_id,
            old[1] if old else None,
            cfg.select,
            {**dataclasses.asdict(cfg), "policy": policy, "candidates": len(pool)},
            [(pid, values[i] if values else None) for (pid, _), i in zip(chosen, order, strict=True)],
        )
        ids = [pid for pid, _ in chosen]
        dup = add_samples(con, samples_from(ids, drawn, cfg.seed, params), model_id, round_)
        if old:  # the previous policy's replies come after the new one's
            dup += add_samples(con, samples_from(ids, old[0], cfg.seed + 1, old[2], first=cfg.k), old[1], round_)
    return {
        "round": round_,
        "policy": model_id,
        "previous_policy": old[1] if old else None,
        "prompts": len(chosen),
        "candidates": len(pool),
        "responses": len(chosen) * (cfg.k + cfg.mix_previous),
        "duplicates": dup,
    }


def round_accuracy(db, round_: int, model: Path, dtype: str = "fp32") -> tuple[float, int]:
    """(share of round `round_`'s pairs the reward model orders as the annotators did, pairs); a tie is wrong."""
    from training.pairwise.scoring import score_texts
    from training.reward.config import RewardConfig

    with read(db) as con:
        pairs = round_pairs(con, round_)
    if not pairs:
        return float("nan"), 0
    scores = score_texts(
        model, [p.prompt for p in pairs], [[p.chosen, p.rejected] for p in pairs], dtype, RewardConfig().max_length
    )
    return sum(c > r for c, r in scores) / len(pairs), len(pairs)


def fresh_pairs(db, run: Path) -> dict | None:
    """After a reward run trained on a store with 2+ rounds: its accuracy on the newest round's pairs, and that of
    the reward model before it (the newest finished reward run recorded earlier): how far the last model had already
    generalised to what the new policy wrote, and how well the new one fits it. Saved as RUN/fresh_pairs.json."""
    import json

    with read(db) as con:
        round_ = latest_round(con)
        earlier = reward_run_paths(con, before=run.name)
    if round_ < 2:
        return None
    previous = first_finished(earlier)
    after, n = round_accuracy(db, round_, run / "model")
    if n == 0:
        return None
    out = {"round": round_, "pairs": n, "after": after, "previous_run": previous.name if previous else None}
    out["before"] = round_accuracy(db, round_, previous / "model")[0] if previous else None
    (run / "fresh_pairs.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


def fresh_pairs_line(r: dict) -> str:
    before = f"{r['before']:.1%} by the reward model before it ({r['previous_run']}), " if r["previous_run"] else ""
    return f"round {r['round']}'s {r['pairs']} pairs: {before}{r['after']:.1%} by this one"

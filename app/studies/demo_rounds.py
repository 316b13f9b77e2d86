"""`rlhf demo --rounds R --label-budget B --select random,uncertain`: does learning in rounds pay?

The same budget of B scripted-annotator rankings is spent in arms, each in its own store:

- one round: B prompts chosen at random, K samples of the SFT model each, a reward model, PPO;
- R rounds per selection rule: round 1 is B/R random prompts from the SFT model (shared by every multi-round arm:
  one store, copied); round r >= 2 asks B/R prompts chosen by the rule (app/jobs/rounds.py), K samples from the last
  round's PPO actor plus one from the policy before it in each ranking, then a reward model warm-started from the
  last one on every round so far, and PPO continued from the last actor. PPO's steps are split evenly over the
  rounds, so every arm takes the one-round arm's number of PPO steps.

After every round, on the held-out prompts: the reward model's accuracy on the annotator's pairs of the reference
samples, and the actor's win rate over the SFT model by the scripted annotator (bootstrap interval over prompts):
points against labels spent. The report answers: do R rounds beat one at the same budget, and does a selection
rule reach random's held-out accuracy with fewer labels."""

from __future__ import annotations

import dataclasses
import itertools
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from app.studies.demo_config import DemoConfig
from store.db import StoreRef
from store.errors import UserError


@dataclasses.dataclass
class Arm:
    name: str
    rounds: int
    select: str
    points: list[dict] = dataclasses.field(default_factory=list)


def copy_store(src: str | Path, dst: str | Path) -> None:
    """A closed store file (and its write-ahead log, if one was left) copied whole."""
    shutil.copy(src, dst)
    if Path(f"{src}.wal").is_file():
        shutil.copy(f"{src}.wal", f"{dst}.wal")


def budget_of(cfg: DemoConfig, train_prompts: int) -> int:
    """The label budget (rankings): --label-budget, else half the training prompts; at most all of them."""
    budget = cfg.label_budget or train_prompts // 2
    if budget < 2 * cfg.rounds or budget > train_prompts:
        raise UserError(f"--label-budget {budget} must be between {2 * cfg.rounds} and {train_prompts} prompts")
    return budget


def selects_of(cfg: DemoConfig) -> list[str]:
    from annotation.selection import RULES

    names = [s.strip() for s in cfg.select.split(",") if s.strip()]
    if not names or any(s not in RULES for s in names):
        raise UserError(f"--select takes {', '.join(RULES)} separated by commas, got {cfg.select!r}")
    return names


def shares(budget: int, rounds: int) -> list[int]:
    """The budget split over the rounds, the remainder in the last: 10 over 3 -> [3, 3, 4]."""
    return [budget // rounds] * (rounds - 1) + [budget - (budget // rounds) * (rounds - 1)]


def one_round(ctx: dict, arm: Arm, db: StoreRef, round_: int, n: int, steps: int, previous: dict | None) -> dict:
    """Round `round_` of an arm in its store: choose and sample, rank by the scripted annotator, reward model,
    PPO; returns {"rm": run, "ppo": run, "point": ...}."""
    from app.jobs.round_config import RoundConfig
    from app.jobs.rounds import start_round
    from app.jobs.training import prepare_run, run_training
    from app.studies.demo_common import demo_taste, ppo_config, rank_samples
    from training.reward.config import RewardConfig

    cfg, log, t0 = ctx["cfg"], ctx["log"], time.time()
    first = previous is None
    policy = ctx["model"] if first else str(previous["ppo"])
    select = "random" if first else arm.select
    start_round(
        db,
        RoundConfig(
            policy=policy,
            k=cfg.k,
            mix_previous=0 if first else 1,
            select=select,
            n=n,
            temperature=1.0,
            max_new_tokens=cfg.max_new_tokens,
            dtype=cfg.dtype,
            seed=cfg.seed + round_,
        ),
        log=log,
    )
    ranked = rank_samples(db, demo_taste(cfg), round_)
    rm_model = ctx["reward_base"] if first else str(previous["rm"] / "model")
    ensemble = 2 if ctx["ensemble"] else 1  # every arm alike: with a disagree arm, all train a 2-member ensemble
    rm_cfg = RewardConfig(model=rm_model, epochs=cfg.rm_epochs, lr=cfg.rm_lr, dtype=cfg.dtype, seed=cfg.seed)
    rm = prepare_run(db, dataclasses.replace(rm_cfg, ensemble=ensemble), ctx["runs"])
    _finished(rm, run_training("reward", rm))
    ppo_cfg = ppo_config(cfg, policy, rm, steps, cfg.seed + round_)
    ppo = prepare_run(db, ppo_cfg, ctx["runs"])
    _finished(ppo, run_training("ppo", ppo))
    point = evaluate(ctx, rm, ppo)
    labels = (previous["point"]["labels"] if previous else 0) + ranked.added
    point.update(round=round_, labels=labels, seconds=round(time.time() - t0, 1))
    log(
        f"{arm.name}, round {round_}: {point['labels']} labels, reward model {point['rm_accuracy']:.1%}, "
        f"win rate {point['win_rate']:.1%}"
    )
    return {"rm": rm, "ppo": ppo, "point": point}


def _finished(run: Path, status: dict) -> None:
    """A run that did not finish ends the study; a finished one drops its DeepSpeed resume state: the study keeps
    the saved models only."""
    from app.studies.demo_common import drop_resume_state

    if status.get("state") != "finished":
        raise UserError(f"the rounds study's run {run.name} {status.get('state')}: {status.get('error', run)}")
    drop_resume_state(run)


def evaluate(ctx: dict, rm: Path, ppo: Path) -> dict:
    """The reward model's held-out accuracy and the actor's win rate over the SFT model, on the held-out prompts."""
    from annotation.winrate import ratio_bootstrap_ci
    from app.studies.demo_common import compare, judging, pair_counts, sample_texts, sampling_config
    from training.pairwise.scoring import score_texts
    from training.sampling.generation import open_sampler

    cfg, heldout, reference = ctx["cfg"], ctx["heldout"], ctx["reference"]
    scores = score_texts(rm / "model", heldout, reference, cfg.dtype, ctx["max_length"])
    judge = judging(cfg, heldout)
    counts = pair_counts(heldout, reference, scores, judge.taste)
    pairs = sum(t for _, t in counts)
    accuracy = sum(r for r, _ in counts) / pairs
    with open_sampler(sampling_config(cfg, str(ppo / "actor"))) as sampler:
        actor = sample_texts(sampler, heldout, cfg.k, cfg.seed + 2 * 10**6)
    won = compare(actor, reference, cfg.seed, judge)
    rm_ci = list(ratio_bootstrap_ci(counts, seed=cfg.seed))
    return {
        "rm_accuracy": accuracy,
        "rm_ci95": rm_ci,
        "rm_pairs": pairs,
        "win_rate": won["win_rate"],
        "ci95": won["ci95"],
    }


def ppo_steps(cfg: DemoConfig, train_prompts: int) -> int:
    """The one-round arm's PPO steps: --ppo-steps, else epochs over the training prompts in rollout batches."""
    from app.studies.demo_common import ppo_settings
    from training.ppo.config import PPOConfig

    batch = ppo_settings(cfg.ppo_settings).get("generation_batch_size", PPOConfig.generation_batch_size)
    return cfg.ppo_steps or cfg.ppo_epochs * -(-train_prompts // batch)


def run_rounds_study(cfg: DemoConfig, folder: Path, quick: bool, log: Callable[[str], None]) -> dict:
    """Every arm; results.json and report.md in `folder`."""
    from app.studies.demo_common import sample_texts, sampling_config, set_up
    from training.precision import with_resolved_dtype
    from training.reward.config import RewardConfig
    from training.sampling.generation import open_sampler

    t0 = time.time()
    cfg, dtype_line = with_resolved_dtype(cfg)
    log(dtype_line)
    model, reward_base, train, heldout, template = set_up(cfg, folder)
    budget, selects = budget_of(cfg, len(train)), selects_of(cfg)
    with open_sampler(sampling_config(cfg, model)) as sampler:
        reference = sample_texts(sampler, heldout, cfg.k, cfg.seed + 10**6)
    steps = ppo_steps(cfg, len(train))
    ctx = {
        "cfg": cfg,
        "log": log,
        "model": model,
        "reward_base": reward_base,
        "heldout": heldout,
        "reference": reference,
        "runs": folder / "runs",
        "max_length": RewardConfig().max_length,
        "ensemble": "disagree" in selects,
    }
    arms = [Arm("1 round", 1, "random")] + [Arm(f"{cfg.rounds} rounds, {s}", cfg.rounds, s) for s in selects]
    db_of = {arm.name: str(folder / f"arm-{i}.duckdb") for i, arm in enumerate(arms)}
    copy_store(template, db_of[arms[0].name])
    done = one_round(ctx, arms[0], db_of[arms[0].name], 1, budget, steps, None)  # the one-round arm
    arms[0].points.append(done["point"])
    # round 1 of the multi-round arms is the same for all of them: run once, its store copied to each arm
    per_round, per_steps = shares(budget, cfg.rounds), max(1, steps // cfg.rounds)
    shared = str(folder / "round-1.duckdb")
    copy_store(template, shared)
    first = one_round(ctx, arms[1], shared, 1, per_round[0], per_steps, None)
    for arm in arms[1:]:
        copy_store(shared, db_of[arm.name])
        arm.points.append(first["point"])
        last = first
        for r in range(2, cfg.rounds + 1):
            last = one_round(ctx, arm, db_of[arm.name], r, per_round[r - 1], per_steps, last)
            arm.points.append(last["point"])
    results = {
        "quick": quick,
        "study": "rounds",
        "config": dataclasses.asdict(cfg),
        "folder": str(folder),
        "label_budget": budget,
        "ppo_steps": steps,
        "heldout_prompts": len(heldout),
        "arms": [dataclasses.asdict(a) for a in arms],
        "answers": answers(arms),
        "total_s": round(time.time() - t0, 1),
    }
    (folder / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    write_rounds_report(folder, results)
    return results


def answers(arms: list[Arm]) -> dict:
    """The study's two questions, from the arms' points: the multi-round random arm against one round at the same
    budget (win rate and reward-model accuracy), and for each other rule the labels at which it first reached the
    random arm's final held-out accuracy (None: it did not)."""
    one = arms[0].points[-1]
    by_rule = {a.select: a for a in arms[1:]}
    out: dict = {}
    if "random" in by_rule:
        many = by_rule["random"].points[-1]
        out["rounds_vs_one"] = {
            "win_rate": [many["win_rate"], one["win_rate"]],
            "ci95": [many["ci95"], one["ci95"]],
            "rm_accuracy": [many["rm_accuracy"], one["rm_accuracy"]],
            "rm_ci95": [many["rm_ci95"], one["rm_ci95"]],
            "rounds_win": many["win_rate"] > one["win_rate"],
            "intervals_overlap": many["ci95"][0] <= one["ci95"][1] and one["ci95"][0] <= many["ci95"][1],
        }
        target = by_rule["random"].points[-1]["rm_accuracy"]
        out["selection"] = {
            rule: {
                "target": target,
                "target_ci95": by_rule["random"].points[-1]["rm_ci95"],
                "final": arm.points[-1]["rm_accuracy"],
                "final_ci95": arm.points[-1]["rm_ci95"],
                "budget": arm.points[-1]["labels"],
                "labels_to_reach": next((p["labels"] for p in arm.points if p["rm_accuracy"] >= target), None),
            }
            for rule, arm in by_rule.items()
            if rule != "random"
        }
    return out


def headlines(r: dict) -> dict[str, tuple[float, list[float] | None]]:
    """The study's answers as numbers that combine over seeds (app/studies/demo_seeds.py): name -> (value, its
    per-prompt 95% interval or None). Each arm's final win rate and held-out accuracy; the multi-round random arm
    minus one round, on both; and each other rule's accuracy after each of its rounds 2+ minus random's final one
    (above zero at fewer labels than the budget: the rule reached random's accuracy with fewer labels)."""
    # rows are named by the labels each round was given (the budget's shares), the same in every seed; the labels
    # a round stored can be a few fewer (a prompt whose samples are all alike is not ranked)
    rounds, budget = r["config"]["rounds"], r["label_budget"]
    given = list(itertools.accumulate(shares(budget, rounds)))
    out: dict[str, tuple[float, list[float] | None]] = {}
    for arm in r["arms"]:
        p, n = arm["points"][-1], given[len(arm["points"]) - 1] if arm["rounds"] > 1 else budget
        out[f"{arm['name']}: win rate over SFT at {n} labels"] = (p["win_rate"], p["ci95"])
        out[f"{arm['name']}: held-out reward-model accuracy at {n} labels"] = (p["rm_accuracy"], p["rm_ci95"])
    one, by_rule = r["arms"][0]["points"][-1], {a["select"]: a for a in r["arms"][1:]}
    if "random" in by_rule:
        many = by_rule["random"]["points"][-1]
        out[f"{rounds} rounds (random) minus 1 round: win rate over SFT"] = (many["win_rate"] - one["win_rate"], None)
        out[f"{rounds} rounds (random) minus 1 round: held-out reward-model accuracy"] = (
            many["rm_accuracy"] - one["rm_accuracy"],
            None,
        )
        for rule, arm in by_rule.items():
            for n, p in list(zip(given, arm["points"], strict=False))[1:] if rule != "random" else []:  # round 1 shared
                name = f"{rule} at {n} labels minus random at {budget}: held-out reward-model accuracy"
                out[name] = (p["rm_accuracy"] - many["rm_accuracy"], None)
    return out


def answer_lines(r: dict) -> list[str]:
    a, lines = r["answers"], []
    if "rounds_vs_one" in a:
        v = a["rounds_vs_one"]
        (w_many, w_one), (c_many, c_one) = v["win_rate"], v["ci95"]
        verdict = "beat" if v["rounds_win"] else "did not beat"
        overlap = " (the intervals overlap: no clear difference)" if v["intervals_overlap"] else ""
        lines.append(
            f"{r['config']['rounds']} rounds {verdict} 1 round at {r['label_budget']} labels: win rate "
            f"{w_many:.1%} ({c_many[0]:.1%}-{c_many[1]:.1%}) against {w_one:.1%} ({c_one[0]:.1%}-{c_one[1]:.1%})"
            f"{overlap}; held-out reward-model accuracy {v['rm_accuracy'][0]:.1%} ({_ci(v['rm_ci95'][0])}) against "
            f"{v['rm_accuracy'][1]:.1%} ({_ci(v['rm_ci95'][1])})"
        )
        for rule, s in a.get("selection", {}).items():
            reached = (
                f"reached it at {s['labels_to_reach']} labels"
                if s["labels_to_reach"] is not None
                else f"did not reach it within {s['budget']} labels"
            )
            target = f"random's final held-out reward-model accuracy is {s['target']:.1%} ({_ci(s['target_ci95'])})"
            final = f"{rule}'s is {s['final']:.1%} ({_ci(s['final_ci95'])}) at {s['budget']} labels"
            lines.append(f"{rule}: {target}; {rule} {reached}; {final}")
    return lines


def _ci(ci: list[float]) -> str:
    return f"{ci[0]:.1%}-{ci[1]:.1%}"


def write_rounds_report(folder: Path, r: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 3.8))
    for arm in r["arms"]:
        xs = [p["labels"] for p in arm["points"]]
        pts = arm["points"]
        rm_err = [[p["rm_accuracy"] - p["rm_ci95"][0] for p in pts], [p["rm_ci95"][1] - p["rm_accuracy"] for p in pts]]
        a.errorbar(xs, [p["rm_accuracy"] for p in pts], yerr=rm_err, marker="o", capsize=3, label=arm["name"])
        err = [[p["win_rate"] - p["ci95"][0] for p in pts], [p["ci95"][1] - p["win_rate"] for p in pts]]
        b.errorbar(xs, [p["win_rate"] for p in arm["points"]], yerr=err, marker="o", capsize=3, label=arm["name"])
    a.set(title="held-out reward-model accuracy", xlabel="labels spent (rankings)", ylim=(0, 1.02))
    b.set(title="actor's win rate over the SFT model (scripted annotator)", xlabel="labels spent (rankings)")
    b.axhline(0.5, color="grey", lw=0.8, ls=":")
    a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "rounds.png", dpi=110)
    plt.close("all")
    rows = "\n".join(
        f"|{arm['name']}|{p['round']}|{p['labels']}|{p['rm_accuracy']:.1%}|{_ci(p['rm_ci95'])}|{p['win_rate']:.1%}|"
        f"{_ci(p['ci95'])}|"
        for arm in r["arms"]
        for p in arm["points"]
    )
    c = r["config"]
    text = f"""# rlhf-studio demo: rounds{" (quick)" if r["quick"] else ""}

{r["label_budget"]} rankings by the scripted annotator ("concise"), spent in one round or in {c["rounds"]} rounds
(round 1 random from the SFT model, then prompts chosen by each rule, sampled from the last round's actor with one
sample of the policy before it in each ranking; the reward model warm-starts from the last one, PPO continues the
last actor; {r["ppo_steps"]} PPO steps in every arm). Measured after every round on {r["heldout_prompts"]} held-out
prompts.

{chr(10).join("- " + line for line in answer_lines(r))}

![rounds](rounds.png)

|arm|round|labels|reward-model accuracy|95% interval|win rate over SFT|95% interval|
|---|---:|---:|---:|---|---:|---|
{rows}

Settings: `{json.dumps(c)}`. Wall time {r["total_s"] / 60:.1f} min.
"""
    (folder / "report.md").write_text(text)

"""The demo's labeling campaign (issue 30; `rlhf demo --campaign`, on in --quick): what the annotator dashboard is
worth. The demo's training prompts and samples go into a second store, ranked by three scripted annotators who
share the prompts between them (one prompt each, in turn): two careful ones are the demo's first two annotators (with
the population taste, each its own weights, noise, position bias and ties; with the concise taste, the word counter
itself), and one is noisy: the third annotator, giving a random order on NOISY_SHARE of its tasks. A lead ranks
GOLD_SHARE of the prompts by the taste's truth (the panel's) and marks them gold; every annotator also ranks those,
unaware. Then:

- the dashboard (annotation/dashboard.py) on that store: it should single out the noisy annotator, and only it;
- two reward models with the demo's settings (one member each), one on every pair and one leaving out the
  annotators under MIN_GOLD_ACCURACY on gold (`--min-gold-accuracy`, store/snapshot.py), each judged on the
  demo's held-out reference samples by the taste's truth: the accuracies with bootstrap intervals over
  prompts, and the difference with its paired interval.

The rankings are pure functions of the texts and a seed (`campaign_rankings`); the rest is the product's own path
(an import, gold marking, snapshots, `train-rm` through the launcher)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

from annotation import scripted
from annotation.imports import ImportSummary, store_rankings
from app.studies.demo_config import DemoConfig
from app.studies.demo_taste import Taste
from store.db import StoreRef
from store.errors import UserError
from store.rankings import RankedItem, RankingIn

CAREFUL = ("careful-a", "careful-b")
NOISY = "noisy"
LEAD = "lead"
NOISY_SHARE = 0.75  # of the noisy annotator's tasks, the share given a random order
GOLD_SHARE = 0.15  # of the prompts, the share the lead ranks and marks gold (at least MIN_GOLD_PROMPTS)
MIN_GOLD_PROMPTS = 8
# The reward model's bar. The noisy annotator's expected gold accuracy is 1 - NOISY_SHARE / 2 = 62.5% (a random
# order gets a pair right half the time), with a spread of about 7 points over the quick demo's 14 gold prompts;
# the careful ones score 100%.
MIN_GOLD_ACCURACY = 0.8
LEAD_TIME_S = 30.0  # every scripted answer takes this long: speed is not what the study is about


def noisy_order(ranks: list[int], rng: random.Random, share: float) -> list[int]:
    """`ranks` as they are, or (with probability `share`) a random strict order of the same responses."""
    if rng.random() >= share:
        return list(ranks)
    order = list(range(1, len(ranks) + 1))
    rng.shuffle(order)
    return order


def gold_count(n_prompts: int) -> int:
    return min(n_prompts, max(MIN_GOLD_PROMPTS, round(GOLD_SHARE * n_prompts)))


def campaign_rankings(tasks: list[tuple[str, list[str]]], seed: int, taste: Taste) -> tuple[list[RankingIn], int]:
    """(every ranking of the campaign, how many of the first prompts are gold) for tasks (prompt, its rankable
    responses): the gold prompts are ranked by the lead and by all three annotators, every other prompt by one
    annotator in turn (careful-a, careful-b, noisy, careful-a, ...)."""
    rng = random.Random(seed)
    gold = gold_count(len(tasks))
    annotators = [*CAREFUL, NOISY]
    out = []
    for i, (prompt, texts) in enumerate(tasks):
        who = [LEAD, *annotators] if i < gold else [annotators[(i - gold) % len(annotators)]]
        for name in who:
            if name == LEAD:
                ranks = taste.truth(prompt, texts)
            else:
                ranks = taste.ranking(i, prompt, texts, who=annotators.index(name))
                ranks = noisy_order(ranks, rng, NOISY_SHARE) if name == NOISY else ranks
            out.append(
                RankingIn(
                    prompt=prompt,
                    items=[
                        RankedItem(text=t, rank=r, shown_position=j)
                        for j, (t, r) in enumerate(zip(texts, ranks, strict=True))
                    ],
                    annotator=name,
                    source="native",
                    external_key=f"campaign:{name}:{i}",
                    lead_time_s=LEAD_TIME_S,
                )
            )
    return out, gold


def build_store(demo_db: StoreRef, path: Path, seed: int, taste: Taste) -> tuple[int, int]:
    """The campaign's store at `path` from the demo store's samples; returns (rankings, gold prompts)."""
    from store.db import init_store, read, write
    from store.gold import latest_rankings_of, mark_gold
    from store.responses import responses_by_prompt

    with read(demo_db, create=False) as con:
        responses = responses_by_prompt(con)
    by_prompt: dict[str, list[str]] = {}
    for r in responses:
        by_prompt.setdefault(r.prompt, []).append(r.text)
    tasks = []
    for prompt, texts in by_prompt.items():
        keep = [texts[i] for i in scripted.rankable(texts)]
        if len(keep) >= 2 and len(set(taste.truth(prompt, keep))) > 1:  # a ranking that gives pairs
            tasks.append((prompt, keep))
    rankings, gold = campaign_rankings(tasks, seed, taste)
    init_store(str(path))
    summary = ImportSummary(annotations=len(rankings))
    store_rankings(str(path), rankings, summary, source="native", origin="demo campaign", content_sha256=None)
    with write(str(path)) as con:
        mark_gold(con, latest_rankings_of(con, LEAD), LEAD)
    return summary.added, gold


def run_campaign(
    cfg: DemoConfig,
    demo_db: StoreRef,
    folder: Path,
    reward_base: str,
    heldout: list[str],
    reference: list[list[str]],
    log: Callable[[str], None],
) -> dict:
    """The study, as the results' `campaign` field."""
    from annotation.dashboard import annotator_rows

    db = folder / "campaign.duckdb"
    from app.studies.demo_common import demo_taste

    rankings, gold = build_store(demo_db, db, cfg.seed, demo_taste(cfg))
    rows = {r.annotator: r for r in annotator_rows(str(db))}
    flagged = sorted(name for name, r in rows.items() if r.watch)
    log(f"campaign: {rankings} rankings by {len(rows)} annotators, {gold} gold prompts; the dashboard flags {flagged}")
    arms = {}
    for arm, min_gold in (("all", 0.0), ("gold-filtered", MIN_GOLD_ACCURACY)):
        arms[arm] = a = train_arm(cfg, db, folder, reward_base, heldout, reference, min_gold)
        log(f"campaign reward model ({arm}): held-out accuracy {a['accuracy']:.3f} on {a['judged']} pairs")
    diff = paired_difference(arms["all"]["counts"], arms["gold-filtered"]["counts"], cfg.seed)
    return {
        "taste": cfg.taste,
        "rankings": rankings,
        "gold_prompts": gold,
        "noisy_share": NOISY_SHARE,
        "min_gold_accuracy": MIN_GOLD_ACCURACY,
        "dashboard": {
            name: {
                "rankings": r.rankings,
                "gold_accuracy": r.gold_accuracy,
                "gold_tasks": r.gold_tasks,
                "agreement": r.agreement,
                "watch": r.watch,
            }
            for name, r in sorted(rows.items())
        },
        "flagged": flagged,
        "arms": {arm: {k: v for k, v in a.items() if k not in ("counts", "judged")} for arm, a in arms.items()},
        "difference": diff,
    }


def train_arm(
    cfg: DemoConfig,
    db: Path,
    folder: Path,
    reward_base: str,
    heldout: list[str],
    reference: list[list[str]],
    min_gold: float,
) -> dict:
    """One reward model on the campaign's store (leaving out annotators under `min_gold` gold accuracy), judged on
    the demo's held-out reference samples by the scripted annotator's pairs."""
    from annotation.winrate import ratio_bootstrap_ci
    from app.jobs.training import prepare_run, run_training
    from app.studies.demo_common import demo_taste, pair_counts
    from training.pairwise.scoring import score_texts
    from training.registry import run_config
    from training.reward.config import RewardConfig

    rm_cfg = RewardConfig(
        model=reward_base,
        epochs=cfg.rm_epochs,
        lr=cfg.rm_lr,
        dtype=cfg.dtype,
        seed=cfg.seed,
        min_gold_accuracy=min_gold,
    )
    run = prepare_run(str(db), rm_cfg, folder / "runs")
    status = run_training("reward", run)
    if status.get("state") != "finished":
        raise RuntimeError(f"the campaign's reward run {run.name} {status.get('state')}: {status.get('error')}")
    scores = score_texts(run / "model", heldout, reference, cfg.dtype, rm_cfg.max_length)
    counts = pair_counts(heldout, reference, scores, demo_taste(cfg))
    right, total = sum(r for r, _ in counts), sum(t for _, t in counts)
    if not total:
        raise UserError("the campaign's reward models have no held-out pair to be judged on: every sample tied")
    manifest = json.loads((Path(run_config(run)["data"]) / "manifest.json").read_text())
    return {
        "run": run.name,
        "pairs": sum(split["pairs"] for split in manifest["splits"].values()),
        "left_out": manifest.get("left_out", {}).get("annotators", []),
        "pairs_removed": manifest.get("left_out", {}).get("pairs_removed", 0),
        "accuracy": right / total,
        "ci95": list(ratio_bootstrap_ci(counts, seed=cfg.seed)),
        "counts": counts,
        "judged": total,
    }


def paired_difference(a: list[tuple[int, int]], b: list[tuple[int, int]], seed: int, n: int = 2000) -> dict:
    """b's accuracy minus a's, the same prompts' pairs (per prompt (right, total) of each), with a percentile
    bootstrap interval that resamples prompts for both at once."""
    keep = [(ra, rb, t) for (ra, t), (rb, _) in zip(a, b, strict=True) if t]
    rng = random.Random(seed)

    def d(rows):
        total = sum(t for _, _, t in rows)
        return (sum(rb for _, rb, _ in rows) - sum(ra for ra, _, _ in rows)) / total

    draws = sorted(d(rng.choices(keep, k=len(keep))) for _ in range(n))
    return {"value": d(keep), "ci95": [draws[int(0.025 * n)], draws[min(n - 1, int(0.975 * n))]]}


def campaign_checks(c: dict, quick: bool) -> dict[str, bool]:
    """The study's claims: the dashboard flags the noisy annotator (and, with the concise taste, nobody else); and
    (not in --quick, where a tiny reward model's accuracy on a few dozen prompts moves by more than the noise costs)
    leaving out the annotators under the gold bar raised the reward model's held-out accuracy."""
    if c.get("taste", "concise") == "concise":  # careful annotators that copy the judge: nobody else can be flagged
        out = {"the dashboard singles out the noisy annotator, and only it": c["flagged"] == [NOISY]}
    else:  # careful ones from the population disagree with the panel as they do; the report names whoever is flagged
        out = {"the dashboard flags the noisy annotator": NOISY in c["flagged"]}
    if not quick:
        out["leaving out the annotators under the gold bar raised the reward model's held-out accuracy"] = (
            c["difference"]["value"] > 0
        )
    return out


def _acc(arm: dict) -> str:
    lo, hi = arm["ci95"]
    return f"{arm['accuracy']:.1%} (95% CI {lo:.1%}-{hi:.1%})"


def _share(x: object) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def _tau(x: object) -> str:
    return "" if x is None else f"{x:.2f}"


def campaign_lines(c: dict) -> list[str]:
    """The study's headline lines."""
    d, arms = c["difference"], c["arms"]
    filtered = arms["gold-filtered"]
    noisy_gold = _share(c["dashboard"].get(NOISY, {}).get("gold_accuracy"))
    left = ", ".join(filtered["left_out"]) or "nobody"
    lo, hi = d["ci95"]
    return [
        f"labeling campaign: the dashboard flags {', '.join(c['flagged']) or 'nobody'} (noisy: random orders on "
        f"{c['noisy_share']:.0%} of its tasks, gold accuracy {noisy_gold})",
        f"reward model on every pair: {_acc(arms['all'])}; leaving out {left} (gold accuracy under "
        f"{c['min_gold_accuracy']:.0%}, {filtered['pairs_removed']} pairs): {_acc(filtered)}; difference "
        f"{d['value']:+.1%} (95% CI {lo:+.1%} to {hi:+.1%})",
    ]


def _arm_row(name: str, arm: dict) -> str:
    lo, hi = arm["ci95"]
    return f"|{name}|{arm['pairs']}|{arm['accuracy']:.1%}|{lo:.1%}-{hi:.1%}|"


def campaign_section(c: dict) -> str:
    """The report's section: the dashboard's rows and the two reward models."""
    rows = "\n".join(
        f"|{name}|{d['rankings']}|{_share(d['gold_accuracy'])} of {d['gold_tasks']}|{_tau(d['agreement'])}|"
        f"{'; '.join(d['watch'])}|"
        for name, d in c["dashboard"].items()
    )
    arms = c["arms"]
    lo, hi = c["difference"]["ci95"]
    filtered = _arm_row(f"`--min-gold-accuracy {c['min_gold_accuracy']:g}`", arms["gold-filtered"])
    return f"""## Labeling campaign

Three scripted annotators shared the training prompts (one each, in turn): careful-a and careful-b rank as the
demo's annotator does, and noisy gives a random order on {c["noisy_share"]:.0%} of its tasks. A lead ranked
{c["gold_prompts"]} prompts the careful way and marked them gold; all three ranked those too. The annotator
dashboard (`rlhf annotators`) on that store:

|annotator|rankings|gold accuracy|agreement (tau)|look at|
|---|---:|---:|---:|---|
{rows}

Two reward models with the demo's settings, judged on the held-out reference samples by the careful annotator:

|reward model|pairs|held-out accuracy|95% interval|
|---|---:|---:|---|
{_arm_row("every pair", arms["all"])}
{filtered}

Difference (gold-filtered minus every pair): {c["difference"]["value"]:+.1%}, 95% interval {lo:+.1%} to {hi:+.1%}
(a bootstrap over the held-out prompts, both models' pairs resampled together).
"""

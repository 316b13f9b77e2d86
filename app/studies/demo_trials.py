"""Settings tried on the validation split, side by side (docs/evaluation.md, rule 2): a demo and its forks, each
trained policy with one sample against the reference and against the largest best-of-N, and the choice the protocol
makes from them: the best one-sample win rate whose off-topic share is no higher than the reference's.

`rlhf demo-trials BASE FORK...` writes trials.json and trials.md. A fork keeps the stages its settings leave alone
(app/studies/demo_stages.py), so a method appears once, in the trial that trained it; every trial meets the same
reward model, prompts and judge. Pure functions over the demos' results.json."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from app.studies.demo_config import DemoConfig
from app.studies.demo_samples import best_of_rows, policy_rows
from store.errors import UserError

TRIALS_FILE = "trials.json"
TRIALS_REPORT = "trials.md"
# the stage that trained each row of demo_samples.policy_rows
STAGE_OF = {"ppo": "ppo", "ppo_kept": "checkpoints and best-of-N"}
# settings every trial shares by construction or that say nothing about training
IGNORED = ("recommend", "methods")


def changed(base: dict, config: dict) -> dict:
    """The settings in which a trial's config differs from the base demo's (a setting the base predates reads as
    its default)."""
    defaults = {f.name: f.default for f in dataclasses.fields(DemoConfig)}
    return {k: v for k, v in config.items() if k not in IGNORED and base.get(k, defaults.get(k)) != v}


def trial_rows(results: list[dict]) -> list[dict]:
    """One row per policy a trial trained: {trial, changes, method, name, win_rate, ci95, kl, off_topic,
    minus_best_of}. The first results are the base demo; the others its forks on the same split."""
    if not results:
        raise UserError("no demo results to compare")
    base = results[0]
    parts = {(r.get("config") or {}).get("evaluate_on", "test") for r in results}
    if parts != {"validation"}:
        raise UserError(
            f"settings are chosen on the validation split only (docs/evaluation.md): these demos were judged on "
            f"{', '.join(sorted(parts))}"
        )
    folders = [r.get("folder") for r in results]
    for r in results[1:]:
        source = (r.get("forked") or {}).get("from")
        if source not in folders:
            raise UserError(f"{r.get('folder')} is not a fork of a demo given here (forked from {source})")
    rows = []
    for i, r in enumerate(results):
        kept = set((r.get("forked") or {}).get("kept", [])) if i else set()
        top = (best_of_rows(r) or [None])[-1]
        for p in policy_rows(r):
            if STAGE_OF.get(p["method"], p["method"]) in kept:
                continue  # trained in the demo it was forked from, and listed there
            rows.append(
                {
                    "trial": Path(r["folder"]).name,
                    "changes": changed(base["config"], r["config"]) if i else {},
                    "method": p["method"],
                    "name": p["name"],
                    "win_rate": p["win_rate"],
                    "ci95": p["ci95"],
                    "kl": p["kl"],
                    "off_topic": p["off_topic"],
                    "minus_best_of": None if top is None else p["win_rate"] - top["win_rate"],
                }
            )
    return rows


def choose(rows: list[dict], reference_off_topic: float | None) -> dict | None:
    """The protocol's choice: the highest one-sample win rate among rows whose off-topic share is known and no
    higher than the reference's (None when no row qualifies)."""
    allowed = [
        r
        for r in rows
        if reference_off_topic is not None and r["off_topic"] is not None and r["off_topic"] <= reference_off_topic
    ]
    return max(allowed, key=lambda r: r["win_rate"]) if allowed else None


def compare_trials(results: list[dict]) -> dict:
    base = results[0]
    rows = trial_rows(results)
    reference = base.get("off_topic_reference")
    top = (best_of_rows(base) or [None])[-1]
    return {
        "base": base.get("folder"),
        "seed": base["config"]["seed"],
        "best_of": None if top is None else {k: top[k] for k in ("name", "win_rate", "ci95", "kl", "off_topic")},
        "off_topic_reference": reference,
        "rows": rows,
        "chosen": choose(rows, reference),
    }


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def report(t: dict) -> str:
    def changes(c: dict) -> str:
        return ", ".join(f"`--{k.replace('_', '-')} {v}`" for k, v in c.items()) or "the base demo's settings"

    lines = [
        "# Settings tried on the validation split",
        "",
        f"The base demo (seed {t['seed']}) and its forks, every trained policy with one sample, judged on the "
        "validation split's prompts by the panel (docs/evaluation.md). A fork lists only the methods it trained.",
        "",
        "|trial|settings changed|policy|win rate over the reference|95% interval|KL (nats)|off-topic|minus "
        f"{t['best_of']['name'] if t['best_of'] else 'best-of-N'}|",
        "|---|---|---|---:|---|---:|---:|---:|",
    ]
    for r in t["rows"]:
        ci = "n/a" if not r["ci95"] else f"{r['ci95'][0]:.1%}-{r['ci95'][1]:.1%}"
        kl = "n/a" if r["kl"] is None else f"{r['kl']:.2f}"
        minus = "n/a" if r["minus_best_of"] is None else f"{100 * r['minus_best_of']:+.1f} pts"
        lines.append(
            f"|{r['trial']}|{changes(r['changes'])}|{r['name']}|{_pct(r['win_rate'])}|{ci}|{kl}|"
            f"{_pct(r['off_topic'])}|{minus}|"
        )
    b = t["best_of"]
    if b:
        lines += [
            "",
            f"The bar: {b['name']} of the reference {_pct(b['win_rate'])} "
            f"({b['ci95'][0]:.1%}-{b['ci95'][1]:.1%}) at a KL bound of {b['kl']:.2f} nats, off-topic "
            f"{_pct(b['off_topic'])}; the reference's own off-topic share {_pct(t['off_topic_reference'])}.",
        ]
    c = t["chosen"]
    lines += [
        "",
        (
            f"Chosen (the highest one-sample win rate with off-topic no higher than the reference's): {c['name']} "
            f"from {c['trial']} ({changes(c['changes'])}), {_pct(c['win_rate'])}."
            if c
            else "Chosen: none (no trained policy's off-topic share is at or below the reference's)."
        ),
    ]
    return "\n".join(lines) + "\n"


def write_trials(results: list[dict], out: Path) -> dict:
    from app.jobs.provenance import provenance

    t = compare_trials(results) | {"provenance": provenance()}
    out.mkdir(parents=True, exist_ok=True)
    (out / TRIALS_FILE).write_text(json.dumps(t, indent=2) + "\n")
    (out / TRIALS_REPORT).write_text(report(t))
    return t

"""The demo's report: DEMO/report.md with PNG plots of the reward model's training, PPO's score, KL and length per
step, and the held-out lengths of the reference and the actor."""

from __future__ import annotations

import json
from pathlib import Path

from annotation import scripted
from app.studies.demo_common import finite
from app.studies.demo_config import LEGACY
from app.studies.demo_methods import method_rows, method_table
from training.registry import step_rows
from training.runs import read_metrics


def _plots(folder: Path, rm_rows: list[dict], ppo_rows: list[dict], samples: list[dict]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    names = []
    train = step_rows("reward", rm_rows)
    evals = [r for r in rm_rows if "eval/rm_accuracy" in r and "step" in r]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4))
    a.plot([r["step"] for r in train], [r["loss/rm"] for r in train], lw=1)
    a.set(title="reward model: training loss", xlabel="optimizer step", ylabel="-log sigmoid(r_c - r_r)")
    b.plot([r["step"] for r in evals], [r["eval/rm_accuracy"] for r in evals], marker="o")
    b.set(title="reward model: eval-split accuracy", xlabel="optimizer step", ylim=(0, 1.02))
    fig.tight_layout()
    fig.savefig(folder / "reward_model.png", dpi=110)
    names.append("reward_model.png")

    steps = [r["step"] for r in ppo_rows]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    for ax, key, title in zip(
        axes,
        ("reward/score_mean", "reward/kl", "response/length_mean"),
        ("PPO: mean reward-model score", "PPO: KL to the reference (nats/sequence)", "PPO: response length (tokens)"),
        strict=True,
    ):
        ax.plot(steps, [r[key] for r in ppo_rows], marker=".", lw=1)
        ax.set(title=title, xlabel="PPO step")
    fig.tight_layout()
    fig.savefig(folder / "ppo.png", dpi=110)
    names.append("ppo.png")

    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    ref = [len(t.split()) for s in samples for t in s["reference"]]
    act = [len(t.split()) for s in samples for t in s["actor"]]
    top = max(ref + act + [1])
    bins = list(range(0, top + scripted.WORDS_PER_STEP, scripted.WORDS_PER_STEP))
    ax.hist([ref, act], bins=bins, label=["reference (SFT)", "tuned actor"])
    ax.set(title="held-out prompts: words per response", xlabel="words", ylabel="responses")
    ax.legend()
    fig.tight_layout()
    fig.savefig(folder / "heldout_lengths.png", dpi=110)
    names.append("heldout_lengths.png")
    plt.close("all")
    return names


def curve_table(r: dict) -> str:
    """The PPO table from results.json: step, mean score, KL to the reference and, for demos that recorded it, the
    mean length ("missing" where a step logged none)."""

    def cell(x: object, form: str) -> str:
        return form.format(x) if finite(x) else "missing"

    lengths = r.get("length_per_step")
    head = "| step | mean score | KL to reference |" + (" length (tokens) |" if lengths else "")
    rows = [
        f"| {step} | {cell(score, '{:.3f}')} | {cell(kl, '{:.3f}')} |"
        + (f" {cell(lengths[step - 1], '{:.1f}')} |" if lengths else "")
        for step, (score, kl) in enumerate(zip(r["score_per_step"], r["kl_per_step"], strict=True), 1)
    ]
    return "\n".join([head, "|---:" * head.count(" |") + "|", *rows])


def _examples(samples: list[dict]) -> str:
    """Each held-out prompt with the reference's first sample and the actor's."""
    return "\n\n".join(
        f"**Prompt:** {s['prompt']}\n\n- reference: {s['reference'][0]!r}\n- actor: {s['actor'][0]!r}" for s in samples
    )


def _what_ran(r: dict) -> str:
    """The report's opening: who ranked what, which runs trained on it, and what the numbers are measured on."""
    c = r["config"]
    from app.studies.demo_common import ON_PROMPTS

    dpo = f"; DPO (run `{r['dpo_run']}`) tuned it on the same pairs directly" if "dpo_run" in r else ""
    if "rloo_run" in r:
        dpo += f"; RLOO (run `{r['rloo_run']}`) against the same reward model, with no critic"
    for method, (_, title, _) in list(ON_PROMPTS.items())[1:]:
        if f"{method}_run" in r:
            dpo += f"; {title} (run `{r[f'{method}_run']}`) against the same reward model"
    if c.get("taste", LEGACY["taste"]) == "concise":
        return f"""\
The scripted annotator ("{scripted.NAME}", `annotation/scripted.py`) prefers concise answers: fewer words win,
counted in steps of {scripted.WORDS_PER_STEP} words (answers in the same step tie), and an answer under
{scripted.MIN_WORDS} words ranks last. It ranked {c["k"]} samples of the SFT model (`{c["model"]}`) for each of
{r["train_prompts"]} training prompts: {r["rankings"]} rankings, {r["pairs"]} chosen/rejected pairs. A reward model
(run `{r["reward_run"]}`) learned from them, and PPO (run `{r["ppo_run"]}`) tuned the SFT model against it{dpo}.
Everything below is measured on {r["heldout_prompts"]} held-out prompts that no step of training saw, with
{c["k"]} samples per prompt from each model (temperature 1, at most {c["max_new_tokens"]} new tokens)."""
    from app.studies.demo_taste import taste_of

    split = r.get("split", {})
    part = c.get("evaluate_on", "test")
    if split.get("split", c.get("split", LEGACY["split"])) == "topic":
        where = (
            f"the {r['heldout_prompts']} prompts of the topic split's {part} part (split seed {c.get('split_seed', 0)};"
            f" test topics {', '.join(split.get('test_topics', []))}; test template(s)"
            f" {', '.join(repr(t) for t in split.get('test_templates', []))}; docs/evaluation.md)"
        )
    else:
        where = f"the last {r['heldout_prompts']} prompts of the file, held out of training (`--split tail`)"
    return f"""\
{taste_of("population", c["annotators"], c["seed"]).describe()} The annotators ranked {c["k"]} samples of the SFT
model (`{c["model"]}`) for each of {r["train_prompts"]} training prompts: {r["rankings"]} rankings, {r["pairs"]}
chosen/rejected pairs. A reward model (run `{r["reward_run"]}`) learned from them, and PPO (run `{r["ppo_run"]}`)
tuned the SFT model against it{dpo}. Everything below is judged by the panel on {where}, with {c["k"]} samples per
prompt from each model (temperature 1, at most {c["max_new_tokens"]} new tokens)."""


def _rm_section(r: dict) -> str:
    """What predicts RL's success beyond pair accuracy (app/studies/demo_rm.py); "" for a demo without it."""
    m = r.get("reward_model")
    if not m:
        return ""
    strength = ", ".join(
        f"{b['accuracy']:.1%} of {b['pairs']} (margin {b['margin_low']:.2f}-{b['margin_high']:.2f})"
        for b in m["accuracy_by_strength"]
    )
    return f"""
On the judged prompts' reference samples: best-of-{m["k"]} accuracy {m["best_of_k_accuracy"]:.1%} on
{m["best_of_k_prompts"]} prompts (the truth's best scored above every other sample; chance about 1/{m["k"]}; the rows,
RewardBench 2's shape, in `rm_best_of_k.jsonl`); pair accuracy by the truth's margin, weakest third first: {strength};
score spread within a prompt {m["score_std_within_prompt"]:.3f} on the reference's samples and
{m["score_std_within_prompt_actor"]:.3f} on PPO's (over all samples {m["score_std_all"]:.3f}); correlation of score
and words {m["length_correlation"]:.2f}.
"""


def _made(r: dict) -> str:
    """Who made results.json: the command, commit, date and machine (a demo from before it recorded them: none)."""
    p = r.get("provenance")
    if not p:
        return "This demo's results.json does not record its command, commit or machine (it predates them). "
    gpu = f", {p['gpu']}" if p.get("gpu") else ""
    return f"Made by `{p['command']}` at commit {p['commit']} on {p['date']}, {p['machine']} ({p['cpu']}{gpu}). "


def _sittings(r: dict) -> str:
    """The sittings a resumed demo's stages ran in, each with its command and commit, and the stages that ran before
    sittings were recorded (or in the demo a fork kept them from). Nothing for a demo run in one sitting."""
    sittings = [s for s in r.get("sittings", []) if s["stages"]]
    recorded = {name for s in sittings for name in s["stages"]}
    forked = set((r.get("forked") or {}).get("kept", []))
    before = [name for name in r["timings_s"] if name not in recorded and name not in forked]
    if len(sittings) < 2 and not before:
        return ""
    lines = [f"- `{s['command']}` at commit {s['commit']} on {s['date']}: {', '.join(s['stages'])}" for s in sittings]
    if before:
        lines.insert(0, f"- before sittings were recorded: {', '.join(before)}")
    return "\nIts stages ran in these sittings:\n\n" + "\n".join(lines) + "\n"


def _forked(r: dict) -> str:
    if not r.get("forked"):
        return ""
    return (
        f"\nThese stages are those of `{r['forked']['from']}` (`rlhf demo --fork`), and so are their times above:"
        f" {', '.join(r['forked']['kept'])}. The others ran here.\n"
    )


def write_report(folder: Path, r: dict, rm_run: Path, ppo_run: Path) -> Path:
    """DEMO/report.md and its plots, from results.json's numbers and the runs' metrics for the curves."""
    samples = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    ppo_rows = step_rows("ppo", read_metrics(ppo_run))
    _plots(folder, read_metrics(rm_run), ppo_rows, samples)
    sections = {"watch": "", "campaign": "", "one_sample": ""}
    if r.get("checkpoints") is not None:
        from app.studies.demo_watch import plot_watch, watch_section

        plot_watch(folder, r, ppo_rows)
        sections["watch"] = watch_section(r)
    if r.get("campaign"):
        from app.studies.demo_campaign import campaign_section

        sections["campaign"] = campaign_section(r["campaign"])
    if r.get("best_of_n"):
        from app.studies.demo_samples import samples_section

        sections["one_sample"] = samples_section(folder, r)
    out = folder / "report.md"
    out.write_text(report_text(r, sections, _examples(samples[:4])))
    return out


def report_text(r: dict, sections: dict[str, str], examples: str) -> str:
    """The report's Markdown: the sections written beside their plots, in their places."""
    timings = ", ".join(f"{k} {v:.0f} s" for k, v in r["timings_s"].items())
    return f"""# rlhf-studio demo{" (quick)" if r["quick"] else ""}

{_what_ran(r)}

## Headline

{chr(10).join("- " + line for line in headline(r)[:-1])}

{method_table(r)}
{sections["one_sample"]}
The win rate is the judge's verdict (1 win, 0.5 tie, 0 loss) averaged over every actor sample x reference
sample couple of a prompt, then over prompts; the interval is a bootstrap over prompts. The reward model's
held-out accuracy counts the truth's pairs among the reference samples (ties make no pair; an equal score is
wrong).

## Reward model

![reward model](reward_model.png)
{_rm_section(r)}
## PPO

![ppo](ppo.png)

{curve_table(r)}

{sections["watch"]}
{sections["campaign"]}
## Held-out lengths

![held-out lengths](heldout_lengths.png)

{examples}

## Run

{_made(r)}Settings: `{json.dumps(r["config"])}`. Wall time {r["total_s"] / 60:.1f} min ({timings}). Samples of both
models: `samples.jsonl`; all numbers: `results.json`; the training runs' own metrics: `runs/*/metrics.jsonl`.
{_forked(r)}{_sittings(r)}"""


def headline(r: dict) -> list[str]:
    lines = [
        f"reward model: {r['rm_accuracy_heldout_prompts']:.1%} of {r['rm_accuracy_pairs']} annotator pairs on "
        f"{r['heldout_prompts']} held-out prompts ({r['rm_accuracy_eval_split']:.1%} on its own eval split)",
        f"mean reward-model score on held-out prompts: reference {r['score_reference']:.3f} -> actor "
        f"{r['score_actor']:.3f}; mean words {r['words_reference']:.1f} -> {r['words_actor']:.1f}",
        f"KL to the reference per PPO step: first {_nats((r['kl_per_step'] or [None])[0])}, last "
        f"{_nats((r['kl_per_step'] or [None])[-1])} nats ({r['ppo_steps']} steps)",
        f"win rate of the actor over the reference (the judge): {r['win_rate']:.1%} "
        f"(95% CI {r['win_rate_ci95'][0]:.1%}-{r['win_rate_ci95'][1]:.1%})",
    ]
    if r.get("reward_model"):
        m = r["reward_model"]
        lines.insert(
            1,
            f"reward model: best-of-{m['k']} accuracy {m['best_of_k_accuracy']:.1%} on {m['best_of_k_prompts']} "
            f"prompts, score spread within a prompt {m['score_std_within_prompt']:.3f}, correlation with words "
            f"{m['length_correlation']:.2f}",
        )
    lines += [f"{name}: {w:.1%} (95% CI {lo:.1%}-{hi:.1%})" for name, w, (lo, hi) in method_rows(r)[1:]]
    from app.studies.demo_common import ON_PROMPTS

    others = [f"{title} {_nats(r[f'{m}_kl'])}" for m, (_, title, _) in ON_PROMPTS.items() if f"{m}_kl" in r]
    if others:
        lines.append(
            f"KL to the reference at the last training step: PPO {_nats(r['kl_per_step'][-1])}, "
            f"{', '.join(others)} nats"
        )
    if r.get("watch"):
        from app.studies.demo_watch import equal_kl_lines, finding_lines

        lines += finding_lines(r["watch"], r["config"]["best_of"])
        lines += equal_kl_lines(r.get("equal_kl") or {})
    if r.get("best_of_n"):
        from app.studies.demo_samples import verdict_line

        lines.append(verdict_line(r))
    if r.get("campaign"):
        from app.studies.demo_campaign import campaign_lines

        lines += campaign_lines(r["campaign"])
    lines += [f"{'PASS' if ok else 'FAIL'}  {name}" for name, ok in r["checks"].items()]
    lines.append(f"report: {Path(r['folder']) / 'report.md'} ({r['total_s'] / 60:.1f} min)")
    return lines


def _nats(x: object) -> str:
    return f"{x:.3f}" if finite(x) else "missing"

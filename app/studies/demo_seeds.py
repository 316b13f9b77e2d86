"""The demo's claims over seeds: each headline as the mean of the seeds' values with a 95% t interval over seeds,
beside each seed's own value and its per-prompt interval.

One seed's demo answers "on these prompts, with this sampling and this training order"; a claim about the method
needs the spread over seeds too (an earlier rounds study had one arm at 66.3% in one attempt and 44.4% in the
committed one). `rlhf demo --seeds N` runs seeds seed, seed + 1, ... into FOLDER/seed-S and writes the combination;
`rlhf demo-seeds FOLDER...` combines demos run apart (a seed per session) into one report."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from store.errors import UserError
from training.watch import t_quantile

SEEDS_FILE = "seeds.json"
SEEDS_REPORT = "seeds.md"


def headlines(r: dict) -> dict[str, tuple[float, list[float] | None]]:
    """One demo's headline numbers: name -> (value, its per-prompt 95% interval or None). A rounds study's are its
    own (app/studies/demo_rounds.py::headlines)."""
    if r.get("study") == "rounds":
        from app.studies.demo_rounds import headlines as rounds_headlines

        return rounds_headlines(r)
    out: dict[str, tuple[float, list[float] | None]] = {
        "PPO actor over the reference": (r["win_rate"], r["win_rate_ci95"]),
    }
    if "dpo_vs_reference" in r:
        out["DPO policy over the reference"] = (r["dpo_vs_reference"]["win_rate"], r["dpo_vs_reference"]["ci95"])
        out["PPO actor over the DPO policy"] = (r["ppo_vs_dpo"]["win_rate"], r["ppo_vs_dpo"]["ci95"])
    if "kept_vs_dpo" in r:
        out["PPO's kept checkpoint over the DPO policy"] = (r["kept_vs_dpo"]["win_rate"], r["kept_vs_dpo"]["ci95"])
    top = r["best_of_n"][-1] if r.get("best_of_n") else None
    if top:
        out[f"best-of-{top['n']} of the reference over the reference"] = (top["win_rate"], top.get("ci95"))
    watch = r.get("watch") or {}
    if watch:
        out["PPO's kept checkpoint over the reference"] = (watch["chosen_win_rate"], None)
        if top:  # the checkpoint the held-out judge kept (no oracle) against the largest N, each over the reference
            name = f"PPO's kept checkpoint (1 sample) minus best-of-{top['n']}"  # one_sample_headlines' name for it
            out[name] = (watch["chosen_win_rate"] - top["win_rate"], None)
        out[peak_label(watch, top)] = (watch["peak_win_rate"] - watch["best_of_n_at_peak_kl"], None)
    out |= one_sample_headlines(r)
    if r.get("reward_model"):
        m = r["reward_model"]
        out[f"reward model: best-of-{m['k']} accuracy"] = (m["best_of_k_accuracy"], None)
        out["reward model: score's correlation with words"] = (m["length_correlation"], None)
    if r.get("kl_per_step"):
        out["PPO's KL to the reference at the last step (nats)"] = (r["kl_per_step"][-1], None)
    kept = next((c for c in r.get("checkpoints") or [] if c.get("chosen")), None)
    if kept:
        out["PPO's kept checkpoint's KL to the reference (nats)"] = (kept["kl"], None)
    if (r.get("dpo_point") or {}).get("kl") is not None:
        out["DPO's KL to the reference (nats)"] = (r["dpo_point"]["kl"], None)
    if top and top.get("kl") is not None:
        out[f"best-of-{top['n']}'s KL bound (nats)"] = (top["kl"], None)
    return out | campaign_headlines(r.get("campaign"))


def peak_label(watch: dict, top: dict | None) -> str:
    """What the peak comparison compares, exactly: the checkpoint the judge scored highest is picked by the judge that
    scores it, and best-of-N meets it at its KL only where best-of-N can spend that much KL."""
    if watch.get("peak_kl_beyond_best_of_n") and top:
        return (
            f"PPO's checkpoint the judge scored highest (picked by that judge) minus best-of-{top['n']} "
            f"(unequal KL: PPO's beyond best-of-{top['n']}'s bound)"
        )
    return "PPO's checkpoint the judge scored highest (picked by that judge) minus best-of-N at the same KL"


def one_sample_headlines(r: dict) -> dict[str, tuple[float, list[float] | None]]:
    """Each trained policy's one sample minus the largest best-of-N, each over the reference (issue 52's question),
    the off-topic shares of the reference, of best-of-N and of each policy (a seed without them: n/a), and each
    policy's share minus the reference's (issue 52 asks for no more off-topic answers than the reference's)."""
    from app.studies.demo_samples import best_of_rows, policy_rows

    best = best_of_rows(r)
    if not best:
        return {}
    top, out = best[-1], {}
    for p in policy_rows(r):
        out[f"{p['name']} (1 sample) minus {top['name']}"] = (p["win_rate"] - top["win_rate"], None)
    reference = r.get("off_topic_reference")
    for p in [{"name": "reference", "off_topic": reference}, top, *policy_rows(r)]:
        if p["off_topic"] is not None:
            out[f"off-topic share: {p['name']}"] = (p["off_topic"], None)
    for p in [top, *policy_rows(r)]:
        if p["off_topic"] is not None and reference is not None:
            out[off_topic_excess(p["name"])] = (p["off_topic"] - reference, None)
    return out


def off_topic_excess(name: str) -> str:
    """The headline of a policy's off-topic share minus the reference's, in points (a difference: its verdict says
    above, below or holds zero)."""
    return f"off-topic share: {name} minus the reference's"


def campaign_headlines(c: dict | None) -> dict[str, tuple[float, list[float] | None]]:
    """The labeling campaign's (app/studies/demo_campaign.py): each reward model's held-out accuracy and the gain
    from leaving out the annotators under the gold bar."""
    if not c:
        return {}
    every, kept = c["arms"]["all"], c["arms"]["gold-filtered"]
    bar = f"{c['min_gold_accuracy']:.0%}"
    return {
        "campaign: reward model on every pair, held-out accuracy": (every["accuracy"], every["ci95"]),
        f"campaign: reward model without annotators under {bar} on gold, held-out accuracy": (
            kept["accuracy"],
            kept["ci95"],
        ),
        f"campaign: without annotators under {bar} on gold minus every pair, held-out accuracy": (
            c["difference"]["value"],
            c["difference"]["ci95"],
        ),
    }


def interval(values: list[float]) -> tuple[float, float, float] | None:
    """(mean, low, high): the mean with its 95% Student t interval over the values; None for fewer than two."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = t_quantile(0.975, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


# Settings that only add to a demo (more methods after PPO, the campaign study): a seed without one shows its
# headlines as n/a, and the claims they share still hold one setting.
ADDS_ONLY = ("seed", "methods", "campaign")


def settings_that_differ(configs: list[dict]) -> list[str]:
    """The demo settings on which the configs disagree, other than ADDS_ONLY (a setting a config lacks, written before
    it existed, reads as what it ran with: LEGACY, else its default; a --ppo-settings entry equal to PPO's default
    is no setting)."""
    import dataclasses

    from app.studies.demo_config import LEGACY, DemoConfig

    full = [{**dataclasses.asdict(DemoConfig()), **LEGACY, **c} for c in configs]
    for f in full:
        f["ppo_settings"] = ppo_changes(f["ppo_settings"])
    return [k for k in full[0] if k not in ADDS_ONLY and any(f.get(k) != full[0][k] for f in full[1:])]


def ppo_changes(text: str) -> dict | str:
    """--ppo-settings as the PPO settings it changes from their defaults (the text itself where it does not parse)."""
    import dataclasses

    from app.studies.demo_common import ppo_settings
    from training.ppo.config import PPOConfig

    defaults = {f.name: f.default for f in dataclasses.fields(PPOConfig)}
    try:
        return {k: v for k, v in ppo_settings(text).items() if defaults.get(k) != v}
    except UserError:
        return text


def over_seeds(results: list[dict], chose: tuple[int, ...] = ()) -> dict:
    """The seeds' headlines side by side and combined. A headline some seeds lack (a demo made before it existed, a
    checkpoint whose weights are gone) is combined over the seeds that have it, and its row says which. Seeds in
    `chose` chose the settings (docs/evaluation.md): their columns are shown, marked, and left out of every mean
    and verdict over seeds."""
    if not results:
        raise UserError("no demo results to combine")
    seeds = [r["config"]["seed"] for r in results]
    studies = {r.get("study", "demo") for r in results}
    if len(studies) > 1:
        raise UserError(
            f"the results to combine are of different studies ({', '.join(sorted(studies))}): one at a time"
        )
    if len(set(seeds)) != len(seeds):
        raise UserError(f"the demos to combine share a seed ({', '.join(map(str, seeds))}): each seed once")
    if set(chose) - set(seeds):
        raise UserError(f"--chose-settings names seeds not combined here: {sorted(set(chose) - set(seeds))}")
    differ = settings_that_differ([r["config"] for r in results])
    if differ:
        flags = ", ".join("--" + name.replace("_", "-") for name in differ)
        raise UserError(f"the demos to combine differ in {flags}: a claim over seeds holds one setting, seeds apart")
    per = [headlines(r) for r in results]
    names = list(dict.fromkeys(n for h in per for n in h))  # in the order the seeds name them
    rows = []
    for name in names:
        values = [h[name][0] if name in h else None for h in per]
        rows.append(
            {
                "headline": name,
                "values": values,
                "ci95": [h[name][1] if name in h else None for h in per],
                "over_seeds": interval(
                    [v for v, s in zip(values, seeds, strict=True) if v is not None and s not in chose]
                ),
            }
        )
    alarms = [(r.get("watch") or {}).get("alarm_step") for r in results]
    study = studies.pop()
    return {
        "recommended": _recommended(results) if study == "demo" else None,
        "study": study,
        "seeds": seeds,
        "chose_settings": sorted(chose),
        "folders": [r.get("folder") for r in results],
        "rows": rows,
        "alarm_steps": alarms,
        "one_sample": one_sample_over_seeds(results, [s not in chose for s in seeds]) if study == "demo" else None,
    }


def _recommended(results: list[dict]) -> str | None:
    """The name of the recommended method's policy row (the config's `recommend`, declared before the runs: the
    demos to combine share their settings), or None where no seed judged it."""
    from app.studies.demo_samples import policy_rows

    method = (results[0].get("config") or {}).get("recommend", "ppo")
    return next((p["name"] for r in results for p in policy_rows(r) if p["method"] == method), None)


def one_sample_over_seeds(results: list[dict], counted: list[bool]) -> dict | None:
    """Best-of-N's win rate for each N and each trained policy's with one sample, per seed and as the mean over the
    counted seeds with its t interval: the plot over seeds (None where no seed has best-of-N)."""
    from app.studies.demo_samples import best_of_rows, policy_rows

    per_best = [{b["samples"]: b["win_rate"] for b in best_of_rows(r)} for r in results]
    if not any(per_best):
        return None
    per_policy = [{p["name"]: p["win_rate"] for p in policy_rows(r)} for r in results]

    def row(key: str, value, table: list[dict]) -> dict:
        values = [t.get(value) for t in table]
        kept = [v for v, c in zip(values, counted, strict=True) if v is not None and c]
        return {key: value, "values": values, "over_seeds": interval(kept)}

    ns = sorted({n for t in per_best for n in t})
    names = list(dict.fromkeys(name for t in per_policy for name in t))
    return {"best_of": [row("n", n, per_best) for n in ns], "policies": [row("name", n, per_policy) for n in names]}


ONE_SAMPLE_PLOT = "one_sample_over_seeds.png"


def plot_one_sample(combined: dict, out: Path) -> str | None:
    """The plot README shows: best-of-N's mean win rate over seeds against N, each trained policy at one sample,
    each with its t interval over seeds (a point alone where one seed gives no interval)."""
    data = combined.get("one_sample")
    if not data:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def mean_and_bar(r: dict) -> tuple[float, list[float]] | None:
        o = _clipped(r["over_seeds"], "rate")  # within 0-100%, as the table prints it
        if o is None:
            kept = [v for v in r["values"] if v is not None]
            return (kept[0], [0.0, 0.0]) if len(kept) == 1 else None
        return o[0], [o[0] - o[1], o[2] - o[0]]

    fig, ax = plt.subplots(figsize=(6.5, 4))
    best = [(r["n"], mean_and_bar(r)) for r in data["best_of"]]
    best = [(n, m) for n, m in best if m]
    ax.errorbar(
        [n for n, _ in best],
        [m[0] for _, m in best],
        yerr=list(zip(*[m[1] for _, m in best], strict=True)) if best else None,
        marker="o",
        capsize=3,
        label="best-of-N of the reference",
    )
    for i, r in enumerate(data["policies"]):
        m = mean_and_bar(r)
        if m:
            x = 2 ** (0.08 * (i + 1))  # side by side at one sample
            ax.errorbar(
                [x],
                [m[0]],
                yerr=[[m[1][0]], [m[1][1]]],
                marker="x^sDv*P"[i % 7],
                capsize=3,
                ls="none",
                label=f"{r['name']} (1 sample)",
            )
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    counted = [s for s in combined["seeds"] if s not in combined.get("chose_settings", [])]
    ax.set(xlabel="samples drawn at inference", ylabel="win rate over the reference (judge)")
    ax.set_title(f"one sample against best-of-N, seeds {', '.join(map(str, counted))}", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / ONE_SAMPLE_PLOT, dpi=110)
    plt.close(fig)
    return ONE_SAMPLE_PLOT


def _kind(headline: str) -> str:
    """How a headline's numbers read: nats, a correlation (-1 to 1), a difference of two rates (in points) or a
    rate."""
    if "nats" in headline:
        return "nats"
    return "correlation" if "correlation" in headline else "difference" if "minus" in headline else "rate"


def _fmt(x: float, kind: str) -> str:
    return {"nats": f"{x:+.3f}", "correlation": f"{x:+.3f}", "difference": f"{100 * x:+.1f} pts"}.get(kind, f"{x:.1%}")


def _interval(ci: list[float], kind: str) -> str:
    """A seed's interval over prompts, in its headline's unit (a rate's as 55.0%-65.0%)."""
    return f"{ci[0]:.1%}-{ci[1]:.1%}" if kind == "rate" else f"{_fmt(ci[0], kind)} to {_fmt(ci[1], kind)}"


def _clipped(o: tuple[float, float, float] | None, kind: str) -> tuple[float, float, float] | None:
    """An interval over seeds within what its numbers can be: a rate in 0-100%, a difference of two rates in
    -100 to +100 points, a correlation in -1 to 1 (two seeds give t = 12.7)."""
    low = {"rate": 0.0, "difference": -1.0, "correlation": -1.0}.get(kind)
    if o is None or low is None:
        return o
    return o[0], max(low, o[1]), min(1.0, o[2])


def head_to_head(headline: str) -> bool:
    """A win rate of one policy over another that is not the reference (PPO's actor over DPO's policy): 50% is a
    tie, as zero is for a difference."""
    return _kind(headline) == "rate" and " over the " in headline and not headline.endswith(" over the reference")


def verdicts(combined: dict) -> list[str]:
    """For each difference combined over seeds: whether its interval over seeds lies above zero, below, or holds it
    (no clear difference), in words; for each head-to-head win rate the same about 50%."""
    out = []
    for row in combined["rows"]:
        kind = _kind(row["headline"])
        o = _clipped(row["over_seeds"], kind)
        if o is None or not (kind == "difference" or head_to_head(row["headline"])):
            continue
        mean, lo, hi = o
        tie, at = (0.0, "zero") if kind == "difference" else (0.5, "50%")
        side = (
            f"above {at}" if lo > tie else f"below {at}" if hi < tie else f"holds {at}: no clear difference over seeds"
        )
        chose = set(combined.get("chose_settings", []))
        counted = [s for s in combined["seeds"] if s not in chose]
        seeds = sum(v is not None for v, s in zip(row["values"], combined["seeds"], strict=True) if s not in chose)
        out.append(
            f"{row['headline']}: {_fmt(mean, kind)} ({_fmt(lo, kind)} to {_fmt(hi, kind)}), {side}"
            + (f" ({seeds} of {len(counted)} seeds)" if seeds < len(counted) else "")
        )
    return out


def report(combined: dict) -> str:
    """seeds.md: one row per headline, each seed's value (with its per-prompt interval), then the mean over seeds
    with its interval."""
    seeds, chose = combined["seeds"], combined.get("chose_settings", [])
    counted = [s for s in seeds if s not in chose]
    head = (
        "|headline|"
        + "|".join(f"seed {s}" + (" (chose the settings)" if s in chose else "") for s in seeds)
        + "|mean over seeds (95% interval)|"
    )
    study = "The rounds study" if combined.get("study") == "rounds" else "The demo"
    title = f"# {study} over {len(seeds)} seed{'s' if len(seeds) > 1 else ''}"
    if chose:
        title = f"# {study} over {len(counted)} seed{'s' if len(counted) > 1 else ''}, and the {len(chose)} that chose"
    lines = [
        title,
        "",
        "Each seed reruns the stochastic parts (sampling, training order). A seed's cell: its value, with its 95% "
        "interval over prompts where it has one (n/a: that seed's demo lacks it); the last column: the mean over seeds "
        "with a 95% Student t interval over seeds (none for one seed).",
    ]
    if chose:
        lines.append(
            f"Seeds {', '.join(map(str, chose))} chose the settings these demos ran with: their columns are shown, "
            f"and the mean, the interval and every verdict are over seeds {', '.join(map(str, counted))} only."
        )
    lines += [
        "",
        head,
        "|---|" + "---:|" * len(seeds) + "---:|",
    ]
    for row in combined["rows"]:
        kind = _kind(row["headline"])
        cells = [
            "n/a" if v is None else _fmt(v, kind) + (f" ({_interval(ci, kind)})" if ci else "")
            for v, ci in zip(row["values"], row["ci95"], strict=True)
        ]
        o = _clipped(row["over_seeds"], kind)
        last = f"{_fmt(o[0], kind)} ({_fmt(o[1], kind)} to {_fmt(o[2], kind)})" if o else "one seed: no interval"
        have = [str(s) for s, v in zip(seeds, row["values"], strict=True) if v is not None and s not in chose]
        if o and len(have) < len(counted):
            last += f", seeds {', '.join(have)} only"
        lines.append(f"|{row['headline']}|" + "|".join(cells) + f"|{last}|")
    said = verdicts(combined)
    if said:
        lines += ["", "Each difference and head-to-head over seeds:", ""] + [f"- {line}" for line in said]
    if combined.get("study") != "rounds":
        alarms = ", ".join(
            f"seed {s}: {'step ' + str(a) if a is not None else 'did not fire'}"
            for s, a in zip(seeds, combined["alarm_steps"], strict=True)
        )
        lines += ["", f"The watch's alarm: {alarms}."]
    if combined.get("one_sample"):
        lines += ["", f"![one sample against best-of-N over seeds]({ONE_SAMPLE_PLOT})"]
    return "\n".join(lines + [""])


README_START, README_END = "<!-- does-it-learn: rlhf demo-seeds --readme -->", "<!-- /does-it-learn -->"


def readme_paragraph(combined: dict, folder: str) -> str:
    """README's "Does it learn?" paragraph from a combination over seeds (issue 52's question): the recommended
    method with one sample against the largest best-of-N, each over the reference, with their intervals over seeds
    and the verdict on their difference; the off-topic shares; the PPO-against-DPO head-to-head; then the plot.
    folder: where seeds.md and the plot are, relative to README. Every number is the combination's own, so a test
    renders it again from the committed file and compares."""
    rows = {row["headline"]: row for row in combined["rows"]}
    chose = set(combined.get("chose_settings", []))
    counted = [s for s in combined["seeds"] if s not in chose]
    name, one = combined.get("recommended"), combined.get("one_sample") or {}
    policy = next((p for p in one.get("policies", []) if p["name"] == name), None)
    best = (one.get("best_of") or [None])[-1]
    if policy is None or best is None or policy["over_seeds"] is None or best["over_seeds"] is None:
        raise UserError("the combination has no recommended policy and best-of-N over at least two seeds to report")

    def rate(o) -> str:
        m, lo, hi = _clipped(o, "rate")
        return f"{m:.1%} ({lo:.1%} to {hi:.1%})"

    out = [
        f"Under the protocol of [docs/evaluation.md](docs/evaluation.md) (the panel judge on the test split, seeds "
        f"{', '.join(map(str, counted))} declared before running, each a whole demo), the recommended method's policy, "
        f"{name}, wins {rate(policy['over_seeds'])} over the reference with one sample, the mean over seeds with its "
        f"95% t interval; best-of-{best['n']} of the reference under the reward model wins "
        f"{rate(best['over_seeds'])} with {best['n']} samples."
    ]
    diff = rows.get(f"{name} (1 sample) minus best-of-{best['n']}")
    if diff and diff["over_seeds"]:
        m, lo, hi = diff["over_seeds"]
        side = "above" if lo > 0 else "below" if hi < 0 else "within"
        out.append(
            f"The difference, {m * 100:+.1f} points ({lo * 100:+.1f} to {hi * 100:+.1f}), puts one sample {side} "
            f"best-of-{best['n']}'s sixteen" + ("." if side != "within" else ": no clear difference over seeds.")
        )
    topic = [(who, rows.get(f"off-topic share: {who}")) for who in ("reference", f"best-of-{best['n']}", name)]
    said = [f"{who} {row['over_seeds'][0]:.1%}" for who, row in topic if row and row["over_seeds"]]
    if said:
        out.append(f"Answers sharing no content word with the prompt (off topic): {', '.join(said)}.")
    excess = rows.get(off_topic_excess(name))
    if excess and excess["over_seeds"]:
        m, lo, hi = _clipped(excess["over_seeds"], "difference")
        side = (
            "more off-topic answers than the reference's"
            if lo > 0
            else "fewer off-topic answers than the reference's"
            if hi < 0
            else "no clear difference over seeds"
        )
        out.append(
            f"{name}'s off-topic share minus the reference's: {m * 100:+.1f} points ({lo * 100:+.1f} to "
            f"{hi * 100:+.1f}): {side}."
        )
    ppo_dpo = rows.get("PPO actor over the DPO policy")
    if ppo_dpo and ppo_dpo["over_seeds"]:
        out.append(f"PPO's actor over DPO's policy, head to head: {rate(ppo_dpo['over_seeds'])}.")
    out.append(f"Every seed's numbers and every method: [{folder}/seeds.md]({folder}/seeds.md).")
    return " ".join(out) + f"\n\n![one sample against best-of-N over seeds]({folder}/{ONE_SAMPLE_PLOT})\n"


def write_readme(readme: Path, combined: dict, folder: str) -> None:
    """Replace README's block between README_START and README_END with readme_paragraph; one error line where
    README has no such block."""
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        raise UserError(f"{readme} has no block {README_START} ... {README_END} to write the paragraph into")
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    readme.write_text(f"{head}{README_START}\n{readme_paragraph(combined, folder)}{README_END}{tail}")


def read_results(paths: list[str | Path]) -> list[dict]:
    """Each path a demo folder or its results.json; one error line for a missing or unreadable one."""
    out = []
    for p in map(Path, paths):
        path = p / "results.json" if p.is_dir() else p
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError) as e:
            raise UserError(f"no demo results at {path}: {e}") from None
    return out


def write_combined(results: list[dict], out: Path, chose: tuple[int, ...] = ()) -> dict:
    from app.jobs.provenance import provenance

    combined = over_seeds(results, chose) | {"provenance": provenance()}
    out.mkdir(parents=True, exist_ok=True)
    (out / SEEDS_FILE).write_text(json.dumps(combined, indent=2) + "\n")
    plot_one_sample(combined, out)
    (out / SEEDS_REPORT).write_text(report(combined))
    return combined

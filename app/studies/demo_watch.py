"""The demo's over-optimisation part: is PPO earning what the annotator wants, or only what the reward model pays?

- PPO trains against member 0 of a two-member reward ensemble (alternate halves of the training prompts); member 1
  is the held-out judge it never optimises (training/watch.py), and PPO checkpoints every `save_every` steps, each
  scored by both on the store's held-out prompts (training/rollouts/checkpoints.py), which names the chosen one.
- Here every checkpoint also samples the demo's held-out prompts and the scripted annotator judges it against the
  reference: the true win rate, against the KL the run measured for that checkpoint.
- Best-of-N of the reference (N = 1, 2, 4, ...), picked by the same reward model PPO optimised, is the baseline at
  the same KL (Gao et al. 2022): its KL is the analytic log N - (N - 1) / N.

The report plots win rate against sqrt(KL) for both, the watch's per-step numbers with the step its alarm fired
(if it did), and says whether the chosen checkpoint wins as often as the last one (within its 95% interval), and
whether PPO's best point beats best-of-N at its KL."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from app.studies.demo_config import DemoConfig
from training.rollouts.checkpoints import best_checkpoint, read_checkpoints
from training.runs import read_metrics
from training.watch import best_index, best_of_n_kl

CHECKPOINT_SEED = 2 * 10**6  # the PPO actor's own held-out samples use this seed: every checkpoint samples alike
BEST_OF_SEED = 5 * 10**6


def best_of_ns(largest: int) -> list[int]:
    """1, 2, 4, ... up to `largest` (which is included)."""
    ns, n = [], 1
    while n < largest:
        ns.append(n)
        n *= 2
    return ns + [largest]


def checkpoint_points(
    cfg: DemoConfig,
    ppo_run: Path,
    heldout: list[str],
    texts: dict[str, list[list[str]]],
    log: Callable,
    method: str = "ppo",
) -> list[dict]:
    """Every evaluated checkpoint of a run on prompts (PPO's, RLOO's) still on disk: the run's own numbers (KL, the
    optimised and the held-out judge's score on the store's held-out prompts) and the scripted annotator's win rate
    over the reference on the demo's held-out prompts. The run's final actor reuses the samples the demo already drew
    from it (texts[method]); the samples of the checkpoint the held-out judge keeps go to texts[method + "_kept"]."""
    from app.studies.demo_common import compare, judging, mean_words

    judge = judging(cfg, heldout)
    rows = [r for r in read_checkpoints(ppo_run) if Path(r.get("actor", "")).is_dir()]
    chosen = best_checkpoint(rows)
    points = []
    for r in rows:
        samples = checkpoint_samples(cfg, ppo_run, r["actor"], heldout, texts[method])
        won = compare(samples, texts["reference"], cfg.seed, judge)
        if r is chosen:
            texts[f"{method}_kept"] = samples
        log(f"{method} checkpoint step {r['step']}: KL {r['kl']:.2f}, win rate {won['win_rate']:.1%}")
        points.append(
            {
                "step": r["step"],
                "kl": r["kl"],  # sampled (k1): can dip below 0, where sqrt(KL) reads it as 0
                "score_mean": r["score_mean"],
                "heldout_score_mean": r.get("heldout_score_mean"),
                "chosen": r is chosen,
                "words": mean_words(samples),
                **won,
            }
        )
    return points


def checkpoint_samples(
    cfg: DemoConfig, run: Path, actor: str, heldout: list[str], final: list[list[str]]
) -> list[list[str]]:
    """A checkpoint's samples of the held-out prompts: the run's final actor's are `final`, the ones the demo drew;
    any other is sampled with the seed every checkpoint shares, so a resumed demo draws the same ones again."""
    from app.studies.demo_common import sample_texts, sampling_config
    from training.sampling.generation import open_sampler

    if Path(actor).resolve() == (run / "actor").resolve():
        return final
    with open_sampler(sampling_config(cfg, actor)) as sampler:
        return sample_texts(sampler, heldout, cfg.k, cfg.seed + CHECKPOINT_SEED)


def kept_samples_again(
    cfg: DemoConfig, ppo_run: Path, heldout: list[str], texts: dict[str, list[list[str]]], watch: dict, log: Callable
) -> list[list[str]] | None:
    """The kept checkpoint's samples for a demo whose checkpoints stage ran before they were kept (2026-12-06):
    drawn again from its weights (None, said in one line, where they are gone), checked against the win rate over
    the reference that the stage recorded."""
    from app.studies.demo_common import compare, judging

    kept = next((p for p in watch.get("checkpoints") or [] if p.get("chosen")), None)
    row = next((r for r in read_checkpoints(ppo_run) if kept and r["step"] == kept["step"]), None)
    if kept is None or row is None:
        return None
    if not Path(row.get("actor", "")).is_dir():
        log(f"the kept checkpoint (step {kept['step']}) has no weights left at {row.get('actor')}: not judged")
        return None
    samples = checkpoint_samples(cfg, ppo_run, row["actor"], heldout, texts["ppo"])
    again = compare(samples, texts["reference"], cfg.seed, judging(cfg, heldout))["win_rate"]
    log(
        f"the kept checkpoint (step {kept['step']}) sampled again: win rate {again:.1%} over the reference, "
        f"{'as' if again == kept['win_rate'] else 'where'} the checkpoints stage recorded {kept['win_rate']:.1%}"
    )
    return samples


def run_watch_stage(
    stage: Callable,
    part: Callable[[], dict],
    cfg: DemoConfig,
    ppo_run: Path,
    heldout: list[str],
    texts: dict[str, list[list[str]]],
    log: Callable,
) -> dict:
    """The demo's checkpoints-and-best-of-N stage (`part`: run_watch_part on the demo's runs) through `stage`
    (app/studies/demo.py::run_demo): its results, with the kept checkpoint's samples in texts["ppo_kept"] for DPO's
    matchup. Kept in stages.json as [results, samples] so a resume has both; a stage kept before 2026-12-06 holds
    the results alone, and its samples are drawn again (on each resume: that stage stays as it was kept)."""
    again = object()
    watch, kept = stage(
        "checkpoints and best-of-N",
        lambda: (part(), texts.get("ppo_kept")),
        decode=lambda v: (v, again) if isinstance(v, dict) else v,
    )
    texts["ppo_kept"] = kept_samples_again(cfg, ppo_run, heldout, texts, watch, log) if kept is again else kept
    return watch


def best_of_n_points(
    cfg: DemoConfig, model: str, reward_model: Path, heldout: list[str], reference: list[list[str]], max_length: int
) -> list[dict]:
    """Best-of-n of the reference for n = 1, 2, 4, ..., cfg.best_of: one set of cfg.best_of samples per held-out
    prompt, the pick among the first n by the reward model PPO optimised, judged against the reference's samples."""
    from app.studies.demo_common import compare, judging, mean_words, sample_texts, sampling_config
    from app.studies.demo_taste import off_topic_share
    from training.pairwise.scoring import score_texts
    from training.sampling.generation import open_sampler

    judge = judging(cfg, heldout)
    with open_sampler(sampling_config(cfg, model)) as sampler:
        samples = sample_texts(sampler, heldout, cfg.best_of, cfg.seed + BEST_OF_SEED)
    scores = score_texts(reward_model, heldout, samples, cfg.dtype, max_length)
    points = []
    for n in best_of_ns(cfg.best_of):
        picks = [[s[best_index(sc[:n])]] for s, sc in zip(samples, scores, strict=True)]
        score = sum(sc[best_index(sc[:n])] for sc in scores) / len(scores)
        points.append(
            {
                "n": n,
                "kl": best_of_n_kl(n),
                "score_mean": score,
                "words": mean_words(picks),
                "off_topic": off_topic_share(heldout, picks),
                **compare(picks, reference, cfg.seed, judge),
            }
        )
    return points


def interpolate(points: list[dict], kl: float) -> float | None:
    """Best-of-N's win rate at `kl`, linear in sqrt(KL) between its two nearest points; None beyond its range."""
    xs, x = [_sqrt(p["kl"]) for p in points], _sqrt(kl)
    for i in range(len(points) - 1):
        x0, x1 = xs[i], xs[i + 1]
        if x0 <= x <= x1:
            t = (x - x0) / (x1 - x0) if x1 > x0 else 0.0
            return points[i]["win_rate"] + t * (points[i + 1]["win_rate"] - points[i]["win_rate"])
    return None


def rate_at(ordered: list[dict], kl: float) -> list[float]:
    """[win rate, low, high] at `kl` on a curve of points in order of sqrt(KL) (the first may be the reference
    itself, with no interval): the win rate linear in sqrt(KL) between the two nearest points; the interval as wide
    below and above it as the wider of those two points' measured intervals (never narrowed toward the reference's
    point, which was not measured)."""
    win = interpolate([{"kl": p["kl"], "win_rate": p["win_rate"]} for p in ordered], kl)
    xs, x = [_sqrt(p["kl"]) for p in ordered], _sqrt(kl)
    i = next(i for i in range(len(ordered) - 1) if xs[i] <= x <= xs[i + 1])
    near = [p for p in ordered[i : i + 2] if p.get("ci95")]
    below = max(p["win_rate"] - p["ci95"][0] for p in near)
    above = max(p["ci95"][1] - p["win_rate"] for p in near)
    return [win, win - below, win + above]


def at_equal_kl(curves: dict[str, list[dict]]) -> dict:
    """Each method's win rate over the reference, and its 95% interval, at one KL every method reached: the smallest
    of the methods' largest measured KLs. A method's curve is its points in order of KL from the reference itself
    (KL 0, win rate 0.5: a policy equal to the reference ties it), linear in sqrt(KL) between its two nearest points,
    with the wider of their measured intervals (`rate_at`). Returns {"kl", "win_rates": {method: [w, lo, hi]},
    "winner", "clear"} (clear: the winner's interval is above every other method's win rate); {} when a method has
    no point or the common KL is 0."""
    if not curves or not all(curves.values()):
        return {}
    kl = min(max(p["kl"] for p in points) for points in curves.values())
    if kl <= 0:
        return {}
    rates = {}
    for name, points in curves.items():
        ordered = [{"kl": 0.0, "win_rate": 0.5, "ci95": None}, *sorted(points, key=lambda p: _sqrt(p["kl"]))]
        rates[name] = rate_at(ordered, kl)
    winner = max(rates, key=lambda name: rates[name][0])
    clear = all(rates[winner][1] > w for name, (w, _, _) in rates.items() if name != winner)
    return {"kl": kl, "win_rates": rates, "winner": winner, "clear": clear}


def method_curves(r: dict) -> dict[str, list[dict]]:
    """The demo's methods as points of win rate against KL: PPO's and RLOO's evaluated checkpoints, best-of-N of the
    reference, DPO's policy (one point)."""
    curves = {"PPO": r.get("checkpoints") or [], "best-of-N": r.get("best_of_n") or []}
    from app.studies.demo_common import ON_PROMPTS

    for method, (_, title, _) in ON_PROMPTS.items():
        if f"{method}_checkpoints" in r:
            curves[title] = r[f"{method}_checkpoints"]
    if "dpo_point" in r:
        curves["DPO"] = [r["dpo_point"]]
    if "kto_point" in r:
        curves["KTO"] = [r["kto_point"]]
    return curves


def equal_kl_lines(e: dict) -> list[str]:
    """The comparison at equal KL as report sentences."""
    if not e:
        return ["no KL every method reached: no comparison at equal KL"]
    order = sorted(e["win_rates"], key=lambda name: -e["win_rates"][name][0])
    rates = ", ".join(f"{n} {w:.1%} ({lo:.1%}-{hi:.1%})" for n in order for w, lo, hi in [e["win_rates"][n]])
    verdict = "its interval clears every other method" if e["clear"] else "within the others' intervals"
    return [f"at equal KL ({e['kl']:.2f} nats, the most every method reached): {rates}; {e['winner']} wins ({verdict})"]


def alarm_of(ppo_run: Path) -> dict | None:
    """The watch's alarm event of the run (step and reason), None if it never fired."""
    events = [r for r in read_metrics(ppo_run) if r.get("event") == "alarm"]
    return {"step": events[0]["step"], "reason": events[0]["reason"]} if events else None


def findings(checkpoints: list[dict], best_of: list[dict], alarm: dict | None) -> dict:
    """What the points say: the chosen and the last checkpoint's win rates, PPO's best point (the highest win rate)
    against best-of-N at its KL (the largest N's point, said so, where PPO's KL is beyond best-of-N's), and where the
    alarm fired beside where PPO peaked."""
    if not checkpoints or not best_of:
        return {}
    chosen = next(p for p in checkpoints if p["chosen"])
    last, peak = checkpoints[-1], max(checkpoints, key=lambda p: (p["win_rate"], -p["step"]))
    at_kl = interpolate(best_of, peak["kl"])
    beyond = at_kl is None
    baseline = best_of[-1]["win_rate"] if beyond else at_kl
    return {
        "chosen_step": chosen["step"],
        "chosen_win_rate": chosen["win_rate"],
        "last_step": last["step"],
        "last_win_rate": last["win_rate"],
        # as good as the last within what the evaluation can tell: at or above the last one's 95% interval
        "chosen_at_least_last": chosen["win_rate"] >= last.get("ci95", [last["win_rate"]])[0],
        "peak_step": peak["step"],
        "peak_kl": peak["kl"],
        "peak_win_rate": peak["win_rate"],
        "best_of_n_at_peak_kl": baseline,
        "peak_kl_beyond_best_of_n": beyond,
        "ppo_beats_best_of_n": peak["win_rate"] > baseline,
        "alarm_step": alarm["step"] if alarm else None,
        "alarm_reason": alarm["reason"] if alarm else None,
    }


def finding_lines(f: dict, largest_n: int) -> list[str]:
    """The findings as report sentences."""
    if not f:
        return ["no evaluated checkpoint or best-of-N point: nothing to compare"]
    where = (
        f"best-of-{largest_n}'s {f['best_of_n_at_peak_kl']:.1%} (its KL bound, {best_of_n_kl(largest_n):.2f} nats, is "
        f"below PPO's {f['peak_kl']:.2f}: best-of-N cannot spend that much KL here)"
        if f["peak_kl_beyond_best_of_n"]
        else f"best-of-N's {f['best_of_n_at_peak_kl']:.1%} at the same KL ({f['peak_kl']:.2f} nats)"
    )
    alarm = (
        f"the watch's alarm fired at step {f['alarm_step']} ({f['alarm_reason']})"
        if f["alarm_step"] is not None
        else "the watch's alarm did not fire"
    )
    return [
        f"checkpoint chosen by the held-out judge: step {f['chosen_step']}, win rate {f['chosen_win_rate']:.1%}; the "
        f"last one (step {f['last_step']}): {f['last_win_rate']:.1%}",
        f"PPO peaked at step {f['peak_step']} (win rate {f['peak_win_rate']:.1%}, KL {f['peak_kl']:.2f} nats) against "
        f"{where}",
        f"{alarm}; PPO's win rate peaked at step {f['peak_step']}",
    ]


def watch_checks(f: dict) -> dict[str, bool]:
    """The full demo's claims about the watch (the quick one reports them without a bar: tiny models are noise)."""
    if not f:
        return {}
    return {
        "the held-out judge's checkpoint wins as often as the last one (within its 95% interval)": f[
            "chosen_at_least_last"
        ],
        "PPO's checkpoint the judge scored highest (picked by that judge) beats best-of-N at the same KL, or "
        "best-of-N's largest N at a lower KL where PPO's is beyond its bound": f["ppo_beats_best_of_n"],
        # a false alarm: one that fires before the win rate (the scripted annotator's, the truth here) has peaked
        "the watch's alarm fires only after PPO's win rate peaked, if at all": alarm_after_peak(f),
    }


def alarm_after_peak(f: dict) -> bool:
    return f["alarm_step"] is None or f["alarm_step"] > f["peak_step"]


def run_watch_part(
    cfg: DemoConfig,
    model: str,
    rm_run: Path,
    ppo_run: Path,
    heldout: list[str],
    texts: dict[str, list[list[str]]],
    max_length: int,
    log: Callable,
) -> dict:
    """The checkpoints' and best-of-N's points and what they say, for results.json."""
    checkpoints = checkpoint_points(cfg, ppo_run, heldout, texts, log)
    best_of = best_of_n_points(cfg, model, rm_run / "model", heldout, texts["reference"], max_length)
    for p in best_of:
        log(f"best-of-{p['n']}: KL <= {p['kl']:.2f}, win rate {p['win_rate']:.1%}")
    watch = findings(checkpoints, best_of, alarm_of(ppo_run))
    return {"checkpoints": checkpoints, "best_of_n": best_of, "watch": watch}


def plot_watch(folder: Path, r: dict, ppo_rows: list[dict]) -> list[str]:
    """win_rate_vs_kl.png (every method: PPO's and RLOO's checkpoints, best-of-N, DPO's policy) and watch.png (the
    watch's per-step numbers)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.4))
    labels = {"PPO": "PPO checkpoints", "best-of-N": "best-of-N of the reference", "RLOO": "RLOO checkpoints"}
    for name, points in method_curves(r).items():
        xs = [_sqrt(p["kl"]) for p in points]
        ys = [p["win_rate"] for p in points]
        err = [[p["win_rate"] - p["ci95"][0] for p in points], [p["ci95"][1] - p["win_rate"] for p in points]]
        ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=labels.get(name, name))
        key = "n" if name == "best-of-N" else "step"
        for x, y, p in zip(xs, ys, points, strict=True):
            if key in p:
                ax.annotate(f"{key[0]}={p[key]}", (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7)
    if r.get("equal_kl"):
        ax.axvline(_sqrt(r["equal_kl"]["kl"]), color="grey", lw=0.8, ls="--", label="equal KL (the table)")
    chosen = [p for p in r["checkpoints"] if p["chosen"]]
    if chosen:
        star = ([_sqrt(chosen[0]["kl"])], [chosen[0]["win_rate"]])
        ax.plot(*star, "k*", ms=14, label="chosen by the held-out judge")
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set(title="win rate over the reference (scripted annotator)", xlabel="sqrt(KL to the reference), sqrt(nats)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(folder / "win_rate_vs_kl.png", dpi=110)

    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 3.4))
    steps = [row["step"] for row in ppo_rows]
    a.plot(steps, [row.get("reward/score_mean") for row in ppo_rows], lw=1, label="optimised reward model")
    if any("watch/heldout_score_mean" in row for row in ppo_rows):
        a.plot(steps, [row.get("watch/heldout_score_mean") for row in ppo_rows], lw=1, label="held-out judge")
    b.plot(steps, [row.get("watch/length_score_corr") for row in ppo_rows], lw=1)
    alarm = r.get("watch", {}).get("alarm_step")
    for ax in (a, b):
        if alarm is not None:
            ax.axvline(alarm, color="red", ls="--", lw=1, label="the watch's alarm")
        for p in chosen:
            ax.axvline(p["step"], color="black", ls=":", lw=1, label="chosen checkpoint")
    a.set(title="PPO: rollout score per step", xlabel="PPO step")
    a.legend(fontsize=8)
    b.set(title="PPO: correlation of length and score", xlabel="PPO step", ylim=(-1.05, 1.05))
    fig.tight_layout()
    fig.savefig(folder / "watch.png", dpi=110)
    plt.close("all")
    return ["win_rate_vs_kl.png", "watch.png"]


def watch_section(r: dict) -> str:
    """The report's section on the watch: the two plots, the points as tables and the findings."""
    rows = "\n".join(
        f"|{p['step']}{' (chosen)' if p['chosen'] else ''}|{p['kl']:.2f}|{p['score_mean']:.3f}|"
        f"{_num(p['heldout_score_mean'])}|{p['words']:.1f}|{p['win_rate']:.1%}|{p['ci95'][0]:.1%}-{p['ci95'][1]:.1%}|"
        for p in r["checkpoints"]
    )
    bon = "\n".join(
        f"|{p['n']}|{p['kl']:.2f}|{p['score_mean']:.3f}|{p['words']:.1f}|{p['win_rate']:.1%}|"
        f"{p['ci95'][0]:.1%}-{p['ci95'][1]:.1%}|"
        for p in r["best_of_n"]
    )
    found = finding_lines(r["watch"], r["config"]["best_of"]) + equal_kl_lines(r.get("equal_kl") or {})
    lines = "\n".join("- " + x for x in found)
    return f"""## Is it hacking the reward model?

PPO optimised reward-model member 0; member 1, trained on the other half of the training prompts, judged every
rollout without PPO seeing its gradient (the watch, `training/watch.py`). Each checkpoint's KL and scores are the
run's own, on the store's held-out prompts; its win rate is the scripted annotator's on the demo's held-out prompts.
A sampled KL (k1, the mean of log pi - log pi_ref over the actor's own replies) can come out below 0; the plot reads
it as 0. Best-of-N picks, among N samples of the reference, the one the optimised reward model scores highest; its
KL is the bound log N - (N - 1)/N.

RLOO's checkpoints are measured as PPO's are; DPO's policy is one point, its KL measured with PPO's settings on the
same held-out prompts (`training/rollouts/prompt_run.py::evaluate_policy`). At equal KL, each method's curve runs from
the reference (KL 0, win rate 50%) through its points, linear in sqrt(KL).

{lines}

![win rate against sqrt(KL)](win_rate_vs_kl.png)

![the watch](watch.png)

|PPO checkpoint (step)|KL (nats)|optimised score|held-out judge|words|win rate|95% interval|
|---:|---:|---:|---:|---:|---:|---|
{rows}

|best-of-N (N)|KL bound (nats)|optimised score|words|win rate|95% interval|
|---:|---:|---:|---:|---:|---|
{bon}
"""


def _sqrt(kl: float) -> float:
    """sqrt(KL), a negative sampled estimate read as 0."""
    return math.sqrt(max(kl, 0.0))


def _num(x: float | None) -> str:
    return "" if x is None else f"{x:.3f}"

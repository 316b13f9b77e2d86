"""The table a user reads first (issue 52): every trained policy, with one sample at inference, against best-of-N
of the reference for N = 1, 2, 4, ..., each as its win rate over the reference by the judge, with the samples drawn
at inference and the KL to the reference. Pure functions over a demo's results.json.

The question a team asks is whether a trained policy gives with one sample what best-of-16 gives with sixteen; at
equal KL best-of-N is close to optimal among reward-tilted policies (Beirami et al. 2024), so the table puts the
methods against the samples drawn, and names the KL each came at (a trained policy's: its final checkpoint's, measured
on the store's held-out prompts with PPO's settings, or its last training step's where it has none; best-of-N's: the
analytic log N - (N - 1) / N)."""

from __future__ import annotations

from app.studies.demo_common import ON_PROMPTS


def policy_rows(r: dict) -> list[dict]:
    """Each trained policy the demo judged: {name, samples: 1, kl, win_rate, ci95, off_topic}."""
    rows = []
    kl = _last_kl(r.get("checkpoints"), (r.get("kl_per_step") or [None])[-1])
    rows.append(_row("PPO", r["win_rate"], r["win_rate_ci95"], kl, r.get("off_topic_actor"), "ppo"))
    checkpoints = r.get("checkpoints") or []
    kept = next((c for c in checkpoints if c.get("chosen")), None)
    if kept and kept is not checkpoints[-1] and "win_rate" in kept:  # the last one is PPO's own row
        rows.append(_row("PPO's kept checkpoint", kept["win_rate"], kept.get("ci95"), kept["kl"], None, "ppo_kept"))
    if "dpo_vs_reference" in r:
        d = r["dpo_vs_reference"]
        kl = (r.get("dpo_point") or {}).get("kl")
        rows.append(_row("DPO", d["win_rate"], d["ci95"], kl, r.get("off_topic_dpo"), "dpo"))
    if "kto_vs_reference" in r:
        d = r["kto_vs_reference"]
        kl = (r.get("kto_point") or {}).get("kl")
        rows.append(_row("KTO", d["win_rate"], d["ci95"], kl, r.get("off_topic_kto"), "kto"))
    for method, (_, title, _) in ON_PROMPTS.items():
        if f"{method}_vs_reference" in r:
            m = r[f"{method}_vs_reference"]
            kl = _last_kl(r.get(f"{method}_checkpoints"), r.get(f"{method}_kl"))
            rows.append(_row(title, m["win_rate"], m["ci95"], kl, r.get(f"off_topic_{method}"), method))
    return rows


def _last_kl(checkpoints: list[dict] | None, fallback):
    """The KL of a run's last evaluated checkpoint (its final policy, measured on the store's held-out prompts as
    DPO's point is), else the fallback (its last training step's)."""
    return checkpoints[-1]["kl"] if checkpoints else fallback


def best_of_rows(r: dict) -> list[dict]:
    """Best-of-N of the reference by the reward model PPO optimised: {name, samples: N, kl, win_rate, ci95,
    off_topic}."""
    return [
        {**_row(f"best-of-{p['n']}", p["win_rate"], p.get("ci95"), p["kl"], p.get("off_topic")), "samples": p["n"]}
        for p in r.get("best_of_n") or []
    ]


def _row(name: str, win: float, ci95, kl, off_topic, method: str = "best_of") -> dict:
    return {
        "name": name,
        "method": method,
        "samples": 1,
        "kl": kl,
        "win_rate": win,
        "ci95": ci95,
        "off_topic": off_topic,
    }


def one_sample_verdict(r: dict) -> dict:
    """The recommended method (the config's `recommend`, chosen on validation; PPO for a demo from before it
    existed) with one sample against the largest best-of-N: {policy, method, win_rate, ci95, off_topic, best_of,
    best_of_win_rate, best_of_ci95, best_of_off_topic, difference, verdict}. verdict, from this seed's intervals over
    prompts: "above" when the policy's interval lies above best-of-N's win rate, "below" when best-of-N's interval
    lies above the policy's, else "within" (the claim over seeds is demo_seeds'). Never the best row of the
    judged prompts: a maximum picked on the numbers it is judged by is biased up. {} without both."""
    method = (r.get("config") or {}).get("recommend", "ppo")
    policy = next((p for p in policy_rows(r) if p["method"] == method), None)
    best = best_of_rows(r)
    if policy is None or not best:
        return {}
    return verdict_of(policy, best[-1])


def verdict_of(policy: dict, bar: dict) -> dict:
    lo, _ = policy["ci95"] or (None, None)
    blo, _ = bar["ci95"] or (None, None)
    if lo is not None and lo > bar["win_rate"]:
        verdict = "above"
    elif blo is not None and blo > policy["win_rate"]:
        verdict = "below"
    else:
        verdict = "within"
    return {
        "policy": policy["name"],
        "method": policy["method"],
        "win_rate": policy["win_rate"],
        "ci95": policy["ci95"],
        "off_topic": policy["off_topic"],
        "best_of": bar["name"],
        "best_of_win_rate": bar["win_rate"],
        "best_of_ci95": bar["ci95"],
        "best_of_off_topic": bar["off_topic"],
        "difference": policy["win_rate"] - bar["win_rate"],
        "verdict": verdict,
    }


def _pct(x) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _ci(ci) -> str:
    return "n/a" if not ci else f"{ci[0]:.1%}-{ci[1]:.1%}"


def _kl(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def samples_table(r: dict) -> str:
    """GitHub Markdown: best-of-N rows, then the trained policies, with samples, KL, win rate, interval, off-topic."""
    lines = [
        "|policy|samples at inference|KL to the reference (nats)|win rate over the reference|95% interval|off-topic|",
        "|---|---:|---:|---:|---|---:|",
    ]
    ref = r.get("off_topic_reference")
    lines.append(f"|reference|1|0.00|50.0% (itself)|n/a|{_pct(ref)}|")
    for row in best_of_rows(r) + policy_rows(r):
        lines.append(
            f"|{row['name']}|{row['samples']}|{_kl(row['kl'])}|{_pct(row['win_rate'])}|{_ci(row['ci95'])}|"
            f"{_pct(row['off_topic'])}|"
        )
    return "\n".join(lines)


def verdict_line(r: dict) -> str:
    v = one_sample_verdict(r)
    if not v:
        return "no recommended policy and best-of-N to compare"
    best = f"{_pct(v['best_of_win_rate'])} ({_ci(v['best_of_ci95'])})"
    return (
        f"one sample of the recommended method against {v['best_of']}: {v['policy']} {_pct(v['win_rate'])} "
        f"({_ci(v['ci95'])}) against {best}: {v['verdict']} (this seed's intervals over prompts); off-topic "
        f"{_pct(v['off_topic'])} against the reference's {_pct(r.get('off_topic_reference'))}"
    )


def plot_samples(folder, r: dict) -> str | None:
    """win_rate_vs_samples.png: best-of-N's win rate against N (log scale), each trained policy at one sample."""
    best, policies = best_of_rows(r), policy_rows(r)
    if not best:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot([b["samples"] for b in best], [b["win_rate"] for b in best], marker="o", label="best-of-N of the reference")
    for i, p in enumerate(policies):
        ax.scatter([1], [p["win_rate"]], marker="x^sDv*P"[i % 7], s=50, label=f"{p['name']} (1 sample)", zorder=3)
    ax.axhline(0.5, color="grey", lw=0.8, ls=":")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="samples drawn at inference", ylabel="win rate over the reference (judge)")
    ax.set_title("one sample of a trained policy against best-of-N", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "win_rate_vs_samples.png", dpi=110)
    plt.close(fig)
    return "win_rate_vs_samples.png"


def samples_section(folder, r: dict) -> str:
    """The report's "One sample against best-of-N" section, its plot written beside it."""
    plot_samples(folder, r)
    return f"""
## One sample against best-of-N

Every trained policy with one sample at inference against best-of-N of the reference (N samples, the reward
model's pick), each by its win rate over the reference as the judge sees it, on the judged prompts. KL: a trained
policy's as its final checkpoint was measured (the store's held-out prompts, PPO's settings), best-of-N's analytic
bound log N - (N - 1) / N. Off-topic: the share of answers that share no content word with their prompt.

{samples_table(r)}

{verdict_line(r)}.

![win rate against samples](win_rate_vs_samples.png)
"""

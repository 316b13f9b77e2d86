"""`make bench`: every benchmark in one run; prints a table, writes docs/benchmarks.json and renders
docs/benchmarks.md from it. `--only NAME` reruns one benchmark and keeps the others' last results.

Speed targets live here, never in tests. Figures are ratios inside one run on one machine."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from bench import annotation_latency, dpo, pairs, ppo, reward, rloo, sample_click, sampling
from bench import report as page
from bench.repeat import repeated

KEPT = Path(__file__).parent / "results" / "partial"  # each section's finished runs until all are done (ignored by git)


def provenance(repeats: int) -> dict:
    """What a section's results were made by (app/jobs/provenance.py), and how many runs its timings are the median
    of."""
    from app.jobs.provenance import provenance as made_by

    return made_by(sys.argv[1:], "python -m bench.run") | {"repeats": repeats}


def print_ppo(rows: list[dict]) -> None:
    print("\n| PPO step | shape | dtype | peer | s/step | decoded | generation share | peak MB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        for name in ("rlhf_studio", "trl"):
            x = r[name]
            print(
                f"| | {r.get('shape', 'fixed')} | {r['dtype']} | {name} | {x['s_per_step']:.2f} | "
                f"{x.get('decoded', 64):.0f} | {x['gen_share']:.0%} | {x['peak_rss_mb']:.0f} |"
            )
        shape = r.get("shape", "fixed")
        print(f"| ratio | {shape} | {r['dtype']} | | {r['speed_ratio']:.2f}x | | | {r['memory_ratio']:.2f}x |")
        if "rlhf_studio_vllm" in r:
            v = r["rlhf_studio_vllm"]
            print(
                f"| | {shape} | {r['dtype']} | rlhf_studio, vLLM rollouts | {v['s_per_step']:.2f} | "
                f"{v.get('decoded', 64):.0f} | {v['gen_share']:.0%} | {v['peak_rss_mb']:.0f} |"
            )
            print(f"| own decode / vLLM | {shape} | {r['dtype']} | | {r['engine_speed_ratio']:.2f}x | | | |")


def print_pairs_trainer(title: str, rows: list[dict]) -> None:
    print(f"\n| {title}, 12 pairs/step | dtype | rlhf-studio pairs/s | TRL pairs/s | ratio | peak MB (ours / TRL) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        a, b = r["rlhf_studio"], r["trl"]
        print(
            f"| {r['pairs']} {r['shape']} pairs | {r['dtype']} | {a['pairs_per_s']:.2f} | {b['pairs_per_s']:.2f} | "
            f"{r['speed_ratio']:.2f}x | {a['peak_rss_mb']:.0f} / {b['peak_rss_mb']:.0f} |"
        )


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--only", choices=["pairs", "sampling", "clicks", "annotation", "reward", "dpo", "ppo", "rloo"])
    p.add_argument("--reward-rankings", type=int, default=64, help="K = 4 rankings (6 pairs each)")
    p.add_argument("--dpo-pairs", type=int, default=192, help="pairs per DPO run (a multiple of 12)")
    p.add_argument("--rankings", type=int, default=1_000_000)
    p.add_argument("--repeats", type=int, default=3, help="whole runs per benchmark: the median and the range")
    p.add_argument(
        "--dtypes",
        default="bf16,fp32",
        help="the training benches' precisions (reward, dpo, ppo, rloo), comma-separated; fp32 alone on a CPU "
        "without native bf16, where bf16 is emulated and `auto` trains in fp32",
    )
    args = p.parse_args()
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    args.dtypes = tuple(dict.fromkeys(d for d in args.dtypes.split(",") if d))  # each once
    if not args.dtypes or set(args.dtypes) - {"bf16", "fp32"}:
        p.error("--dtypes takes bf16, fp32 or both")
    return args


def ppo_cases(dtypes: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """(dtype, shape) of the PPO bench: the fixed shape in each dtype, the default shape in bf16 where it runs
    (what `auto` takes on a GPU or a CPU with native bf16), else in fp32."""
    return tuple((d, "fixed") for d in ("fp32", "bf16") if d in dtypes) + (
        ("bf16" if "bf16" in dtypes else "fp32", "default"),
    )


def main() -> None:
    args = parse_args()

    def runs(
        measure, name: str
    ):  # each benchmark `args.repeats` times: medians, each run's rows kept (bench/repeat.py)
        made = {k: v for k, v in provenance(args.repeats).items() if k != "date"}
        return repeated(measure, args.repeats, KEPT / f"{name}.jsonl", made)  # a cut sitting keeps its finished runs

    report = started(args.only)
    if args.only in (None, "pairs"):
        report["pairs"] = runs(lambda: pairs.run(n=args.rankings), "pairs")
        print("\n| K | pairs | DuckDB view pairs/s | Python loop pairs/s | ratio |\n|---|---|---|---|---|")
        for r in report["pairs"]:
            print(
                f"| {r['k']} | {r['pairs']:,} | {r['duckdb_pairs_per_s'] / 1e6:.1f}M | "
                f"{r['loop_pairs_per_s'] / 1e6:.2f}M | {r['ratio']:.1f}x |"
            )
    if args.only in (None, "sampling"):
        report["sampling"] = runs(sampling.run, "sampling")
        print(
            "\n| sampling (K=4, 64 new tokens) | engine | dtype | tokens/s | vs one call per response "
            "| vs generate, one call | engine start |\n|---|---|---|---|---|---|---|"
        )
        for r in report["sampling"]:
            print(
                f"| {r['case']} | {r['engine']} | {r['dtype']} | {r['tokens_per_s']:.0f} | "
                f"{r['speedup_vs_per_response']:.1f}x | {r['vs_hf_one_call']:.2f}x | {r['engine_start_s']:.0f} s |"
            )
    if args.only in (None, "clicks"):
        report["clicks"] = sample_click.with_break_even(runs(sample_click.run, "clicks"))
        print("\n" + "\n".join(sample_click.table(report["clicks"])))
    if args.only in (None, "annotation"):
        report["annotation"] = runs(
            lambda: [
                annotation_latency.run(n, think_s=t, hammer=h, login_guesses=g)
                for n, t, h, g in annotation_latency.CASES
            ],
            "annotation",
        )
        print("\n" + "\n".join(page.annotation_table(report["annotation"])))
    if args.only in (None, "reward"):
        report["reward"] = runs(lambda: reward.run(n_rankings=args.reward_rankings, dtypes=args.dtypes), "reward")
        print_pairs_trainer("reward model, 128 tokens", report["reward"])
    if args.only in (None, "dpo"):
        report["dpo"] = runs(lambda: dpo.run(n_pairs=args.dpo_pairs, dtypes=args.dtypes), "dpo")
        print_pairs_trainer("DPO, 64 + 64 tokens", report["dpo"])
    if args.only in (None, "ppo"):
        report["ppo"] = runs(lambda: ppo.run(ppo_cases(args.dtypes)), "ppo")
        print_ppo(report["ppo"])
    if args.only in (None, "rloo"):
        report["rloo"] = runs(lambda: rloo.run(("bf16",) if "bf16" in args.dtypes else ("fp32",)), "rloo")
        print("\n" + "\n".join(rloo.table(report["rloo"])))
    save(report, [k for k in page.SECTIONS if k in report and (args.only in (None, k))], args.repeats)


def started(only: str | None) -> dict:
    """This machine, and what this run keeps of the last results: the other sections with `--only`, else the GPU's."""
    from app.jobs.provenance import machine

    report = {"machine": machine()}
    last = json.loads(page.RESULTS.read_text()) if page.RESULTS.exists() else {}
    if only:  # one benchmark again: the others keep their last results
        return {**last, **report}
    if "gpu" in last:  # written by bench/gpu_check.sh --record on a GPU machine, which this run is not
        report |= {"gpu": last["gpu"], "ran_at": {"gpu": last["ran_at"]["gpu"]}}
    return report


def save(report: dict, ran: list[str], repeats: int) -> None:
    """The sections that ran stamped with when and what made them, then the results file and the page."""
    stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    report["ran_at"] = {**report.get("ran_at", {}), **{k: stamp for k in ran}}
    made_by = provenance(repeats)
    report["provenance"] = {**report.get("provenance", {}), **{k: made_by for k in ran}}
    page.RESULTS.parent.mkdir(exist_ok=True)
    page.RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nmachine: {report['machine']}; wrote {page.write(report)}")


if __name__ == "__main__":
    main()

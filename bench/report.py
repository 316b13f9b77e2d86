"""docs/benchmarks.md from docs/benchmarks.json: every figure beside its peer's figure from the same run, as a
ratio, with the machine described. `make bench` (bench/run.py) writes both; `python -m bench.report` re-renders
the page from the JSON alone."""

from __future__ import annotations

import json
from pathlib import Path

from bench.fair import PRECISION
from bench.repeat import fig

RESULTS = Path(__file__).parent.parent / "docs" / "benchmarks.json"
PAGE = Path(__file__).parent.parent / "docs" / "benchmarks.md"


def _pairs(rows: list[dict]) -> list[str]:
    out = [
        "## Pair expansion",
        "",
        "The store's SQL view (a self-join on ranking items) against a plain Python loop over the same items, "
        "1M rankings without ties; both keep every (ranking, chosen, rejected) row (`bench/pairs.py`).",
        "",
        "| K | pairs | DuckDB view | Python loop | ratio |",
        "|---:|---:|---:|---:|---:|",
    ]
    out += [
        f"| {r['k']} | {r['pairs']:,} | {_millions(r, 'duckdb_pairs_per_s', '{:.1f}')} pairs/s | "
        f"{_millions(r, 'loop_pairs_per_s', '{:.2f}')} pairs/s | {fig(r, '{:.1f}x', 'ratio')} |"
        for r in rows
    ]
    return out


def _millions(row: dict, key: str, form: str) -> str:
    scaled = {key: row[key] / 1e6} | (
        {"repeats": [{key: r[key] / 1e6} for r in row["repeats"]]} if row.get("repeats") else {}
    )
    return fig(scaled, form + "M", key)


def _opt(row: dict, key: str, form: str) -> str:
    """A figure results written before it existed do not have: a dash."""
    return fig(row, form, key) if key in row else "—"


def _sampling(rows: list[dict]) -> list[str]:
    out = [
        "## Sampling K responses",
        "",
        "SmolLM2-135M-Instruct, K = 4 samples of exactly 64 new tokens for 16 prompts; the peers are the naive "
        "one-`generate`-call-per-response loop and transformers' generate over the whole batch, the fallback engine "
        "(`bench/sampling.py`). An engine's start (loading the model; vLLM's process) is timed apart.",
        "",
        "| case | engine | dtype | tokens/s | vs one call per response | vs generate, one call | engine start |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    out += [
        f"| {r['case']} | {r.get('engine', 'hf')} | {r['dtype']} | {fig(r, '{:.0f}', 'tokens_per_s')} | "
        f"{fig(r, '{:.1f}x', 'speedup_vs_per_response')} | {_opt(r, 'vs_hf_one_call', '{:.2f}x')} | "
        f"{_opt(r, 'engine_start_s', '{:.0f} s')} |"
        for r in rows
    ]
    return out


def annotation_table(rows: list[dict]) -> list[str]:
    """The annotation results as a Markdown table: the page's, and what `make bench` prints."""
    out = [
        "| annotators | think time | submits/s | p50 | p95 | max | handler p50 / p95 | app CPU per submit "
        "| generator CPU | errors | rankings stored |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    out += [
        f"| {_team_cell(r)} | {r['think_s']} s | {r['submits_per_s']:.1f} | {r['p50_ms']:.0f} ms | "
        f"{r['p95_ms']:.0f} ms | {r['max_ms']:.0f} ms | {r['handler_p50_ms']:.0f} / {r['handler_p95_ms']:.0f} ms | "
        f"{r['app_cpu_ms_per_submit']:.1f} ms | {r['generator_cpu']:.0%} | {r['errors']} | "
        f"{r['stored_rankings']}{', each once' if r['stored_once'] else ', NOT each once'} |"
        for r in rows
    ]
    return out


def _team_cell(r: dict) -> str:
    """The annotators, the one login hammering Compare beside them (bench/annotation_latency.py::Hammer) and the
    one client guessing logins (guess_logins)."""
    h, g = r.get("hammer"), r.get("login_guesses")
    cell = str(r["annotators"])
    if h:
        cell += (
            f" + 1 hammering Compare ({h['sent']} maximal requests sent: {h['completed']} answered, "
            f"{h['refused']} refused, {h['failed']} failed; the chat's child took {r['chat_cpu_share']:.0%} of a "
            "core)"
            if "chat_cpu_share" in r
            else f" + 1 hammering Compare ({h['refused']} refused, {h['failed']} failed)"
        )
    if g:
        cell += (
            f" + 1 guessing logins ({g['sent']} wrong logins, a fresh name every {1 / r['login_guesses_per_s']:g} s: "
            f"{g['checked']} checked, {g['refused']} refused before the check, {g['other']} other)"
        )
    return cell


def _annotation(rows: list[dict]) -> list[str]:
    return [
        "## Annotation latency",
        "",
        "Submit-to-next-prompt in the real app (`rlhf ui --auth`) over HTTP on 127.0.0.1, a team ranking at once, "
        "each annotator thinking 0.5x-1.5x the think time before each submit: 100 at 5 s is about 20 submits a "
        "second, a labeling team's load (`bench/annotation_latency.py`). The load generator speaks the browser's "
        "queue protocol with httpx in one asyncio process pinned to its own core, the app on the others; "
        "*generator CPU* is its share of that core. *Submits/s* averages the whole run, ramp-up and ramp-down "
        "included. *Handler* is the time Gradio reports per event (the store's lock wait included), *app CPU* the "
        "app process's CPU per submit (its idle work included). *Stored once*: every acknowledged submit is in the "
        "store exactly once, with its K items. Chatbot Arena-style apps aim at well under a second.",
        "",
        *annotation_table(rows),
        "",
        "These runs start on an empty store. No per-submit query scans every response or ranking (migration 0009 "
        "keeps each prompt's task and the rankings, skips and pairs per annotator), and the page's counts read those "
        "counters. The case on a store that already holds a million rankings (`python -m bench.annotation_latency "
        "--annotators 100 --think 5 --rounds 20 --stored 1000000`) is not in the results file, so this page gives "
        "no figure for it.",
        "",
        "The last row: its clock starts once a reply streams (the chat's model loaded). The Compare chat samples in "
        "a child process under SCHED_IDLE on the app's one core and yields to a busy app (app/jobs/chat_worker.py): "
        "after each step it waits until its CPU is 10% of the time while the app has handled another event in the "
        "last 0.3 s. The guessing client tries a wrong password under a fresh name every second; past its "
        "address's failure budget its logins are refused before the password check (app/faces/logins.py). Runs of "
        "these cases vary from one run to the next on this shared machine; the rows above are one run, and only "
        "they are measurements on this page.",
    ]


def _pairs_trainer_table(rows: list[dict]) -> list[str]:
    """Both pair trainers' rows (reward model, DPO): one line per data shape and dtype."""
    out = [
        "| data | dtype | pairs | rlhf-studio pairs/s | TRL pairs/s | speed ratio | peak MB (ours / TRL) "
        "| memory ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    return out + [
        f"| {r.get('shape', 'ranking')} | {r['dtype']} | {r['pairs']} | "
        f"{fig(r, '{:.2f}', 'rlhf_studio', 'pairs_per_s')} | {fig(r, '{:.2f}', 'trl', 'pairs_per_s')} | "
        f"{fig(r, '{:.2f}x', 'speed_ratio')} | {r['rlhf_studio']['peak_rss_mb']:.0f} / "
        f"{r['trl']['peak_rss_mb']:.0f} | {r['memory_ratio']:.2f}x |"
        for r in rows
    ]


SHAPES = (
    "*ranking*: K = 4 responses per prompt and all 6 pairs of each ranking (rlhf-studio keeps a ranking's pairs in "
    "one batch, runs each response once and their shared prompt once (`--share-prompt`, the default): 2 prompts "
    "and 8 responses of 64 tokens per 12 pairs, against TRL's 24 whole sequences of 128); *independent*: one pair "
    "per prompt (TRL: 24 whole sequences per step; rlhf-studio: 12 prompts, each run once for its 2 responses)."
)


def _reward(rows: list[dict]) -> list[str]:
    intro = (
        "rlhf-studio (DeepSpeed launcher, one rank, ZeRO 0) against TRL's RewardTrainer on the same pairs, token for "
        "token: SmolLM2-135M-Instruct with a scalar head, 128 tokens per sequence, 12 pairs per step, one epoch "
        f"(`bench/reward.py`). {SHAPES}"
    )
    return ["## Reward-model training", "", intro, ""] + _pairs_trainer_table(rows)


def _dpo(rows: list[dict]) -> list[str]:
    intro = (
        "rlhf-studio (DeepSpeed launcher, one rank, ZeRO 0) against TRL 1.16's DPOTrainer on the same pairs, token "
        "for token: SmolLM2-135M-Instruct, 64 prompt + 64 response tokens, 12 pairs per step, sigmoid loss, beta "
        "0.1, the reference's log-probs precomputed on both sides, median pairs/s after 4 steps (`bench/dpo.py`). "
        f"{SHAPES}"
    )
    return ["## DPO training", "", intro, ""] + _pairs_trainer_table(rows)


def _ppo(rows: list[dict]) -> list[str]:
    out = [
        "## PPO step",
        "",
        "rlhf-studio (DeepSpeed, actor + reference + critic + reward) against TRL 0.29.1's PPOTrainer (the last TRL "
        "with PPO): SmolLM2-135M-Instruct for all four, one process, median of steps 3-8 (`bench/ppo.py`). Two "
        "shapes: *fixed*, 8 prompts of 64 tokens and exactly 64 new tokens; *default*, what `rlhf train-ppo` runs "
        "when given no options but the batch, 8 prompts a step as TRL's (its own default is 32 since 2026-12-06; "
        "mixed length, up to 128 new tokens, EOS ends a response, a sample "
        'logged each step; TRL with the same lengths and `stop_token="eos"`). *Decoded* is the median number of '
        "decode steps a step took (to the last row's EOS): sampling makes it differ between the two sides, so the "
        "default shape's ratio carries that noise. DeepSpeed-Chat's own step-3 engine is not on the package "
        "registry and is not a peer here: this page gives no figure for it.",
        "",
        "| shape | dtype | rlhf-studio s/step | TRL s/step | speed ratio | decoded (ours / TRL) "
        "| generation share (ours / TRL) | peak MB (ours / TRL) | memory ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    out += [
        f"| {_shape(r)} | {r['dtype']} | {fig(r, '{:.2f}', 'rlhf_studio', 's_per_step')} | "
        f"{fig(r, '{:.2f}', 'trl', 's_per_step')} | {fig(r, '{:.2f}x', 'speed_ratio')} | {_decoded(r)} | "
        f"{r['rlhf_studio']['gen_share']:.0%} / {r['trl']['gen_share']:.0%} | "
        f"{r['rlhf_studio']['peak_rss_mb']:.0f} / {r['trl']['peak_rss_mb']:.0f} | {r['memory_ratio']:.2f}x |"
        for r in rows
    ]
    out += _ppo_engines([r for r in rows if "rlhf_studio_vllm" in r])
    out += _ppo_profile([r for r in rows if "parts" in r["rlhf_studio"]])
    return out + _ppo_memory([r for r in rows if r["rlhf_studio"].get("memory")])


def _ppo_engines(rows: list[dict]) -> list[str]:
    """rlhf-studio's step with vLLM rollouts against its own decode, in the same run."""
    if not rows:
        return []
    auto = rows[0]["rlhf_studio"]["engine"]
    intro = (
        "rlhf-studio's step with each rollout engine, in the same run: vLLM beside the trainer, given the actor's "
        "weights before each step's rollouts (*weight sync*, seconds a step, part of the step), against the trainers' "
        f"own decode. The table above is what `auto` took here ({'vLLM' if auto == 'vllm' else 'the own decode'}). "
        "Peak MB is the training rank's: vLLM's engine runs in a process of its own, with its KV cache, not counted."
    )
    out = [
        "",
        intro,
        "",
        "| shape | dtype | vLLM s/step | own decode s/step | own / vLLM | decode share (vLLM / own) | weight sync s "
        "| rank's peak MB (vLLM / own) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        v, h = r["rlhf_studio_vllm"], r["rlhf_studio_own_decode"]
        out.append(
            f"| {_shape(r)} | {r['dtype']} | {fig(r, '{:.2f}', 'rlhf_studio_vllm', 's_per_step')} | "
            f"{fig(r, '{:.2f}', 'rlhf_studio_own_decode', 's_per_step')} | {fig(r, '{:.2f}x', 'engine_speed_ratio')} | "
            f"{v['gen_share']:.0%} / {h['gen_share']:.0%} | "
            f"{v.get('parts', {}).get('weight_sync', 0.0):.2f} | {v['peak_rss_mb']:.0f} / {h['peak_rss_mb']:.0f} |"
        )
    return out


def _shape(row: dict) -> str:
    return row.get("shape", "fixed")


def _decoded(row: dict) -> str:
    """Decode steps a step took, ours / TRL (a dash where a row from before did not record them)."""
    return " / ".join(_opt(row[side], "decoded", "{:.0f}") for side in ("rlhf_studio", "trl"))


PARTS = (
    ("decode", "decode (sampling the responses)"),
    ("actor_forward", "actor forward (log-probs, kept for the update)"),
    ("reference_forward", "reference forward"),
    ("critic_forward", "critic forward (values, kept for the update)"),
    ("reward_forward", "reward-model forward"),
    ("actor_backward", "actor backward"),
    ("actor_step", "actor optimizer step"),
    ("critic_backward", "critic backward"),
    ("critic_step", "critic optimizer step"),
)


def _ppo_profile(rows: list[dict]) -> list[str]:
    """Where rlhf-studio's PPO step goes: the median seconds of each part over steps 3-8, and its share of the
    median step. *other* is the rest (rewards and advantages, metrics, Python between the parts)."""
    if not rows:
        return []
    intro = (
        "Where rlhf-studio's step goes (median seconds of each part over steps 3-8, `training/rollouts/profile.py`; "
        "*other* is the rest of the median step: rewards, advantages, metrics, and the Python between the parts):"
    )
    out = _two_columns_per_row(intro, "part", [f"{r['dtype']} {_shape(r)} s | share" for r in rows])
    for name, label in PARTS + (("other", "other"),):
        cells = []
        for r in rows:
            ours = r["rlhf_studio"]
            t = ours["parts"].get(name, 0.0) if name != "other" else ours["s_per_step"] - sum(ours["parts"].values())
            cells.append(f"{t:.2f} | {t / ours['s_per_step']:.0%}")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return out


def _two_columns_per_row(intro: str, first: str, headers: list[str]) -> list[str]:
    """A paragraph, then the head of a table with a label column and two right-aligned columns per result row."""
    return ["", intro, "", f"| {first} | " + " | ".join(headers) + " |", "|---|" + "---:|---:|" * len(headers)]


MODELS = (("actor", "actor"), ("reference", "reference"), ("critic", "critic"), ("reward", "reward model"))


def _ppo_memory(rows: list[dict]) -> list[str]:
    """What each model holds for the whole run: its weights, and the optimizer's fp32 masters and AdamW moments
    (the actor and critic); the rest of the peak is activations, gradients and the runtime."""
    if not rows:
        return []
    intro = (
        "Memory per model (MB; the optimizer: fp32 master weights where the model is bf16, and AdamW's two moments; "
        "the rest of the peak is the step's activations and gradients, and the Python and torch runtime):"
    )
    out = _two_columns_per_row(intro, "model", [f"{r['dtype']} {_shape(r)} weights | optimizer" for r in rows])
    for key, label in MODELS:
        cells = []
        for r in rows:
            m = r["rlhf_studio"]["memory"]
            opt = m.get(f"{key}_optimizer")
            cells.append(f"{m.get(key, 0):.0f} | {f'{opt:.0f}' if opt is not None else '-'}")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    return out


def _gpu(report: dict) -> list[str]:
    out = [
        "## On a GPU",
        "",
        f"`bash bench/gpu_check.sh` on {report['machine']}: rlhf-studio alone (the peers' figures above are CPU "
        "ones), bf16, one process, through the DeepSpeed launcher, on the workloads above (PPO: `bench/ppo.py`'s; "
        "DPO: 192 ranking-shaped pairs; reward model: 384 pairs of 128 tokens). "
        f"{report.get('note', '')}",
        "",
        "| workload | ZeRO | speed | generation share | peak GPU MB | peak host MB |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        gen = f"{r['gen_share']:.0%} ({r['gen_s']:.2f} s)" if "gen_share" in r else ""
        out.append(
            f"| {r['what']} | {r['zero']} | {r['value']:.2f} {r['unit']} | {gen} | {r['peak_gpu_mb']:.0f} | "
            f"{r['peak_rss_mb']:.0f} |"
        )
    return out


def _clicks(rows: list[dict]) -> list[str]:
    from bench.sample_click import __doc__ as about
    from bench.sample_click import table

    intro = " ".join(about.split("\n\n")[0].split())
    return ["## The Sample button, first and second click", "", intro, "", *table(rows)]


def _rloo(rows: list[dict]) -> list[str]:
    from bench.rloo import __doc__ as about
    from bench.rloo import table

    intro = " ".join(about.split())
    return ["## RLOO step against PPO's", "", intro, "", *table(rows)]


SECTIONS = {
    "pairs": _pairs,
    "sampling": _sampling,
    "clicks": _clicks,
    "annotation": _annotation,
    "reward": _reward,
    "dpo": _dpo,
    "ppo": _ppo,
    "rloo": _rloo,
}


# shown only when a run recorded it (a GPU is not always at hand)
OPTIONAL = {"gpu": _gpu}


def render(report: dict) -> str:
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (or `python -m bench.report` from `docs/benchmarks.json`); do not edit by "
        "hand. Each comparison runs both sides in one run on one machine; a ratio above 1 means rlhf-studio is "
        "faster (or, for memory, uses more). Each section says when it ran, by what command, at what commit and on "
        "what machine; a timing run several times is the median, its range over the runs in brackets.",
        "",
        _precision(),
    ]
    for name, section in SECTIONS.items():
        lines.append("")
        if name in report:
            lines += section(report[name]) + _ran(report, name)
        else:
            lines += [f"## {name}", "", "Not in the results file: run `python -m bench.run --only " + name + "`."]
    for name, section in OPTIONAL.items():
        if name in report:
            lines += [""] + section(report[name]) + _ran(report, name)
        else:
            lines += ["", *ABSENT[name]]
    return "\n".join(lines) + "\n"


def _precision() -> str:
    bf16 = PRECISION["bf16"]
    return (
        f"Precision: a bf16 row is bf16 as each side runs it: rlhf-studio's {bf16['rlhf_studio']} (DeepSpeed's bf16), "
        f"TRL's {bf16['trl']} (the Trainer's `bf16=True`); the memory ratios of bf16 rows compare those two regimes. "
        "Both sides' steps are timed by the wall clock between step ends, and a peer's process gets the malloc "
        "settings our ranks get (`bench/fair.py`)."
    )


# what the page says of an optional section the results file does not hold
ABSENT = {
    "gpu": [
        "## On a GPU",
        "",
        "No GPU run with its record (command, commit, date, machine) is in the results file: "
        "`bash bench/gpu_check.sh --record NOTE` on a machine with a CUDA GPU writes this section (rlhf-studio's "
        "PPO step at ZeRO-2 and 3, DPO and reward-model training, bf16, one process).",
    ]
}

# how a section is made again where it is not `python -m bench.run --only NAME`
RERUN = {"gpu": "`bash bench/gpu_check.sh --record NOTE` on a machine with a CUDA GPU"}


def _ran(report: dict, name: str) -> list[str]:
    """When a section ran and, where the results file recorded it, by what command at what commit on what CPU; a
    section without that record says so."""
    when = report.get("ran_at", {}).get(name)
    made = report.get("provenance", {}).get(name)
    if not when:
        return []
    if not made:
        return [
            "",
            f"Ran {when}, before the results file recorded each section's command, commit and CPU, and before its "
            f"timings were the median of several runs timed alike on both sides: these figures are not traceable. "
            f"{RERUN.get(name, f'`python -m bench.run --only {name}`')} reruns them with that record.",
        ]
    runs = made.get("repeats", 1)
    how = f"median of {runs} runs" if runs > 1 else "one run"
    return [
        "",
        f"Ran {when} at commit {made['commit']}, `{made['command']}`, on {made['machine']} ({made['cpu']}); {how}.",
    ]


def write(report: dict, page: Path = PAGE) -> Path:
    page.write_text(render(report))
    return page


if __name__ == "__main__":
    print(write(json.loads(RESULTS.read_text())))

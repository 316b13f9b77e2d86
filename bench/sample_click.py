"""The Data tab's Sample button in chromium (issue 55): the first and the second click of 4 prompts x 4 responses,
sampled by the app's vLLM engine (`RLHF_ENGINE=vllm`), by transformers' generate (`RLHF_ENGINE=hf`) and as the app
picks by default (`auto`: vLLM where it loads the model, whatever the job's size: the app keeps its engine for the
clicks after), side by side in one run.

Each side starts the app afresh (`rlhf ui` on 127.0.0.1, the default model, an empty store), loads the example
prompts and clicks "Sample pending prompts" twice with K = 4 and "At most this many prompts" 4. A click is timed as
its user waits for it: from the click to the store's counts showing the click's 16 new responses. The first click
pays for loading the model (generate) or starting the engine (vLLM); the app keeps either for the next click, which
pays only for sampling; it follows the first at once. The sides take turns in each repeat (vLLM, generate, auto),
so a slow minute of the machine falls on all.

Where an engine's start pays for a command's one job (`break_even`, `rlhf sample`'s CPU_ENGINE_PAYS_FROM): a job of
n prompts costs a side its start (first click minus second)
plus n times its time per prompt (second click over 4), so a cold vLLM engine beats generate from
n = (vLLM's start - generate's) / (generate's time per prompt - vLLM's) on; that line is an estimate that takes the
time as linear in the prompts (a batch of 4 is not the batch of 40), and is None where vLLM is not faster per
prompt.

`python -m bench.sample_click` runs one repeat and prints it; `python -m bench.run --only clicks` runs three into
docs/benchmarks.json and docs/benchmarks.md."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

from bench.app_server import AppServer
from training.sampling.generation import SamplingConfig

PROMPTS, K = 4, 4
ENGINES = ("vllm", "hf")  # the break-even's two sides
SIDES = (*ENGINES, "auto")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
TIMEOUT_MS = 600_000  # a first click on a busy machine took 86 s (issue 55); ten minutes is a failure, not a timing


def break_even(first: dict[str, float], second: dict[str, float], prompts: int = PROMPTS) -> float | None:
    """The job size (prompts) from which a cold vLLM engine is faster than generate, given each side's first and
    second click of `prompts` prompts; None where vLLM is not faster per prompt."""
    start = {e: first[e] - second[e] for e in ENGINES}
    per_prompt = {e: second[e] / prompts for e in ENGINES}
    gain = per_prompt["hf"] - per_prompt["vllm"]
    if gain <= 0:
        return None
    return max(0.0, (start["vllm"] - start["hf"]) / gain)


def _responses_shown(page, n: int) -> None:
    page.wait_for_function(
        "n => (document.querySelector('#store-counts')?.innerText || '').includes(`responses ${n} (`)",
        arg=n,
        timeout=TIMEOUT_MS,
    )


def _click(page, n_after: int) -> tuple[float, str]:
    """Seconds from the Sample click to the counts showing `n_after` responses, and the status line it left."""
    start = time.perf_counter()
    page.click("#sample")
    _responses_shown(page, n_after)
    seconds = time.perf_counter() - start
    return seconds, page.input_value("#data-status textarea")


def one_side(browser, engine: str) -> dict:
    """Start the app with `engine`, and time two Sample clicks of PROMPTS x K in chromium."""
    folder = Path(tempfile.mkdtemp(prefix="rlhf-bench-click-"))
    app = AppServer(str(folder / "store.duckdb"), env={"RLHF_ENGINE": "" if engine == "auto" else engine})
    page = browser.new_page()
    try:
        page.goto(app.page_url)
        page.wait_for_selector("#load-examples", timeout=60_000)
        page.click("#load-examples")
        page.wait_for_function(
            "() => /prompts [1-9]/.test(document.querySelector('#store-counts')?.innerText || '')", timeout=60_000
        )
        page.fill("input[aria-label='K responses per prompt']", str(K))
        page.fill("input[aria-label='At most this many prompts (0 = all pending)']", str(PROMPTS))
        first, line = _click(page, PROMPTS * K)
        if engine != "auto" and f"with {engine}" not in line:  # the figure would be mislabelled
            raise RuntimeError(f"the {engine} side sampled otherwise: {line}")
        second, second_line = _click(page, 2 * PROMPTS * K)
        return {"first_s": first, "second_s": second, "status": line, "second_status": second_line}
    except Exception as e:
        raise RuntimeError(f"{engine}: {e}\n{app.output()[-3000:]}") from None
    finally:
        page.close()
        app.stop()
        shutil.rmtree(folder, ignore_errors=True)


def run() -> list[dict]:
    """One repeat: both sides, vLLM first; one row for the comparison."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
        )
        try:
            sides = {side: one_side(browser, side) for side in SIDES}
        finally:
            browser.close()
    return [
        {
            "prompts": PROMPTS,
            "k": K,
            "max_new_tokens": SamplingConfig().max_new_tokens,  # the Sample button's (the app's default)
            **sides,
            "first_ratio": sides["hf"]["first_s"] / sides["vllm"]["first_s"],
            "second_ratio": sides["hf"]["second_s"] / sides["vllm"]["second_s"],
        }
    ]


def with_break_even(rows: list[dict]) -> list[dict]:
    """The rows (medians over repeats) with the job size where vLLM's start pays, from their median clicks."""
    out = []
    for r in rows:
        first = {e: r[e]["first_s"] for e in ENGINES}
        second = {e: r[e]["second_s"] for e in ENGINES}
        out.append({**r, "break_even_prompts": break_even(first, second, r["prompts"])})
    return out


def table(rows: list[dict]) -> list[str]:
    """The rows as the page's Markdown table (a ratio above 1: vLLM's click returns sooner); the auto column where
    the results have that side."""
    from bench.repeat import fig

    auto = all("auto" in r for r in rows)
    out = []
    for r in rows:
        sides = [e for e in SIDES if e != "auto" or auto]
        cells = {n: [fig(r, "{:.1f} s", e, f"{n}_s") for e in sides] for n in ("first", "second")}
        out += [
            f"| click ({r['prompts']} prompts x {r['k']}) | vLLM (pinned) | generate (pinned) | generate / vLLM |"
            + (" auto (the default) |" if auto else ""),
            "|---|---:|---:|---:|" + ("---:|" if auto else ""),
            f"| first (the model loads, the engine starts) | {cells['first'][0]} | {cells['first'][1]} | "
            f"{fig(r, '{:.2f}x', 'first_ratio')} |" + (f" {cells['first'][2]} |" if auto else ""),
            f"| second, at once (kept from the first) | {cells['second'][0]} | {cells['second'][1]} | "
            f"{fig(r, '{:.2f}x', 'second_ratio')} |" + (f" {cells['second'][2]} |" if auto else ""),
        ]
        n = r.get("break_even_prompts")
        out += [
            "",
            "- A cold vLLM engine is faster than generate from "
            + (
                f"{n:.0f} prompts x {r['k']} on (estimated from the median clicks, as linear in prompts, for "
                + (f"{r['max_new_tokens']} new tokens at most)." if "max_new_tokens" in r else "the button's length).")
                if n is not None
                else "no job size: vLLM was not faster per prompt."
            ),
        ]
    if not auto:
        out += ["- These results have no auto side (they predate it): `python -m bench.run --only clicks` adds it."]
    return out


if __name__ == "__main__":
    rows = with_break_even(run())
    print(json.dumps(rows, indent=2))
    print("\n".join(table(rows)))

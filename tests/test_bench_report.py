"""docs/benchmarks.md is rendered from the results file: each figure beside its peer's, the ratio as measured."""

import json

import pytest

from bench import report


def test_page_puts_each_figure_beside_its_peer_and_names_what_is_missing(tmp_path):
    results = {
        "machine": "x86_64, 2 cores, torch 2.13.0+cpu",
        "ran_at": {"ppo": "2026-11-29 12:00"},
        "ppo": [
            {
                "dtype": "bf16",
                "rlhf_studio": {"s_per_step": 7.5, "gen_share": 0.25, "peak_rss_mb": 7000.0},
                "trl": {"s_per_step": 15.0, "gen_share": 0.5, "peak_rss_mb": 8750.0},
                "speed_ratio": 2.0,
                "memory_ratio": 0.8,
            },
            {
                "dtype": "bf16",
                "shape": "default",
                "rlhf_studio": {"s_per_step": 9.0, "gen_share": 0.4, "peak_rss_mb": 7100.0, "decoded": 101.0},
                "trl": {"s_per_step": 27.0, "gen_share": 0.5, "peak_rss_mb": 9000.0, "decoded": 128.0},
                "speed_ratio": 3.0,
                "memory_ratio": 0.79,
            },
        ],
        "reward": [
            {
                "dtype": "fp32",
                "pairs": 384,
                "rlhf_studio": {"pairs_per_s": 5.0, "peak_rss_mb": 3000.0},
                "trl": {"pairs_per_s": 2.0, "peak_rss_mb": 4000.0},
                "speed_ratio": 2.5,
                "memory_ratio": 0.75,
            }
        ],
        "dpo": [
            {
                "shape": "ranking",
                "dtype": "bf16",
                "pairs": 192,
                "rlhf_studio": {"pairs_per_s": 6.0, "peak_rss_mb": 3500.0},
                "trl": {"pairs_per_s": 2.4, "peak_rss_mb": 4375.0},
                "speed_ratio": 2.5,
                "memory_ratio": 0.8,
            }
        ],
    }
    page = report.write(results, tmp_path / "benchmarks.md").read_text()
    assert "Precision: a bf16 row is bf16 as each side runs it: rlhf-studio's bf16 weights, fp32 master" in page
    assert "| fixed | bf16 | 7.50 | 15.00 | 2.00x | — / — | 25% / 50% | 7000 / 8750 | 0.80x |" in page
    assert "| default | bf16 | 9.00 | 27.00 | 3.00x | 101 / 128 | 40% / 50% | 7100 / 9000 | 0.79x |" in page
    assert "| fp32 | 384 | 5.00 | 2.00 | 2.50x | 3000 / 4000 | 0.75x |" in page
    assert "| ranking | bf16 | 192 | 6.00 | 2.40 | 2.50x | 3500 / 4375 | 0.80x |" in page
    # a section without its command, commit and CPU says it is not traceable
    assert "Ran 2026-11-29 12:00, before the results file recorded each section's command, commit and CPU" in page
    for missing in ("pairs", "sampling", "annotation"):
        assert f"python -m bench.run --only {missing}" in page
    # no GPU run in the file: the page says how one is made, and shows no GPU figure
    assert "No GPU run with its record" in page and "`bash bench/gpu_check.sh --record NOTE`" in page
    with_gpu = results | {"gpu": {"machine": "one H200", "rows": []}, "ran_at": {"gpu": "2026-11-30 21:25"}}
    assert "No GPU run" not in report.render(with_gpu) and "on one H200" in report.render(with_gpu)
    # the committed page is what the committed results render to
    committed = json.loads(report.RESULTS.read_text())
    assert report.PAGE.read_text() == report.render(committed)


def test_the_ppo_profile_gives_each_part_its_share_and_the_rest_as_other():
    parts = {"decode": 2.0, "actor_forward": 1.0, "reference_forward": 0.5, "actor_backward": 2.5}
    row = {
        "dtype": "fp32",
        "rlhf_studio": {"s_per_step": 8.0, "gen_share": 0.25, "peak_rss_mb": 7000.0, "parts": parts},
        "trl": {"s_per_step": 16.0, "gen_share": 0.5, "peak_rss_mb": 8750.0},
        "speed_ratio": 2.0,
        "memory_ratio": 0.8,
    }
    page = report.render({"machine": "m", "ppo": [row]})
    assert "| part | fp32 fixed s | share |" in page
    assert "| decode (sampling the responses) | 2.00 | 25% |" in page
    assert "| actor backward | 2.50 | 31% |" in page
    assert "| critic optimizer step | 0.00 | 0% |" in page  # not timed: shown as nothing, not left out
    assert "| other | 2.00 | 25% |" in page  # 8.0 - (2.0 + 1.0 + 0.5 + 2.5)
    assert "Memory per model" not in page  # a run from before the per-model figures
    memory = {"actor": 258.0, "actor_optimizer": 1548.5, "reference": 258.0, "critic": 205.2, "reward": 205.2}
    row["rlhf_studio"]["memory"] = {**memory, "critic_optimizer": 1231.0}
    page = report.render({"machine": "m", "ppo": [row]})
    assert "| model | fp32 fixed weights | optimizer |" in page
    assert "| actor | 258 | 1548 |" in page and "| critic | 205 | 1231 |" in page
    assert "| reference | 258 | - |" in page and "| reward model | 205 | - |" in page


def test_the_ppo_section_sets_vllm_rollouts_beside_the_own_decode_where_both_ran():
    own = {"s_per_step": 6.0, "gen_share": 0.3, "peak_rss_mb": 7000.0, "engine": "hf"}
    vllm = {"s_per_step": 8.0, "gen_share": 0.45, "peak_rss_mb": 9100.0, "engine": "vllm"}
    vllm["parts"] = {"weight_sync": 0.9}
    trl = {"s_per_step": 15.0, "gen_share": 0.35, "peak_rss_mb": 8500.0}
    row = {"dtype": "bf16", "shape": "fixed", "rlhf_studio": own, "trl": trl, "speed_ratio": 2.5, "memory_ratio": 0.82}
    assert "vLLM s/step" not in report.render({"machine": "m", "ppo": [row]})  # vLLM not installed: one arm
    row |= {"rlhf_studio_vllm": vllm, "rlhf_studio_own_decode": own, "engine_speed_ratio": 6.0 / 8.0}
    page = report.render({"machine": "m", "ppo": [row]})
    assert "| fixed | bf16 | 8.00 | 6.00 | 0.75x | 45% / 30% | 0.90 | 9100 / 7000 |" in page
    assert "what `auto` took here (the own decode)" in page


def test_the_rloo_section_sets_rloo_beside_ppo_on_the_same_tokens():
    from bench import report

    ppo = {"s_per_step": 10.0, "peak_rss_mb": 8000.0, "memory": {"actor": 500, "actor_optimizer": 1000, "critic": 500}}
    rloo = {"s_per_step": 8.0, "peak_rss_mb": 6000.0, "memory": {"actor": 500, "actor_optimizer": 1000}}
    row = {"dtype": "bf16", "ppo": ppo, "rloo": rloo, "speed_ratio": 10.0 / 8.0, "memory_ratio": 6000.0 / 8000.0}
    page = report.render({"machine": "m", "rloo": [row]})
    assert "## RLOO step against PPO's" in page and "4 prompts x k = 4" in page
    assert "| bf16 | PPO | 16 x 1 | 10.00 | 8000 | 2000 |" in page  # 500 + 1000 + 500
    assert "| bf16 | RLOO | 4 x 4 | 8.00 | 6000 | 1500 |" in page
    assert "| bf16 | ratio | | 1.25x faster | 0.75x the memory | |" in page


def test_a_section_names_the_command_commit_and_cpu_that_made_it_and_the_login_guesser():
    """Issue 51's benchmark row: the team beside the Compare hammer and the login guesser, each counted; the
    section's line names what made it (a results file written before provenance was kept says only when)."""
    row = {
        "annotators": 100,
        "think_s": 5.0,
        "submits_per_s": 16.2,
        "p50_ms": 58.0,
        "p95_ms": 146.0,
        "max_ms": 411.0,
        "handler_p50_ms": 47.0,
        "handler_p95_ms": 133.0,
        "app_cpu_ms_per_submit": 35.9,
        "generator_cpu": 0.08,
        "errors": 0,
        "stored_rankings": 2000,
        "stored_once": True,
        "chat_cpu_share": 0.16,
        "hammer": {"sent": 1611, "completed": 0, "refused": 1609, "failed": 0},
        "login_guesses": {"sent": 122, "checked": 10, "refused": 112, "other": 0},
        "login_guesses_per_s": 1.0,
    }
    made = {"command": "python -m bench.run --only annotation", "commit": "abc1234", "machine": "m", "cpu": "c"}
    results = {"machine": "m", "annotation": [row], "ran_at": {"annotation": "2026-12-06 18:00"}}
    page = report.render({**results, "provenance": {"annotation": made}})
    assert (
        "| 100 + 1 hammering Compare (1611 maximal requests sent: 0 answered, 1609 refused, 0 failed; the chat's "
        "child took 16% of a core) + 1 guessing logins (122 wrong logins, a fresh name every 1 s: 10 checked, 112 "
        "refused before the check, 0 other) | 5.0 s | 16.2 | 58 ms | 146 ms |"
    ) in page
    assert "Ran 2026-12-06 18:00 at commit abc1234, `python -m bench.run --only annotation`, on m (c); one run." in page
    assert "these figures are not traceable" in report.render(results)
    made["repeats"] = 3
    assert "on m (c); median of 3 runs." in report.render({**results, "provenance": {"annotation": made}})


def test_a_benchmark_run_three_times_is_its_median_with_each_runs_row_kept():
    from bench.repeat import median_of, repeated

    # figure by figure; the name is the first run's
    runs = [[{"case": "a", "s": 3.0, "parts": {"x": 1.0}}], [{"case": "a", "s": 1.0, "parts": {"x": 5.0}}]]
    runs.append([{"case": "a", "s": 2.5, "parts": {"x": 2.0}}])
    assert median_of(runs) == [{"case": "a", "s": 2.5, "parts": {"x": 2.0}}]
    measured = iter(runs)
    rows = repeated(lambda: next(measured), 3)
    assert rows[0]["s"] == 2.5 and [r["s"] for r in rows[0]["repeats"]] == [3.0, 1.0, 2.5]


def test_a_sitting_cut_between_runs_keeps_the_finished_ones_and_runs_only_the_rest(tmp_path):
    from bench.repeat import repeated

    keep, made = tmp_path / "partial" / "reward.jsonl", {"command": "python -m bench.run --only reward", "commit": "a"}
    calls = []

    def measure(values):
        def run():
            calls.append(len(calls))
            if not values:
                raise KeyboardInterrupt  # the sitting ends in this run
            return [{"s": values.pop(0)}]

        return run

    with pytest.raises(KeyboardInterrupt):
        repeated(measure([3.0]), 3, keep, made)  # one run done, the second cut
    assert len(keep.read_text().splitlines()) == 1
    with keep.open("a") as f:
        f.write('{"made": {"comm')  # a kill in the middle of a write: not a run
    calls.clear()
    rows = repeated(measure([1.0, 2.0]), 3, keep, made)  # the same command and commit: two runs more, not three
    assert len(calls) == 2 and [r["s"] for r in rows[0]["repeats"]] == [3.0, 1.0, 2.0] and rows[0]["s"] == 2.0
    assert not keep.exists()  # all three done: nothing kept for a next call
    # runs kept by another commit are dropped, never mixed in
    with pytest.raises(KeyboardInterrupt):
        repeated(measure([9.0]), 3, keep, made)
    calls.clear()
    rows = repeated(measure([1.0, 2.0, 4.0]), 3, keep, made | {"commit": "b"})
    assert len(calls) == 3 and [r["s"] for r in rows[0]["repeats"]] == [1.0, 2.0, 4.0]


def test_a_repeated_timing_shows_its_range_and_the_page_numbers_are_all_in_the_results():
    from bench.repeat import repeated
    from tests.page_numbers import not_in_source

    def one_run(s_ours: float, s_trl: float) -> list[dict]:
        ours = {"s_per_step": s_ours, "gen_share": 0.3, "peak_rss_mb": 7000.0, "decoded": 64}
        trl = {"s_per_step": s_trl, "gen_share": 0.4, "peak_rss_mb": 8000.0, "decoded": 64}
        return [
            {"dtype": "bf16", "rlhf_studio": ours, "trl": trl, "speed_ratio": s_trl / s_ours, "memory_ratio": 0.875}
        ]

    measured = iter([one_run(5.0, 10.0), one_run(4.0, 11.0), one_run(6.0, 9.0)])
    results = {"machine": "m", "ppo": repeated(lambda: next(measured), 3)}
    page = report.render(results)
    # the ratio is each run's own (2.00, 2.75, 1.50), not the ratio of the medians (10 / 5)
    assert "| fixed | bf16 | 5.00 (4.00-6.00) | 10.00 (9.00-11.00) | 2.00x (1.50x-2.75x) |" in page
    assert not_in_source(page, results) == []


def test_the_sample_click_section_times_both_engines_and_where_vllms_start_pays():
    from bench.repeat import repeated
    from bench.sample_click import break_even, with_break_even
    from tests.page_numbers import not_in_source

    # vLLM: a 36 s start and 1 s a prompt; generate: 8 s to load and 3 s a prompt. 8 + 3n = 36 + n from n = 14 on
    assert break_even({"vllm": 40.0, "hf": 20.0}, {"vllm": 4.0, "hf": 12.0}) == 14.0
    assert break_even({"vllm": 40.0, "hf": 20.0}, {"vllm": 12.0, "hf": 12.0}) is None  # not faster per prompt
    assert break_even({"vllm": 10.0, "hf": 20.0}, {"vllm": 4.0, "hf": 12.0}) == 0.0  # starts faster too

    def one_run(v_first: float, h_first: float) -> list[dict]:
        sides = {
            "vllm": {"first_s": v_first, "second_s": 4.0},
            "hf": {"first_s": h_first, "second_s": 12.0},
            "auto": {"first_s": h_first, "second_s": 13.0},
        }
        ratios = {"first_ratio": h_first / v_first, "second_ratio": 3.0}
        return [{"prompts": 4, "k": 4, **sides, **ratios}]

    measured = iter([one_run(40.0, 20.0), one_run(30.0, 22.0), one_run(50.0, 18.0)])
    rows = with_break_even(repeated(lambda: next(measured), 3))
    assert rows[0]["break_even_prompts"] == 14.0  # from the medians: 40 and 20 first, 4 and 12 second
    results = {"machine": "m", "clicks": rows}
    page = report.render(results)
    first = "| first (the model loads, the engine starts) | 40.0 s (30.0 s-50.0 s) | 20.0 s (18.0 s-22.0 s) |"
    assert first + " 0.50x (0.36x-0.73x) | 20.0 s (18.0 s-22.0 s) |" in page
    assert "| second, at once (kept from the first) | 4.0 s (4.0 s-4.0 s) | 12.0 s (12.0 s-12.0 s) |" in page
    assert page.count("| 13.0 s (13.0 s-13.0 s) |") == 1  # auto's second click
    assert "- A cold vLLM engine is faster than generate from 14 prompts x 4 on" in page
    assert not_in_source(page, results) == []


def test_the_training_benches_run_in_the_precisions_asked(monkeypatch):
    """--dtypes fp32 on a CPU without native bf16: every PPO shape in fp32, the default shape included; both
    precisions keep the shapes of before (the default shape in bf16); a precision the trainers lack is refused."""
    import sys

    from bench.run import parse_args, ppo_cases

    assert ppo_cases(("bf16", "fp32")) == (("fp32", "fixed"), ("bf16", "fixed"), ("bf16", "default"))
    assert ppo_cases(("fp32",)) == (("fp32", "fixed"), ("fp32", "default"))
    monkeypatch.setattr(sys, "argv", ["bench.run", "--only", "reward", "--dtypes", "fp32"])
    assert parse_args().dtypes == ("fp32",)
    monkeypatch.setattr(sys, "argv", ["bench.run"])
    assert parse_args().dtypes == ("bf16", "fp32")
    monkeypatch.setattr(sys, "argv", ["bench.run", "--dtypes", "fp16"])
    with pytest.raises(SystemExit):
        parse_args()

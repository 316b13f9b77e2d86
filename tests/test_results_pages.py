"""Every number on a rendered results page is in the results file it was rendered from (issue 53)."""

import json
from pathlib import Path

import pytest

from tests.page_numbers import not_in_source, printed_from

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _pages() -> list[tuple[Path, Path]]:
    pages = [(DOCS / "benchmarks.md", DOCS / "benchmarks.json")]
    for page in sorted((DOCS / "results").rglob("*.md")):
        name = {"report.md": "results.json", "seeds.md": "seeds.json", "trials.md": "trials.json"}.get(page.name)
        if name and page.with_name(name).exists():
            pages.append((page, page.with_name(name)))
    return pages


def test_every_rendered_results_page_is_found():
    names = {p.relative_to(DOCS).as_posix() for p, _ in _pages()}
    assert {
        "benchmarks.md",
        "results/demo-protocol/validation/seed100/report.md",
        "results/demo-protocol/validation/trials.md",
    } <= names
    assert len(names) >= 4


@pytest.mark.parametrize(
    "page,source", _pages(), ids=lambda p: p.relative_to(DOCS).as_posix() if isinstance(p, Path) else str(p)
)
def test_each_number_on_the_page_is_in_its_results_file(page, source):
    assert not_in_source(page.read_text(), json.loads(source.read_text())) == []


def test_a_figure_typed_into_a_page_is_found():
    data = {"win_rate": 0.7712, "ci": [0.721, 0.818], "ppo": {"actor": 256.5, "actor_optimizer": 1539.4}}
    page = "\n".join(
        [
            "| method | win rate | interval | MB |",
            "|---|---:|---:|---:|",
            "| PPO | 77.1% | 72.1%-81.8% | 1796 |",  # a percentage, an interval, a record's total
            "- actor: 'a sample saying 1789 is not a figure'",
            "- PASS  win rate >= 65%",
            "- PPO over the reference: 77.12% (95% CI 72.1%-81.8%), above 50%",
        ]
    )
    assert not_in_source(page, data) == []
    typed = page.replace("| 1796 |", "| 1796 | 93 ms |").replace("77.12%", "77.13%")
    assert not_in_source(typed, data) == [
        "line 3: 93 in '| 77.1% | 72.1%-81.8% | 1796 | 93 ms |'",
        "line 6: 77.13 in '- PPO over the reference: 77.13% (95% CI 72.1%-81.8%), above 50%'",
    ]


def test_a_figure_matches_only_at_the_precision_it_is_printed():
    assert printed_from("0.80", {0.8049})
    assert not printed_from("0.81", {0.8049})
    assert printed_from("1,558", {1558})
    assert printed_from("100.0", {1.058})  # an interval of a proportion, clipped
    assert printed_from("2.5", {2_512_000})  # printed in millions, as "2.5M"
    assert not_in_source("| K |\n|---|\n| 4 | 2.5M pairs/s | 1.37x |", {"rate": 2_512_000, "ratio": 1.3701}) == []
    assert not_in_source("| 4 | 2.6M pairs/s |", {"rate": 2_512_000}) == ["line 1: 2.6 in '| 2.6M pairs/s |'"]


def test_the_demo_reports_ppo_table_is_its_results_files_lists():
    from app.studies.demo_report import curve_table

    r = {"score_per_step": [0.25, 0.5], "kl_per_step": [0.0, None], "length_per_step": [31.04, 40.0]}
    assert curve_table(r).splitlines() == [
        "| step | mean score | KL to reference | length (tokens) |",
        "|---:|---:|---:|---:|",
        "| 1 | 0.250 | 0.000 | 31.0 |",
        "| 2 | 0.500 | missing | 40.0 |",
    ]
    del r["length_per_step"]  # a demo from before it recorded lengths: no column for them
    assert curve_table(r).splitlines()[0] == "| step | mean score | KL to reference |"
    assert not_in_source(curve_table(r), r) == []


# benchmark sections run before the results file recorded each section's command, commit and CPU
UNTRACEABLE_BENCHMARKS = {"reward", "dpo", "ppo", "rloo"}


def test_every_results_file_records_its_command_commit_date_and_cpu():
    for path in sorted((DOCS / "results").rglob("*.json")):
        name = path.relative_to(DOCS).as_posix()
        data = json.loads(path.read_text())
        if path.name in ("demo.json", "split.json") or not isinstance(data, dict):
            continue
        made = data.get("provenance") or {}
        assert {"command", "commit", "date", "machine", "cpu"} <= set(made), name
        assert made["command"].startswith(("rlhf ", "python -m bench.")) and made["commit"] != "unknown", (name, made)
    bench = json.loads((DOCS / "benchmarks.json").read_text())
    untraced = {name for name in bench.get("ran_at", {}) if name not in bench.get("provenance", {})}
    assert untraced <= UNTRACEABLE_BENCHMARKS, untraced

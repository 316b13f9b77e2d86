"""The quick rounds study (`rlhf demo --rounds`) end to end, over two seeds. A file of its own: the integration lane
runs a file on one worker, and this study (about three minutes here) runs beside the quick demo's, not after it."""

import json

import pytest

from tests.conftest import query


@pytest.mark.integration
def test_quick_rounds_study_spends_one_budget_in_one_round_or_two_in_each_of_two_seeds(tmp_path, capsys):
    from app.faces.cli import main

    flags = ["demo", "--quick", "--rounds", "2", "--label-budget", "24", "--n-prompts", "80", "--heldout", "16"]
    flags += ["--ppo-epochs", "2", "--select", "random", "--runs-dir", str(tmp_path)]  # one rule: 6 runs, not 8
    assert main(["--db", str(tmp_path / "unused.duckdb"), *flags, "--seeds", "2"]) == 0
    (top,) = [p for p in tmp_path.iterdir() if p.name.startswith("demo-")]
    # each seed a whole study; the two combined: each difference with its interval over the seeds
    combined = json.loads((top / "seeds.json").read_text())
    assert combined["study"] == "rounds" and combined["seeds"] == [0, 1]
    rows = {row["headline"]: row for row in combined["rows"]}
    diff = rows["2 rounds (random) minus 1 round: win rate over SFT"]
    seeds = [json.loads((top / f"seed-{s}" / "results.json").read_text()) for s in (0, 1)]
    wins = [[a["points"][-1]["win_rate"] for a in r["arms"]] for r in seeds]
    assert diff["values"] == pytest.approx([w[1] - w[0] for w in wins]) and diff["over_seeds"] is not None
    assert (top / "seeds.md").read_text().startswith("# The rounds study over 2 seeds")
    folder = top / "seed-0"
    r = seeds[0]
    arms = {a["name"]: a for a in r["arms"]}
    assert list(arms) == ["1 round", "2 rounds, random"]
    for arm in arms.values():
        labels = [p["labels"] for p in arm["points"]]
        assert labels == sorted(labels) and 18 <= labels[-1] <= 24 and len(labels) == arm["rounds"]
        assert all(0 <= p["rm_accuracy"] <= 1 and p["ci95"][0] <= p["win_rate"] <= p["ci95"][1] for p in arm["points"])
    # the two-round arm's store: round 2 sampled from round 1's actor (+ SFT), on 12 prompts chosen at random
    # (uncertain's order by score gap is tested through `rlhf round start` in tests/test_rounds.py)
    db = str(folder / "arm-1.duckdb")
    ((policy, previous),) = query(db, "SELECT policy, previous_policy FROM rounds WHERE round = 2")
    assert policy.endswith("/actor") and "ppo-" in policy and previous.endswith("models/actor")
    assert query(db, "SELECT count(*) FROM round_prompts WHERE round = 2") == [(12,)]
    assert [k for (k,) in query(db, "SELECT kind FROM runs ORDER BY created_at")] == ["reward", "ppo"] * 2
    # finished runs keep their models, not DeepSpeed's resume state (a full disk stopped a default-model study)
    runs = list((folder / "runs").iterdir())
    assert len(runs) == 6 and not list((folder / "runs").glob("*/checkpoints/**/latest"))
    assert all((r / "model").is_dir() or (r / "actor").is_dir() for r in runs)
    out, report = capsys.readouterr().out, (folder / "report.md").read_text()
    # the verdict the study's own numbers give: beat exactly when the rounds arm's win rate is higher
    v = r["answers"]["rounds_vs_one"]
    many, one = (arms[name]["points"][-1]["win_rate"] for name in ("2 rounds, random", "1 round"))
    assert v["win_rate"] == [many, one] and v["rounds_win"] == (many > one)
    verdict = f"2 rounds {'beat' if v['rounds_win'] else 'did not beat'} 1 round at {r['label_budget']} labels"
    assert verdict in out and verdict in report
    assert "2 rounds (random) minus 1 round: win rate over SFT: " in out and "over 2 seeds: " in out
    assert "(rounds.png)" in report and (folder / "rounds.png").read_bytes()[:4] == b"\x89PNG"

"""bench/ppo_curve.py's comparison: Welch's interval by hand."""

import pytest

from bench.ppo_curve import compare, welch_interval


def test_welch_interval_by_hand():
    # means 2 and 4; variances of the means 1/3 and 4/3; se = sqrt(5/3) = 1.2910;
    # df = (5/3)^2 / ((1/3)^2 / 2 + (4/3)^2 / 2) = 2.94 -> 2, t = 4.30, half width 5.551
    diff, lo, hi = welch_interval([1, 2, 3], [2, 4, 6])
    assert diff == pytest.approx(2.0)
    assert (lo, hi) == pytest.approx((2 - 5.5513, 2 + 5.5513), abs=1e-3)


def test_compare_reports_each_seed_and_both_differences():
    def seed(s, score, kl):
        return {"seed": s, "score": [score] * 20, "kl": [kl] * 10 + [kl + 0.1] * 10, "step_s": [5.0] * 20}

    old = [seed(0, 0.5, 0.0), seed(1, 0.7, 0.1)]
    new = [seed(0, 0.6, 0.2) | {"engine": "vllm"}, seed(1, 0.8, 0.3) | {"engine": "vllm"}]
    lines = compare(old, new)  # a result from before the engine was recorded is the hand-made decode's
    assert lines[0] == (
        "old seed 0: score 0.500 (steps 11-20 0.500), KL +0.050 (steps 11-20 +0.100), 5.00 s/step, rollouts by hf"
    )
    assert lines[2].startswith("new seed 0: score 0.600") and lines[2].endswith("rollouts by vllm")
    assert "score over 20 steps: new - old = +0.100" in lines[4]
    assert "kl over steps 11-20: new - old = +0.200" in lines[7]


def test_a_run_file_records_what_made_it_and_compare_reads_files_from_before(tmp_path, monkeypatch):
    """`run` writes {"provenance", "seeds"} after each seed (command, commit, date, machine, CPU); `compare` reads
    that and a bare list of seeds as files written before the record."""
    import json
    import sys

    import bench.ppo
    import bench.ppo_curve as curve

    monkeypatch.setattr("app.jobs.provenance.commit", lambda: "abc1234")  # no git process in the fast lane
    monkeypatch.setattr(bench.ppo, "workload", lambda work: {"prompts": "p"})
    monkeypatch.setattr(
        curve, "run_seed", lambda w, s, tmp, m, e: {"seed": s, "score": [s] * 20, "kl": [0.0] * 20, "step_s": [1] * 20}
    )
    monkeypatch.setattr(sys, "argv", ["ppo_curve", "run", "--seeds", "3", "4", "--out", "x.json"])
    out = tmp_path / "new.json"
    curve.run([3, 4], out)
    data = json.loads(out.read_text())
    assert data["provenance"]["command"] == "python -m bench.ppo_curve run --seeds 3 4 --out x.json"
    assert data["provenance"]["commit"] == "abc1234" and {"date", "machine", "cpu"} <= set(data["provenance"])
    assert [r["seed"] for r in data["seeds"]] == [3, 4] == [r["seed"] for r in curve.seeds_of(out)]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data["seeds"]))
    assert curve.seeds_of(old) == data["seeds"]
    assert "score over 20 steps: new - old = +0.000" in compare(curve.seeds_of(old), curve.seeds_of(out))[4]

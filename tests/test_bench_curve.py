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

"""app/studies/demo_samples.py by hand: every trained policy with one sample against best-of-N, the verdict, and
the per-seed headlines it adds."""

import pytest

from app.studies.demo_samples import best_of_rows, one_sample_verdict, policy_rows, samples_table
from app.studies.demo_seeds import one_sample_headlines


def results(online_dpo: float = 0.74, online_ci=(0.70, 0.78)) -> dict:
    point = lambda n, kl, w, ci, off: {"n": n, "kl": kl, "win_rate": w, "ci95": list(ci), "off_topic": off}  # noqa: E731
    return {
        "win_rate": 0.70,
        "win_rate_ci95": [0.66, 0.74],
        "kl_per_step": [0.0, 2.0, 3.0],
        "ppo_steps": 3,
        "off_topic_actor": 0.2,
        "off_topic_reference": 0.1,
        "checkpoints": [{"step": 3, "chosen": True, "kl": 2.5, "win_rate": 0.70}],
        "dpo_vs_reference": {"win_rate": 0.6, "ci95": [0.55, 0.65]},
        "dpo_point": {"kl": 5.0},
        "off_topic_dpo": 0.3,
        "online_dpo_vs_reference": {"win_rate": online_dpo, "ci95": list(online_ci)},
        "online_dpo_kl": 1.5,
        "off_topic_online_dpo": 0.05,
        "best_of_n": [point(1, 0.0, 0.5, (0.45, 0.55), 0.1), point(16, 1.8351, 0.72, (0.69, 0.75), 0.12)],
    }


def test_the_rows_name_samples_kl_and_win_rate_of_each_policy_and_each_n():
    r = results()
    assert [(p["name"], p["samples"], p["kl"], p["win_rate"]) for p in policy_rows(r)] == [
        ("PPO", 1, 2.5, 0.70),  # its last checkpoint's KL; the kept checkpoint is that one: one row
        ("DPO", 1, 5.0, 0.6),
        ("Online DPO", 1, 1.5, 0.74),
    ]
    assert [(b["name"], b["samples"], b["kl"]) for b in best_of_rows(r)] == [
        ("best-of-1", 1, 0.0),
        ("best-of-16", 16, 1.8351),
    ]
    table = samples_table(r)
    assert (
        "|best-of-16|16|1.84|72.0%|69.0%-75.0%|12.0%|" in table
        and "|Online DPO|1|1.50|74.0%|70.0%-78.0%|5.0%|" in table
    )
    assert "|reference|1|0.00|50.0% (itself)|n/a|10.0%|" in table


@pytest.mark.parametrize(
    "win, ci, verdict",
    [
        (0.74, (0.70, 0.78), "within"),  # 0.70 < 0.72 and 0.69 < 0.74: each inside the other's reach
        (0.80, (0.76, 0.84), "above"),  # the policy's interval clears best-of-16's 72%
        (0.60, (0.55, 0.65), "below"),  # best-of-16's interval (69-75%) clears 60%
    ],
)
def test_the_verdict_names_the_recommended_method_never_the_best_row(win, ci, verdict):
    r = {**results(win, ci), "config": {"recommend": "online_dpo"}}
    v = one_sample_verdict(r)
    assert (v["policy"], v["method"], v["best_of"], v["verdict"]) == ("Online DPO", "online_dpo", "best-of-16", verdict)
    assert v["difference"] == pytest.approx(win - 0.72)
    # a demo from before `recommend` existed names PPO, even where another row is higher
    assert one_sample_verdict(results(0.9, (0.85, 0.95)))["policy"] == "PPO"
    assert one_sample_verdict({**r, "config": {"recommend": "rloo"}}) == {}  # no RLOO in this demo


def test_the_seeds_get_each_policys_one_sample_minus_best_of_16_and_the_off_topic_shares():
    h = one_sample_headlines(results())
    assert h["Online DPO (1 sample) minus best-of-16"][0] == pytest.approx(0.02)
    assert h["PPO (1 sample) minus best-of-16"][0] == pytest.approx(-0.02)
    assert h["off-topic share: reference"] == (0.1, None) and h["off-topic share: best-of-16"] == (0.12, None)
    assert h["off-topic share: Online DPO"] == (0.05, None)
    assert one_sample_headlines({**results(), "best_of_n": []}) == {}


def test_a_run_with_no_checkpoints_shows_its_last_training_steps_kl():
    r = {**results(), "checkpoints": []}
    assert policy_rows(r)[0]["kl"] == 3.0  # kl_per_step[-1]
    r["online_dpo_checkpoints"] = [{"step": 2, "kl": 0.4}, {"step": 3, "kl": 0.9}]
    assert policy_rows(r)[-1]["kl"] == 0.9

"""Settings tried on validation side by side (app/studies/demo_trials.py): rows, the protocol's choice, refusals."""

import json

import pytest

from app.studies.demo_trials import choose, compare_trials, report
from store.errors import UserError


@pytest.fixture(autouse=True)
def _no_git(monkeypatch):
    """The results files record the checkout's commit by running git; the fast lane starts no process."""
    monkeypatch.setattr("app.jobs.provenance.commit", lambda: "abc1234")


def demo(folder: str, ppo: float, online: float, off_online: float, kept=None, **config) -> dict:
    """A validation demo's results.json, reduced to what the trials table reads."""
    r = {
        "folder": folder,
        "config": {"seed": 100, "evaluate_on": "validation", "online_dpo_lr": 5e-6, **config},
        "win_rate": ppo,
        "win_rate_ci95": [ppo - 0.05, ppo + 0.05],
        "kl_per_step": [0.0, 6.0],
        "off_topic_actor": 0.2,
        "off_topic_reference": 0.15,
        "online_dpo_vs_reference": {"win_rate": online, "ci95": [online - 0.04, online + 0.04]},
        "online_dpo_kl": 2.0,
        "off_topic_online_dpo": off_online,
        "best_of_n": [
            {"n": 1, "kl": 0.0, "win_rate": 0.5},
            {"n": 16, "kl": 1.84, "win_rate": 0.78, "ci95": [0.71, 0.84]},
        ],
    }
    if kept is not None:
        r["forked"] = {"from": "runs/base", "kept": kept}
    return r


def test_a_fork_lists_only_what_it_trained_and_the_choice_respects_off_topic():
    base = demo("runs/base", 0.55, 0.70, 0.14)
    fork = demo("runs/fork", 0.55, 0.74, 0.18, kept=["set-up", "sampling", "reward", "ppo"], online_dpo_lr=2e-5)
    fork["config"]["rloo_settings"] = ""  # a setting the base demo predates, at its default: no change
    t = compare_trials([base, fork])
    assert [(r["trial"], r["method"]) for r in t["rows"]] == [
        ("base", "ppo"),
        ("base", "online_dpo"),
        ("fork", "online_dpo"),
    ]
    fork_row = t["rows"][2]
    assert fork_row["changes"] == {"online_dpo_lr": 2e-5}
    assert fork_row["minus_best_of"] == pytest.approx(0.74 - 0.78)
    # the fork's 74% is off-topic 18% > the reference's 15%: the choice is the base's online DPO at 70%
    assert (t["chosen"]["trial"], t["chosen"]["method"], t["chosen"]["win_rate"]) == ("base", "online_dpo", 0.70)
    md = report(t)
    assert "|fork|`--online-dpo-lr 2e-05`|Online DPO|74.0%|70.0%-78.0%|2.00|18.0%|-4.0 pts|" in md
    assert (
        "Chosen (the highest one-sample win rate with off-topic no higher than the reference's): Online DPO from base"
        in md
    )
    assert choose(t["rows"], None) is None  # no reference share: nothing can be shown to be no worse


def test_trials_on_the_test_split_or_of_another_demo_are_refused(tmp_path, capsys):
    from app.faces.cli import main

    with pytest.raises(UserError, match="chosen on the validation split only"):
        compare_trials([demo("runs/base", 0.5, 0.6, 0.1, evaluate_on="test")])
    stray = demo("runs/other", 0.5, 0.6, 0.1, kept=["set-up"])
    stray["forked"]["from"] = "runs/elsewhere"
    with pytest.raises(UserError, match="not a fork of a demo given here"):
        compare_trials([demo("runs/base", 0.5, 0.6, 0.1), stray])
    for name, r in (("base", demo("runs/base", 0.55, 0.70, 0.14)),):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(r))
    assert main(["demo-trials", str(tmp_path / "base"), "--out", str(tmp_path / "o")]) == 0
    assert "chosen on validation: Online DPO from base" in capsys.readouterr().out
    assert json.loads((tmp_path / "o" / "trials.json").read_text())["chosen"]["method"] == "online_dpo"

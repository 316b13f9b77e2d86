"""The trainer registry: every run's config.json names its kind, and what reads runs asks the registry."""

import json

import pytest

from training.ppo.config import PPOConfig
from training.registry import TRAINERS, kind_of, step_rows, trainer
from training.reward.config import RewardConfig


def test_a_saved_config_records_its_kind_and_loads_back(tmp_path):
    for cfg in (RewardConfig(model="m"), PPOConfig(reward="r")):
        path = tmp_path / f"{cfg.KIND}.json"
        cfg.save(path)
        assert json.loads(path.read_text())["kind"] == cfg.KIND
        assert type(cfg).load(path) == cfg
        run = tmp_path / f"run-{cfg.KIND}"
        run.mkdir()
        cfg.save(run / "config.json")
        assert kind_of(run) == cfg.KIND


def test_a_run_from_before_a_setting_was_retired_still_loads_and_an_unknown_one_does_not(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"kind": "ppo", "reward": "r", "watch_patience": 5}))  # the step-wise alarm's
    assert PPOConfig.load(path) == PPOConfig(reward="r")
    path.write_text(json.dumps({"kind": "ppo", "reward": "r", "watch_patiense": 5}))
    with pytest.raises(ValueError, match="unknown setting 'watch_patiense'"):
        PPOConfig.load(path)


def test_a_config_of_another_kind_is_refused_in_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"kind": "ppo", "model": "m"}))  # a reward setting, but a PPO run's kind
    with pytest.raises(ValueError, match="this is the config of a 'ppo' run, not of a 'reward' run"):
        RewardConfig.load(path)


def test_runs_made_before_kinds_were_recorded_are_still_told_apart(tmp_path):
    for name, config, kind in (
        ("old-ppo", {"actor": "default", "reward": "r"}, "ppo"),
        ("old-rm", {"model": "m"}, "reward"),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        assert kind_of(tmp_path / name) == kind
    with pytest.raises(ValueError, match="not a run folder"):
        kind_of(tmp_path / "missing")
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps({"kind": "no-such-trainer"}))
    with pytest.raises(ValueError, match="unknown trainer 'no-such-trainer'"):
        kind_of(tmp_path / "odd")


def test_step_rows_keep_one_row_per_step_and_the_last_of_a_resumed_step():
    rows = [
        {"event": "start"},
        {"step": 1, "loss/actor": 0.5},
        {"step": 2, "loss/actor": 0.4},
        {"event": "resumed", "step": 1},
        {"step": 2, "loss/actor": 0.3},  # step 2 again after a resume from step 1's checkpoint
        {"step": 2, "event": "final", "reward/score_mean": 1.0},
    ]
    assert step_rows("ppo", rows) == [{"step": 1, "loss/actor": 0.5}, {"step": 2, "loss/actor": 0.3}]


def test_headlines_and_progress_lines_by_hand():
    assert trainer("reward").headline({"eval/rm_accuracy": 0.8754}) == "eval accuracy 0.875"
    assert trainer("ppo").headline({"reward/score_mean": 1.23456, "reward/kl": 0.5}) == "score 1.235, KL 0.500"
    assert trainer("ppo").headline({}) == "" and trainer("reward").progress({"event": "start"}) is None
    row = {"step": 3, "loss/rm": 0.5, "rm/train_accuracy": 0.75, "perf/pairs_per_s": 12.34}
    assert trainer("reward").progress(row) == "step 3: loss 0.5000, train accuracy 0.750, 12.3 pairs/s"
    assert [t.kind for t in TRAINERS.values() if not t.policy] == ["reward"]  # every other trainer makes a policy
    with pytest.raises(ValueError, match="unknown trainer"):
        trainer("nope")

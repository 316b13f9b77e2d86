"""The Train tab's functions without a browser: reward model then PPO on tiny models, what the runs table, plots,
log and samples show, an app restart, a run killed with kill -9, and one config file launching identically from
the CLI and the app."""

import json
import os
import signal
import time
from pathlib import Path

import pytest

from store.errors import UserError
from tests.builders import build_liked_token_rm, separable_pairs
from tests.conftest import write_jsonl


def wait_for(predicate, timeout: float = 300, what: str = ""):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


@pytest.mark.integration
def test_reward_model_then_ppo_and_what_the_tab_shows(db, tmp_path, tiny_model_dir):
    from app.jobs.train_view import PPO_PLOTS, RM_PLOTS, Runs, log_tail, plot_frames, runs_rows, samples_rows
    from training.ppo.config import PPOConfig
    from training.reward.config import RewardConfig

    pairs = write_jsonl(tmp_path / "pairs.jsonl", separable_pairs(64))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(f"Question {i}" for i in range(16)))
    released = []
    runs = Runs(db, tmp_path / "runs", on_launch=lambda: released.append(1))
    rm = RewardConfig(model=str(tiny_model_dir), max_steps=4, lr=1e-3, eval_fraction=0.25)
    ppo = PPOConfig(actor=str(tiny_model_dir), max_steps=2, max_new_tokens=8)
    rm_run = runs.start_chain(rm, ppo, str(pairs), str(prompts))

    def ppo_finished():
        rows = runs_rows(db)
        return len(rows) == 2 and all(r[3] == "finished" for r in rows)

    wait_for(ppo_finished, what="both runs to finish")
    rows = runs_rows(db)
    ppo_row, rm_row = rows  # newest first
    assert (rm_row[1], ppo_row[1]) == ("reward", "ppo")
    assert rm_row[6] == str(rm_run.resolve()) and "eval accuracy" in rm_row[5]
    assert ppo_row[4] == "2/2" and ppo_row[5].startswith("score ")
    ppo_run = Path(ppo_row[6])
    assert json.loads((ppo_run / "config.json").read_text())["reward"] == str((rm_run / "model").resolve())
    assert len(released) == 2  # the app's models were freed before each launch
    rm_plots, ppo_plots = plot_frames(rm_run), plot_frames(ppo_run)
    assert list(rm_plots) == list(RM_PLOTS) and rm_plots["loss/rm"] and rm_plots["eval/rm_accuracy"]
    # no held-out judge (one reward model) and no evaluated checkpoints here: those plots are left out
    logged = [k for k in PPO_PLOTS if not k.startswith(("watch/heldout", "checkpoint/"))]
    assert list(ppo_plots) == logged and all(len(v) == 2 for v in ppo_plots.values())
    assert samples_rows(ppo_run) and "deepspeed" in log_tail(ppo_run).lower()
    # an app restart: a new process reads the same table from the store and the run folders
    assert runs_rows(db) == rows


@pytest.mark.integration
def test_a_run_killed_with_kill_9_shows_as_failed_and_resumes(db, tmp_path, tiny_model_dir):
    from app.jobs.train_view import Runs, runs_rows
    from training.reward.config import RewardConfig
    from training.runs import read_metrics

    pairs = write_jsonl(tmp_path / "pairs.jsonl", separable_pairs(96))
    runs = Runs(db, tmp_path / "runs")
    run = runs.start(RewardConfig(model=str(tiny_model_dir), max_steps=40, save_every=2), str(pairs))
    wait_for(lambda: any(r.get("step", 0) >= 3 and "loss/rm" in r for r in read_metrics(run)), what="step 3")
    # one training at a time: a second start (this app's, or another app's on the same store) is refused
    for starter in (runs, Runs(db, tmp_path / "runs")):
        with pytest.raises(UserError, match=f"run {run.name} is running: one training at a time here"):
            starter.start(RewardConfig(model=str(tiny_model_dir), max_steps=1), str(pairs))
    assert len(list((tmp_path / "runs").iterdir())) == 1  # no run folder made for the refused start
    os.killpg(runs.procs[run].pid, signal.SIGKILL)
    wait_for(lambda: runs_rows(db)[0][3] == "failed", timeout=30, what="failed")
    runs.resume(run)
    wait_for(lambda: runs_rows(db)[0][3] == "finished", what="the resumed run")
    assert any(r.get("event") == "resumed" for r in read_metrics(run))


@pytest.mark.integration
def test_one_config_file_launches_identically_from_the_cli_and_the_app(cli, db, tmp_path, tiny_model_dir):
    from app.faces.config_form import config_from_form, form_values_from_file
    from app.faces.train_tab import PPO_SKIP
    from app.jobs.train_view import Runs, runs_rows
    from training.ppo.config import PPOConfig

    rm = build_liked_token_rm(tiny_model_dir, tmp_path / "rm")
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(f"prompt {i}" for i in range(8)))
    config = tmp_path / "ppo.json"
    PPOConfig(actor=str(tiny_model_dir), reward=str(rm), max_steps=1, max_new_tokens=4, kl_ctl=0.05, top_k=7).save(
        config
    )
    # the CLI
    code, out, err = cli("train-ppo", "--config", str(config), "--prompts", str(prompts), "--runs-dir", str(tmp_path))
    assert code == 0, err
    # the app: the Load-config upload fills the form, the button builds the config from the form and launches
    cfg = config_from_form(PPOConfig, PPO_SKIP, form_values_from_file(PPOConfig, PPO_SKIP, config))
    Runs(db, tmp_path).start(cfg, str(prompts))
    wait_for(lambda: [r[3] for r in runs_rows(db)] == ["finished", "finished"], what="both runs")
    app_run, cli_run = (Path(r[6]) for r in runs_rows(db))
    a = json.loads((app_run / "config.json").read_text())
    b = json.loads((cli_run / "config.json").read_text())
    assert a.pop("output_dir") != b.pop("output_dir")
    assert a == b and a["kl_ctl"] == 0.05 and a["top_k"] == 7
    # a flag given on the command line still wins over the file
    from app.faces.cli import parse
    from app.faces.config_args import dataclass_from_args

    args = parse(["--db", db, "train-ppo", "--config", str(config), "--top-k", "3"])
    assert dataclass_from_args(PPOConfig, args).top_k == 3 and dataclass_from_args(PPOConfig, args).kl_ctl == 0.05


def test_the_chain_refuses_a_bad_prompts_file_before_the_reward_model_trains(db, tmp_path, tiny_model_dir):
    import pytest

    from app.jobs.train_view import Runs
    from store.errors import UserError
    from training.ppo.config import PPOConfig
    from training.reward.config import RewardConfig

    pairs = write_jsonl(tmp_path / "pairs.jsonl", separable_pairs(16))
    bad = tmp_path / "prompts.xlsx"
    bad.write_text("prompt\nhi\n")
    runs = Runs(db, tmp_path / "runs")
    rm, ppo = RewardConfig(model=str(tiny_model_dir), max_steps=1), PPOConfig(actor=str(tiny_model_dir))
    with pytest.raises(UserError, match="xlsx"):
        runs.start_chain(rm, ppo, str(pairs), str(bad))
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())  # no reward run started


def test_the_one_click_path_offers_every_trainer_on_prompts_and_names_it_on_the_button():
    from app.faces.train_tab import CHAIN_DEFAULT, chain_choices, chain_label

    assert chain_choices() == [("PPO", "ppo"), ("RLOO", "rloo"), ("Online DPO", "online_dpo")]
    assert chain_label(CHAIN_DEFAULT) == "Reward model then RLOO" and chain_label("online_dpo").endswith("Online DPO")


@pytest.mark.integration
def test_reward_model_then_online_dpo_from_one_call(db, tmp_path, tiny_model_dir):
    from app.faces.train_tab import start_run
    from app.jobs.train_view import Runs, runs_rows
    from training.online_dpo.config import OnlineDPOConfig
    from training.registry import TRAINERS
    from training.reward.config import RewardConfig

    pairs = write_jsonl(tmp_path / "pairs.jsonl", separable_pairs(64))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(f"Question {i}" for i in range(16)))
    runs = Runs(db, tmp_path / "runs")
    rm = RewardConfig(model=str(tiny_model_dir), max_steps=2, lr=1e-3, eval_fraction=0.25)
    odpo = OnlineDPOConfig(actor=str(tiny_model_dir), max_steps=2, max_new_tokens=8, generation_batch_size=2)
    rm_run = runs.start_chain(rm, odpo, str(pairs), str(prompts))
    wait_for(lambda: len(runs_rows(db)) == 2 and all(r[3] == "finished" for r in runs_rows(db)), what="both runs")
    kinds = sorted(r[1] for r in runs_rows(db))
    assert kinds == ["online_dpo", "reward"] and rm_run.name.startswith("rm-")
    with pytest.raises(UserError, match="a trainer on prompts, not 'dpo'"):
        start_run(runs, {kind: [] for kind in TRAINERS}, "chain", str(pairs), str(prompts), "dpo", False)


@pytest.mark.parametrize("kind, output", [("dpo", "policy"), ("ppo", "actor"), ("rloo", "actor"), ("reward", "model")])
def test_a_finished_runs_status_line_names_the_folder_its_trainer_saves(tmp_path, kind, output):
    from app.jobs.train_view import status_line

    run = tmp_path / f"{kind}-run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"kind": kind}))
    (run / "status.json").write_text(json.dumps({"state": "finished", "step": 4, "total_steps": 4}))
    assert status_line(run).endswith(f"output: {run / output}")

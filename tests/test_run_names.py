"""A run is named by its id, and only runs the store recorded under --runs-dir are accepted (app/jobs/training.py::
recorded_run): a folder planted on the disk is never resumed (DeepSpeed would unpickle its checkpoint files), stopped
or shown, whether through the app's endpoints or the CLI."""

import pytest

from app.jobs.training import prepare_pairs_run
from bench.app_server import AppServer
from tests.builders import separable_pairs
from tests.conftest import write_jsonl
from training.reward.config import RewardConfig


def _planted(folder) -> str:
    """A folder that looks like a run: a config, a log with something to read, a checkpoint to unpickle."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"kind": "reward", "model": "default"}')
    (folder / "train.log").write_text("SECRET from the planted log\n")
    (folder / "checkpoints").mkdir()
    (folder / "checkpoints" / "latest").write_text("step4")
    return str(folder)


@pytest.fixture
def recorded(db, tmp_path, tiny_model_dir):
    """A run the store recorded under tmp/runs (prepared, not launched), and one it recorded under another folder."""
    pairs = str(write_jsonl(tmp_path / "pairs.jsonl", separable_pairs(16)))
    cfg = RewardConfig(model=str(tiny_model_dir), max_steps=1)
    ours = prepare_pairs_run(db, cfg, tmp_path / "runs", pairs)
    elsewhere = prepare_pairs_run(db, cfg, tmp_path / "elsewhere", pairs)
    return ours, elsewhere


@pytest.mark.integration
def test_the_train_tab_takes_recorded_run_ids_only(db, tmp_path, recorded):
    ours, elsewhere = recorded
    planted = _planted(tmp_path / "runs" / "planted")
    app = AppServer(db, "--runs-dir", str(tmp_path / "runs"))
    try:
        client = app.client()
        for endpoint in ("/resume_run", "/stop_run"):
            with pytest.raises(Exception, match="no run '.*planted' in the store: name one `rlhf runs` lists"):
                client.predict(planted, api_name=endpoint)
            with pytest.raises(Exception, match=f"run {elsewhere.name} is not under the runs folder"):
                client.predict(elsewhere.name, api_name=endpoint)
        # the id names our run: it resolves (and is not running, so there is nothing to stop)
        with pytest.raises(Exception, match=f"run {ours.name} is not running"):
            client.predict(ours.name, api_name="/stop_run")
        _, status, _, log, *_ = client.predict(planted, api_name="/refresh")
        assert status == "" and "SECRET" not in log
        _, status, *_ = client.predict(ours.name, api_name="/refresh")
        assert status.startswith(f"**{ours.name}**")
        with pytest.raises(Exception, match="no run 'planted' in the store"):
            client.predict("planted", 2, 0, "random", 0, api_name="/start_round")
    finally:
        app.stop()
    assert not (tmp_path / "runs" / "planted" / "status.json").exists()  # never launched


def test_the_cli_takes_recorded_runs_only(cli, tmp_path, recorded):
    ours, _ = recorded
    planted = _planted(tmp_path / "runs" / "planted")
    runs = ["--runs-dir", str(tmp_path / "runs")]
    for args in (["train-rm", "--resume", planted], ["train-ppo", "--resume", planted], ["stop", planted]):
        code, _, err = cli(*args, *runs)
        assert code == 1 and err.strip().endswith("in the store: name one `rlhf runs` lists"), (args, err)
        assert len(err.strip().splitlines()) == 1
    code, _, err = cli("stop", ours.name)  # default --runs-dir ./runs: not where this run lives
    assert code == 1 and "is not under the runs folder runs" in err
    code, _, err = cli("stop", ours.name, *runs)
    assert code == 1 and f"run {ours.name} is" in err and "not running" in err
    assert not (tmp_path / "runs" / "planted" / "status.json").exists()


def test_a_run_whose_pid_went_to_another_process_reads_as_failed_in_the_cli(cli, tmp_path, recorded):
    """A dead run's pid handed by the OS to a live process (here this test's own) kept `rlhf runs` saying
    "running" for good, and `rlhf stop` asking a stranger to stop; the start time recorded beside the pid tells."""
    import json
    import os

    from training.runs import process_start

    ours, _ = recorded
    me, runs = os.getpid(), ["--runs-dir", str(tmp_path / "runs")]
    for ticks, state in ((process_start(me), "running"), (process_start(me) + 1, "failed")):
        status = {"state": "running", "step": 2, "total_steps": 8, "pid": me, "pid_start_ticks": ticks}
        (ours / "status.json").write_text(json.dumps(status))
        code, out, _ = cli("runs")
        (line,) = [line for line in out.splitlines() if line.startswith(ours.name)]
        assert code == 0 and f"  {state}" in line and "step 2/8" in line, line
    assert "failed (the training process is gone (killed or crashed))" in line
    code, _, err = cli("stop", ours.name, *runs)
    assert code == 1 and f"run {ours.name} is failed, not running" in err


@pytest.mark.integration
def test_the_train_tab_starts_nothing_while_a_recorded_run_is_running(db, tmp_path, tiny_model_dir, recorded):
    """One training at a time: while the store records a live run (here one the CLI could have started: its status
    names this test's process), the app's start and resume refuse with one line and launch nothing."""
    import json
    import os

    from training.runs import process_start

    ours, _ = recorded
    me = os.getpid()
    (ours / "status.json").write_text(json.dumps({"state": "running", "pid": me, "pid_start_ticks": process_start(me)}))
    pairs = str(write_jsonl(tmp_path / "more.jsonl", separable_pairs(16)))
    second = prepare_pairs_run(db, RewardConfig(model=str(tiny_model_dir), max_steps=1), tmp_path / "runs", pairs)
    app = AppServer(db, "--runs-dir", str(tmp_path / "runs"))
    try:
        with pytest.raises(Exception, match=f"run {ours.name} is running: one training at a time here"):
            app.client().predict(second.name, api_name="/resume_run")
    finally:
        app.stop()
    assert not (second / "status.json").exists() and not (second / "train.log").exists()  # never launched

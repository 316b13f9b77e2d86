"""A run's status.json names its process by pid and start time: once the process is gone the run reads as failed,
even when the OS has handed its pid to another process (a pid alone would keep the dead run 'running' forever)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

import training.runs
from training.runs import RunFiles, effective_status, pid_record, process_start

GONE = "the training process is gone (killed or crashed)"
needs_proc = pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/stat").is_file(), reason="start times come from /proc")


def status_of(folder: Path, **status) -> dict:
    (folder / "status.json").write_text(json.dumps({"state": "running", "step": 3, **status}))
    return effective_status(folder)


@needs_proc
def test_a_live_pid_with_another_start_time_is_a_reused_pid_and_the_run_is_gone(tmp_path):
    me = os.getpid()
    assert status_of(tmp_path, pid=me, pid_start_ticks=process_start(me))["state"] == "running"
    reused = status_of(tmp_path, pid=me, pid_start_ticks=process_start(me) + 1)
    assert reused["state"] == "failed" and reused["error"] == GONE and reused["step"] == 3
    assert status_of(tmp_path, pid=me, pid_start_ticks="soon")["state"] == "failed"


@pytest.mark.integration
@needs_proc
def test_a_child_started_after_the_run_reads_as_another_process(tmp_path):
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert status_of(tmp_path, **pid_record(child.pid))["state"] == "running"
        assert status_of(tmp_path, pid=child.pid, pid_start_ticks=process_start(os.getpid()) - 1)["state"] == "failed"
    finally:
        child.kill()
        child.wait()
    assert status_of(tmp_path, **pid_record(child.pid))["state"] == "failed"


def test_a_status_from_before_start_times_or_without_proc_checks_the_pid_alone(tmp_path, monkeypatch):
    me = os.getpid()
    assert status_of(tmp_path, pid=me)["state"] == "running"  # written by an older rlhf-studio
    assert status_of(tmp_path, pid=me, pid_start_ticks=None)["state"] == "running"
    monkeypatch.setattr(training.runs, "_proc_stat", lambda pid: None)  # no /proc (macOS)
    assert process_start(me) is None
    assert status_of(tmp_path, pid=me, pid_start_ticks=12345)["state"] == "running"
    assert status_of(tmp_path, pid=2**22 + 1)["state"] == "failed"  # above Linux's pid_max: no such process


@needs_proc
def test_rank_0_records_its_start_time_with_its_pid(tmp_path):
    RunFiles(tmp_path).status("running", step=1)
    status = json.loads((tmp_path / "status.json").read_text())
    assert (status["pid"], status["pid_start_ticks"]) == (os.getpid(), process_start(os.getpid()))
    assert effective_status(tmp_path)["state"] == "running"

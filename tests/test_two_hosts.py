"""README's scaling path run for real: two hosts (network namespaces with an sshd each, tests/two_hosts.py), a
DeepSpeed hostfile naming both, one rank on each, the run folder on the filesystem both see. A reward model and PPO
at ZeRO-3 end exactly as the same runs on two ranks of one host; a PPO run whose rank on one host is killed fails
in one line on the other and resumes; a host that is down ends the run within the connect timeout, named."""

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.builders import separable_pairs
from tests.conftest import write_jsonl
from tests.two_hosts import TwoHosts, unavailable

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    why = unavailable()
    if why:
        pytest.skip(f"two hosts cannot be made on this machine: {why}")
    made = TwoHosts(tmp_path_factory.mktemp("two-hosts"))
    yield made
    made.close()


def rows(run) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def per_step(run, key: str) -> dict[int, float]:
    return {r["step"]: r[key] for r in rows(run) if key in r and "step" in r}


def the_run(runs_dir):
    (run,) = [p for p in runs_dir.iterdir() if p.is_dir()]
    return run


def both_ways(hosts, tmp_path, monkeypatch, *command: str):
    """The command on the two hosts (a rank each) and on this machine's two ranks (one thread each, as there):
    (the two-host run's folder, the one-host run's)."""
    from app.faces.cli import main

    two = ["--db", str(tmp_path / "a.duckdb"), *command, "--runs-dir", str(tmp_path / "two")]
    done = hosts.rlhf(*two, "--hostfile", str(hosts.hostfile()))
    assert done.returncode == 0, done.stderr[-2000:]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    one = ["--db", str(tmp_path / "b.duckdb"), *command, "--runs-dir", str(tmp_path / "one")]
    assert main([*one, "--num-accelerators", "2"]) == 0
    return the_run(tmp_path / "two"), the_run(tmp_path / "one")


def test_a_reward_model_on_two_hosts_ends_as_on_two_ranks_of_one(hosts, tmp_path, tiny_model_dir, monkeypatch):
    pairs = write_jsonl(tmp_path / "pairs.jsonl", separable_pairs(64))
    common = ["train-rm", "--pairs", str(pairs), "--model", str(tiny_model_dir), "--max-steps", "6"]
    a, b = both_ways(hosts, tmp_path, monkeypatch, *common, "--zero-stage", "3", "--lr", "1e-3")
    log = (a / "train.log").read_text()
    assert "10.253.0.1: " in log and "10.253.0.2: " in log and "dist_world_size=2" in log  # a rank on each host
    assert next(r for r in rows(a) if r.get("event") == "start")["world_size"] == 2
    # what the two layouts must agree on: every step's loss, the held-out accuracy, the saved weights to the bit
    assert per_step(a, "loss/rm") == per_step(b, "loss/rm") and len(per_step(a, "loss/rm")) == 6
    assert per_step(a, "eval/rm_accuracy") == per_step(b, "eval/rm_accuracy")
    assert (a / "model" / "model.safetensors").read_bytes() == (b / "model" / "model.safetensors").read_bytes()


def ppo_args(tiny_model_dir, liked_rm, prompts_file, *more: str) -> list[str]:
    return [
        "train-ppo", "--actor", str(tiny_model_dir), "--reward", str(liked_rm), "--critic", str(liked_rm),
        "--prompts", str(prompts_file), "--max-new-tokens", "12", "--top-k", "20", "--actor-lr", "3e-3",
        "--critic-lr", "1e-3", "--zero-stage", "3", *more,
    ]  # fmt: skip


def test_ppo_at_zero_3_on_two_hosts_ends_as_on_two_ranks_of_one(
    hosts, tmp_path, tiny_model_dir, liked_rm, prompts_file, monkeypatch
):
    a, b = both_ways(
        hosts, tmp_path, monkeypatch, *ppo_args(tiny_model_dir, liked_rm, prompts_file, "--max-steps", "4")
    )
    assert "10.253.0.2: " in (a / "train.log").read_text()
    for key in ("reward/score_mean", "reward/kl", "loss/actor", "loss/critic"):
        assert per_step(a, key) == per_step(b, key) and sorted(per_step(a, key)) == [1, 2, 3, 4], key
    # the actor gathered from both hosts' ZeRO-3 shards is the one-host run's, to the bit (and the critic too)
    for folder in ("actor", "critic"):
        assert (a / folder / "model.safetensors").read_bytes() == (b / folder / "model.safetensors").read_bytes()


def test_a_rank_killed_on_one_host_fails_the_run_in_one_line_and_it_resumes(
    hosts, tmp_path, tiny_model_dir, liked_rm, prompts_file
):
    hostfile = str(hosts.hostfile())
    db, runs = str(tmp_path / "s.duckdb"), tmp_path / "runs"
    args = ppo_args(tiny_model_dir, liked_rm, prompts_file, "--max-steps", "6", "--save-every", "2")
    proc = hosts.start_rlhf("--db", db, *args, "--runs-dir", str(runs), "--hostfile", hostfile)
    deadline = time.monotonic() + 600
    while not (runs.is_dir() and any(runs.iterdir()) and 3 in per_step(the_run(runs), "loss/actor")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    run = the_run(runs)
    argv = {p: Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0") for p in hosts.pids(1)}
    ranks = [
        p for p, a in argv.items() if b"training.ppo.train" in a and a[a.index(b"training.ppo.train") - 1] == b"-m"
    ]
    assert len(ranks) == 1  # the second host's one rank (not its launcher, which names the module too)
    os.kill(ranks[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    lines = err.strip().splitlines()
    assert proc.returncode == 1 and lines[-1].startswith(f"error: run {run.name} failed: "), err[-2000:]
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "failed" and "\n" not in status["error"]
    assert "lost the rank on 10.253.0.2" in lines[-1], lines[-1]  # the host whose rank died, named
    again = hosts.rlhf("--db", db, "train-ppo", "--resume", str(run), "--runs-dir", str(runs), "--hostfile", hostfile)
    assert again.returncode == 0, again.stderr[-2000:]
    resumed = next(r for r in rows(run) if r.get("event") == "resumed")
    assert resumed["step"] >= 2 and sorted(per_step(run, "loss/actor")) == [1, 2, 3, 4, 5, 6]
    assert json.loads((run / "status.json").read_text())["state"] == "finished"


def test_a_host_that_is_down_ends_the_run_within_the_timeout_naming_it(hosts, tmp_path, tiny_model_dir):
    pairs = write_jsonl(tmp_path / "pairs.jsonl", separable_pairs(32))
    (hosts.folder / "ds_env_short").write_text("GLOO_SOCKET_IFNAME=rlhf0\nOMP_NUM_THREADS=1\nRLHF_CONNECT_TIMEOUT=10\n")
    down = hosts.hostfile([hosts.hosts[0], "10.253.0.3"])  # nothing answers at .3: no such host on the link
    t0 = time.monotonic()
    out = hosts.rlhf(
        "--db", str(tmp_path / "s.duckdb"), "train-rm", "--pairs", str(pairs), "--model", str(tiny_model_dir),
        "--runs-dir", str(tmp_path / "runs"), "--hostfile", str(down), "--max-steps", "2",
        env={"DS_ENV_FILE": str(hosts.folder / "ds_env_short")},
    )  # fmt: skip
    seconds = time.monotonic() - t0
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 1 and len(lines) == 1, out.stderr[-2000:]
    assert "waited 10 s for the other ranks" in lines[0] and "10.253.0.3" in lines[0], lines[0]
    assert seconds < 120  # the connect timeout and the launcher's start, not torch's 30 minutes
    run = the_run(tmp_path / "runs")
    assert json.loads((run / "status.json").read_text())["state"] == "failed"

"""training/launcher.py: the ranks' environment."""

import subprocess


def test_malloc_tunables_put_the_users_own_last_so_they_win():
    from training.launcher import MALLOC_TUNABLES, malloc_tunables

    assert malloc_tunables(None) == malloc_tunables("") == MALLOC_TUNABLES
    assert "glibc.malloc.mmap_threshold=33554432" in MALLOC_TUNABLES.split(":")
    assert malloc_tunables("glibc.malloc.trim_threshold=0") == MALLOC_TUNABLES + ":glibc.malloc.trim_threshold=0"


def test_launch_gives_the_ranks_the_malloc_tunables(tmp_path, monkeypatch):
    import training.launcher as launcher

    started = {}

    class Started:
        pid = 12345

    def popen(cmd, **kw):
        started.update(kw["env"])
        return Started()

    monkeypatch.setattr(subprocess, "Popen", popen)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    launcher.launch("ppo", tmp_path)
    assert started["GLIBC_TUNABLES"] == launcher.MALLOC_TUNABLES + ":glibc.malloc.arena_max=2"


def _started(monkeypatch, tmp_path, **kw) -> tuple[list[str], dict]:
    import training.launcher as launcher

    seen = {}

    class Started:
        pid = 12345

    def popen(cmd, **popen_kw):
        seen.update(cmd=cmd, env=popen_kw["env"], cwd=popen_kw["cwd"])
        return Started()

    monkeypatch.setattr(subprocess, "Popen", popen)
    launcher.launch("ppo", tmp_path, **kw)
    return seen["cmd"], seen["env"]


def test_a_one_process_local_run_starts_its_rank_as_the_launcher_would(tmp_path, monkeypatch):
    import sys

    from training.registry import trainer

    cmd, env = _started(monkeypatch, tmp_path)
    config = str(tmp_path.resolve() / "config.json")
    assert cmd == [sys.executable, "-u", "-m", trainer("ppo").module, "--local_rank=0", "--config", config]
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE", "MASTER_ADDR")} == {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
    }
    assert 0 < int(env["MASTER_PORT"]) < 65536


def test_several_ranks_or_a_hostfile_go_through_the_deepspeed_launcher(tmp_path, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    cmd, env = _started(monkeypatch, tmp_path, num_accelerators=2)
    assert cmd[0].endswith("deepspeed") and cmd[1:3] == ["--num_accelerators", "2"] and "RANK" not in env
    cmd, _ = _started(monkeypatch, tmp_path, hostfile="/job/hosts")
    assert cmd[0].endswith("deepspeed") and cmd[1:3] == ["--hostfile", "/job/hosts"]


def test_local_ranks_share_the_cpus_unless_the_user_chose():
    from training.launcher import rank_threads

    assert rank_threads(2, 2, None) == "1" and rank_threads(16, 2, None) == "8" and rank_threads(16, 3, "") == "5"
    assert rank_threads(2, 4, None) == "1"  # never zero threads
    assert rank_threads(16, 1, None) is None and rank_threads(16, 2, "4") is None


def test_a_local_multi_rank_run_gives_each_rank_its_share_of_threads(tmp_path, monkeypatch):
    import os

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    _, env = _started(monkeypatch, tmp_path, num_accelerators=2)
    assert env["OMP_NUM_THREADS"] == str(max(1, len(os.sched_getaffinity(0)) // 2))
    _, env = _started(monkeypatch, tmp_path)  # one rank: torch's own choice
    assert "OMP_NUM_THREADS" not in env
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    _, env = _started(monkeypatch, tmp_path, num_accelerators=2)
    assert env["OMP_NUM_THREADS"] == "3"

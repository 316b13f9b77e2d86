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

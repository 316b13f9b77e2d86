"""Starting training through the DeepSpeed launcher, the same way from the CLI and the app's buttons:

    deepspeed --num_accelerators N [--hostfile F] --master_port P \
              --module training.<kind>.train --config RUN/config.json

A run of one process on this machine (N = 1, no hostfile) starts its rank directly, with the environment and the
`--local_rank` the launcher would give it. For one local rank the launcher adds two interpreters that each import
DeepSpeed (runner, then launch) and a 1 s poll for the rank's exit: 6-7 s of a run's start on 2 CPU cores, against
1.5-2 s for the rank's own imports (measured with a rank that only calls init_distributed). Several ranks or a
hostfile always go through the launcher, which alone knows how to start and watch them.

Its output goes to RUN/train.log; the caller follows RUN/metrics.jsonl and RUN/status.json."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from training.registry import trainer
from training.runs import pid_record, read_status, write_json_atomic

# glibc's malloc for the training ranks: blocks under 32 MB from the heap, and up to 256 MB of free heap kept rather
# than handed back to the kernel. By default glibc maps many of a step's tensors afresh (its threshold moves with
# what was freed last) and trims the heap as it goes, so a tensor's memory is often new pages, zeroed by the kernel
# on first touch (about 0.2 ms a MB here). PPO bf16 (bench/ppo.py's fixed shape): 4.81 and 4.95 s a step against
# 5.24 and 5.02 without, peak 7,201 and 7,216 MB against 7,213 and 7,200. A user's own GLIBC_TUNABLES come after,
# so theirs win.
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456"


def malloc_tunables(existing: str | None) -> str:
    """GLIBC_TUNABLES for a rank: ours, then the user's."""
    return f"{MALLOC_TUNABLES}:{existing}" if existing else MALLOC_TUNABLES


def rank_threads(cpus: int, local_ranks: int, existing: str | None) -> str | None:
    """OMP_NUM_THREADS for each of a run's local ranks: the machine's CPUs shared out among them (at least one each),
    as torchrun does for several processes a node; None leaves it to torch (one rank, or the user's own setting).
    Without it every rank takes all the CPUs: two ranks on 2 cores ran 4 threads, and a 2-rank reward-model test took
    47-55 s against 32 s with one thread a rank (beside another job on the machine)."""
    if existing or local_ranks < 2:
        return None
    return str(max(1, cpus // local_ranks))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def deepspeed_command(kind: str, config: Path, num_accelerators: int = 1, hostfile: str | None = None) -> list[str]:
    exe = shutil.which("deepspeed", path=str(Path(sys.executable).parent)) or shutil.which("deepspeed")
    if exe is None:
        raise FileNotFoundError("the deepspeed launcher is not installed (make run installs it)")
    cmd = [exe]
    if hostfile:
        cmd += ["--hostfile", hostfile]
    else:
        # a local run: only this machine, whatever /job/hostfile says
        cmd += ["--num_accelerators", str(num_accelerators)]
    cmd += ["--master_port", str(_free_port()), "--module", trainer(kind).module, "--config", str(config)]
    return cmd


def single_rank_command(kind: str, config: Path) -> tuple[list[str], dict[str, str]]:
    """The command and environment DeepSpeed's launcher (deepspeed/launcher/launch.py) gives the one rank of a
    one-process local run; deepspeed.init_distributed reads the environment."""
    cmd = [sys.executable, "-u", "-m", trainer(kind).module, "--local_rank=0", "--config", str(config)]
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_SIZE": "1", "CROSS_RANK": "0", "CROSS_SIZE": "1"}
    return cmd, {**env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}


def launch(kind: str, run_dir: Path, num_accelerators: int = 1, hostfile: str | None = None) -> subprocess.Popen:
    """Start the run in its own process group (so Stop can signal every rank); returns the launcher process, or
    the rank itself for a one-process local run."""
    run_dir = run_dir.resolve()  # the ranks run inside the run folder
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    if num_accelerators == 1 and not hostfile:
        cmd, rank_env = single_rank_command(kind, run_dir / "config.json")
        env.update(rank_env)
    else:
        cmd = deepspeed_command(kind, run_dir / "config.json", num_accelerators, hostfile)
        threads = rank_threads(len(os.sched_getaffinity(0)), num_accelerators, env.get("OMP_NUM_THREADS"))
        if threads and not hostfile:  # other machines' ranks take their environment from the hostfile's launcher
            env["OMP_NUM_THREADS"] = threads
    log = open(run_dir / "train.log", "ab")  # noqa: SIM115 - owned by the child from here on
    root = Path(__file__).resolve().parent.parent
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    env["GLIBC_TUNABLES"] = malloc_tunables(env.get("GLIBC_TUNABLES"))
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, cwd=str(run_dir), env=env, start_new_session=True
    )
    # 'starting' until rank 0 writes 'running' (loading models takes a while); a launcher that dies first shows
    # as failed, never as starting forever (training/runs.py::effective_status checks this pid)
    previous = read_status(run_dir)
    write_json_atomic(
        run_dir / "status.json",
        {"state": "starting", **pid_record(proc.pid), "updated_at": time.time(), "step": previous.get("step", 0)},
    )
    return proc


# What the launcher's log says about a host it could not reach: ssh's own line (through pdsh, prefixed by the host),
# pdsh's exit line for that host, and DeepSpeed's check of the first host before anything starts.
_HOST_FAILURES = (
    re.compile(r"ssh: connect to host (?P<host>\S+) port \d+: (?P<why>[^\r\n]+)"),
    re.compile(r"pdsh@\S+: (?P<host>\S+): ssh exited with exit code (?P<why>\d+)"),
    re.compile(r"but host=(?P<host>\S+) was (?P<why>not reachable via ssh)"),
)


def host_failures(log: str) -> list[str]:
    """'HOST: what happened' for each host the launcher's log shows it could not reach, or whose launch ended in an
    error (first reason a host, in log order)."""
    found: dict[str, str] = {}
    for pattern in _HOST_FAILURES:
        for m in pattern.finditer(log):
            why = m.group("why").strip()
            found.setdefault(m.group("host"), f"its ranks exited with code {why}" if why.isdigit() else why)
    return [f"{host}: {why}" for host, why in found.items()]

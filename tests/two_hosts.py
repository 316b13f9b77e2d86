"""Two hosts on this machine: two network namespaces joined by a veth pair (10.253.0.1 and 10.253.0.2, the link named
rlhf0 in each), an sshd in each that takes a key made for the test, and an `ssh` on PATH that uses it. Both see this
machine's filesystem, as a cluster's hosts see a shared one. Commands run inside the first namespace, as on a
cluster's head node; DeepSpeed's launcher reaches both hosts over ssh (pdsh) and the ranks meet over gloo on rlhf0.
No packet leaves the namespaces: they have no route out. `TwoHosts.close` kills what runs in them and deletes them.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SSHD = "/usr/sbin/sshd"
SUBNET = "10.253.0"


def unavailable() -> str | None:
    """Why two hosts cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "pdsh", "ssh", "ssh-keygen") if shutil.which(tool) is None]
    if missing or not Path(SSHD).exists():
        return f"missing {', '.join(missing or ['sshd'])} (`make test` installs openssh-server and pdsh)"
    probe = f"rlhfprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot create a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


def _run(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


class TwoHosts:
    def __init__(self, folder: Path):
        self.folder = folder
        tag = f"{os.getpid() % 100000}"
        self.names = [f"rlhfa{tag}", f"rlhfb{tag}"]
        self.hosts = [f"{SUBNET}.1", f"{SUBNET}.2"]
        self._up = False
        try:
            self._make(tag)
        except BaseException:
            self.close()
            raise

    def _make(self, tag: str) -> None:
        a, b = self.names
        _run("ip", "netns", "add", a)
        _run("ip", "netns", "add", b)
        self._up = True
        _run("ip", "link", "add", f"va{tag}", "type", "veth", "peer", "name", f"vb{tag}")
        for ns, end, host in ((a, f"va{tag}", self.hosts[0]), (b, f"vb{tag}", self.hosts[1])):
            _run("ip", "link", "set", end, "netns", ns)
            _run("ip", "-n", ns, "link", "set", end, "name", "rlhf0")
            _run("ip", "-n", ns, "addr", "add", f"{host}/24", "dev", "rlhf0")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", ns, "link", "set", "rlhf0", "up")
        f = self.folder
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(f / "id"))
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(f / "host_key"))
        shutil.copy(f / "id.pub", f / "authorized_keys")
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
        for ns, host in zip(self.names, self.hosts, strict=True):
            _run(*self.inside_command(ns), SSHD, *self._sshd_options(ns, host))
        (f / "ssh_config").write_text(
            f"Host *\n  IdentityFile {f / 'id'}\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
            "  LogLevel ERROR\n  BatchMode yes\n  ConnectTimeout 5\n"
        )
        (f / "bin").mkdir()
        (f / "bin" / "ssh").write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {f / "ssh_config"} "$@"\n')
        (f / "bin" / "ssh").chmod(0o755)
        # what every rank needs in its environment, whichever host it runs on (DeepSpeed exports this file's lines)
        (f / "ds_env").write_text("GLOO_SOCKET_IFNAME=rlhf0\nOMP_NUM_THREADS=1\nRLHF_CONNECT_TIMEOUT=30\n")

    def _sshd_options(self, ns: str, host: str) -> list[str]:
        f = self.folder
        options = {
            "ListenAddress": host,
            "HostKey": f / "host_key",
            "AuthorizedKeysFile": f / "authorized_keys",
            "PidFile": f / f"sshd-{ns}.pid",
            "StrictModes": "no",
            "PermitRootLogin": "prohibit-password",
            "PasswordAuthentication": "no",
            "UsePAM": "no",
        }
        return [arg for k, v in options.items() for arg in ("-o", f"{k}={v}")]

    @staticmethod
    def inside_command(ns: str) -> list[str]:
        return ["ip", "netns", "exec", ns]

    def hostfile(self, hosts: list[str] | None = None) -> Path:
        """A DeepSpeed hostfile of one slot (rank) a host."""
        path = self.folder / f"hostfile-{len(list(self.folder.glob('hostfile-*')))}"
        path.write_text("".join(f"{h} slots=1\n" for h in hosts or self.hosts))
        return path

    def env(self, more: dict[str, str] | None = None) -> dict[str, str]:
        return {
            **os.environ,
            "PATH": f"{self.folder / 'bin'}:{os.environ['PATH']}",
            "DS_ENV_FILE": str(self.folder / "ds_env"),
            "OMP_NUM_THREADS": "1",
            **(more or {}),
        }

    def rlhf(self, *args: str, timeout: float = 900, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """`rlhf ARGS` on the first host (the head node), to its end."""
        cmd = [*self.inside_command(self.names[0]), sys.executable, "-m", "app.faces.cli", *args]
        return subprocess.run(cmd, env=self.env(env), cwd=ROOT, capture_output=True, text=True, timeout=timeout)

    def start_rlhf(self, *args: str) -> subprocess.Popen:
        cmd = [*self.inside_command(self.names[0]), sys.executable, "-m", "app.faces.cli", *args]
        return subprocess.Popen(
            cmd, env=self.env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def pids(self, i: int) -> list[int]:
        """The processes running in host i's namespace."""
        out = subprocess.run(["ip", "netns", "pids", self.names[i]], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def close(self) -> None:
        if not self._up:
            return
        for i in range(len(self.names)):
            for pid in self.pids(i):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        time.sleep(0.2)
        for ns in self.names:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)
        self._up = False

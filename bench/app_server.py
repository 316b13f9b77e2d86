"""Start `rlhf ui` as a real process on 127.0.0.1: for the annotation load benchmark, and the client and browser
tests."""

from __future__ import annotations

import os
import secrets
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from store.db import StoreRef

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class AppServer:
    def __init__(self, db: StoreRef, *args: str, env: dict | None = None, cpus: set[int] | None = None):
        """cpus: pin the app to these cores (the benchmark keeps its load generator off them)."""
        self.port = free_port()
        scheme = "https" if "--ssl-certfile" in args else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}/"
        # without --auth the app wants its token on every request (app/faces/guard.py): the browser opens page_url,
        # which sets its cookie; a client sends `headers`
        self.token = None if "--auth" in args else secrets.token_urlsafe(16)
        self.page_url = self.url + (f"?token={self.token}" if self.token else "")
        self.headers = {"Authorization": f"token {self.token}"} if self.token else {}
        env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", **(env or {})}
        if self.token:
            env["RLHF_TOKEN"] = self.token
        # the app's output goes to a file: a pipe nobody reads would block the app once 64 KB of it piled up
        self.log = tempfile.NamedTemporaryFile(prefix="rlhf-app-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.faces.cli", "--db", db, "ui", "--port", str(self.port), *args],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,  # one syscall: safe after fork
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the app exited: {self.output()}")
            try:
                # a test's self-signed certificate: this only asks whether the app is up
                context = ssl._create_unverified_context() if scheme == "https" else None
                with urllib.request.urlopen(
                    urllib.request.Request(self.url, headers=self.headers), timeout=2, context=context
                ):
                    return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("the app did not answer within 120 s")

    def client(self, **kwargs):
        """A gradio_client on the app, carrying its token."""
        from gradio_client import Client

        return Client(self.url, headers=self.headers, verbose=False, **kwargs)

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def kill(self, signal: int = 9) -> None:
        self.proc.send_signal(signal)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()

"""A real Label Studio server on 127.0.0.1 for round-trip tests (installed by the Makefile into .venv-ls)."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from pathlib import Path

import requests

from bench.app_server import free_port

ROOT = Path(__file__).resolve().parent.parent
LS_BIN = Path(os.environ.get("RLHF_LABEL_STUDIO_BIN", ROOT / ".venv-ls" / "bin" / "label-studio"))
EMAIL, PASSWORD = "admin@example.org", "round-trip-pw-1"


class LabelStudioServer:
    def __init__(self, data_dir: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(data_dir / "server.log", "w")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "LABEL_STUDIO_BASE_DATA_DIR": str(data_dir), "DJANGO_DEBUG": "false"}
        self.proc = subprocess.Popen(
            [
                str(LS_BIN),
                "start",
                "--no-browser",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--data-dir",
                str(data_dir),
                "--username",
                EMAIL,
                "--password",
                PASSWORD,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def wait(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"Label Studio exited with {self.proc.returncode}: {self.last_log_line()} (see {self.log.name})"
                )
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1)
        raise RuntimeError(f"Label Studio did not answer within {timeout} s")

    def last_log_line(self) -> str:
        """The server log's last non-empty line: the cause a CI log shows without the file."""
        self.log.flush()
        lines = [line.strip() for line in Path(self.log.name).read_text(errors="replace").splitlines()]
        return next((line for line in reversed(lines) if line), "(empty log)")

    def personal_access_token(self) -> str:
        """Label Studio 1.2x disables legacy tokens: log in and create a personal access token, as a user would."""
        s = requests.Session()
        s.get(self.url + "/user/login/", timeout=10)
        s.post(
            self.url + "/user/login/",
            timeout=10,
            allow_redirects=False,
            data={"email": EMAIL, "password": PASSWORD, "csrfmiddlewaretoken": s.cookies.get("csrftoken")},
            headers={"Referer": self.url + "/user/login/"},
        )
        r = s.post(
            self.url + "/api/token/",
            json={},
            timeout=10,
            headers={"X-CSRFToken": s.cookies.get("csrftoken"), "Referer": self.url},
        )
        r.raise_for_status()
        return r.json()["token"]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()

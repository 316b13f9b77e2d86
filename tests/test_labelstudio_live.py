"""The live pull (`import-ls --url`) against a fake Label Studio on 127.0.0.1: the three endpoints label-studio-sdk
calls for a Community server's JSON export, served from a thread that ends with the test. What it shows: a pull
imports like its export file, an export over the import limit is stopped as it arrives, and no error line echoes
the URL's user:password."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from annotation import files
from tests.builders import FIRST_IMPORT, LS, RANKER, REIMPORT
from tests.conftest import query, store_rows

CONFIG = (LS / "ranker_config.xml").read_text()


class FakeLabelStudio(ThreadingHTTPServer):
    """Project 5 has `body` (bytes) as its JSON export, sent in 64 KB pieces; `sent` counts what got out."""

    daemon_threads = True

    def __init__(self, body: bytes):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.body, self.sent = body, 0
        self.url = f"http://127.0.0.1:{self.server_port}"


class _Handler(BaseHTTPRequestHandler):
    server: FakeLabelStudio

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/api/version/":
            self._send(json.dumps({"release": "1.20.0", "edition": "Community"}).encode())
        elif path == "/api/projects/5/":
            self._send(json.dumps({"id": 5, "title": "fake", "label_config": CONFIG}).encode())
        elif path == "/api/projects/5/export":
            self._send(self.server.body)
        else:
            self.send_error(404, "Not found")

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            for i in range(0, len(body), 1 << 16):
                self.wfile.write(body[i : i + (1 << 16)])
                self.server.sent += len(body[i : i + (1 << 16)])
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client hung up: what the cap does

    def log_message(self, *args):
        pass


@pytest.fixture
def serve(monkeypatch):
    """serve(export bytes) -> a running FakeLabelStudio; every one started is shut down after the test."""
    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "a-token")
    started = []

    def start(body: bytes) -> FakeLabelStudio:
        server = FakeLabelStudio(body)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def test_a_pull_imports_the_project_and_keeps_no_credentials(cli, db, serve):
    server = serve(json.dumps(RANKER).encode())
    address = server.url.replace("http://", "http://alice:s3cret@")
    code, out, err = cli("import-ls", "--url", address, "--project", "5")
    assert (code, err) == (0, "") and out.strip() == FIRST_IMPORT
    assert query(db, "SELECT origin FROM imports") == [(f"{server.url}#project=5",)]
    assert "s3cret" not in repr(store_rows(db))


def test_the_same_project_on_a_second_server_is_imported_not_skipped(cli, db, serve):
    """Two Label Studio servers each with a project 5 holding the same task and annotation ids: the second pull
    was dropped as "already imported" when the key named only the ids; now each server's rankings are stored once,
    and pulling either again adds nothing."""
    first, second = serve(json.dumps(RANKER).encode()), serve(json.dumps(RANKER).encode())
    assert cli("import-ls", "--url", first.url, "--project", "5")[1].strip() == FIRST_IMPORT
    once = query(db, "SELECT count(*) FROM rankings")[0][0]
    assert cli("import-ls", "--url", second.url, "--project", "5")[1].strip() == FIRST_IMPORT
    assert query(db, "SELECT count(*) FROM rankings") == [(2 * once,)]
    assert sorted(o for (o,) in query(db, "SELECT origin FROM imports")) == sorted(
        f"{s.url}#project=5" for s in (first, second)
    )
    before = store_rows(db)
    for server in (first, second):
        assert cli("import-ls", "--url", server.url, "--project", "5")[1].strip() == REIMPORT
    assert store_rows(db) == before


def test_an_export_over_the_import_limit_is_stopped_as_it_arrives(cli, db, serve, monkeypatch):
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 1 << 20)
    pad = "x" * (64 << 20)  # one task, 64 MB: valid JSON the SDK would otherwise read whole and hand over
    server = serve(json.dumps([{"id": 1, "data": {"prompt": "p", "pad": pad}, "annotations": []}]).encode())
    before = store_rows(db)
    code, out, err = cli("import-ls", "--url", server.url, "--project", "5")
    assert code == 1 and out == ""
    assert err == f"error: cannot pull project 5 from {server.url}: the export is over the 1 MB import limit\n"
    assert store_rows(db) == before
    assert server.sent < 32 << 20  # the client hung up after its 1 MB (loopback buffers hold a few MB more)


@pytest.mark.parametrize("project", ["5", "9"], ids=["connection refused", "not found"])
def test_a_failed_pull_names_the_server_without_its_password(cli, db, serve, project):
    server = serve(b"[]")
    # project 5 on a port nobody listens on (the fake's, once closed); project 9 is a 404 from the fake
    url = server.url
    if project == "5":
        server.shutdown()
        server.server_close()
    address = url.replace("http://", "http://alice:s3cret@")
    before = store_rows(db)
    code, out, err = cli("import-ls", "--url", address + "/projects/", "--project", project)
    assert code == 1 and out == ""
    assert err.startswith(f"error: cannot pull project {project} from {url}: ") and len(err.splitlines()) == 1
    assert "s3cret" not in err and "alice" not in err
    assert store_rows(db) == before

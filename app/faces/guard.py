"""What the server checks before Gradio sees a request (docs/reliability.md, "Threat model").

1. The Host header names this server: loopback names, the address it was started on, and `--allowed-hosts`. A web
   page that rebinds its own DNS name to 127.0.0.1 reaches the port with its own name as the Host, and is refused
   (Gradio itself does not check; Jupyter, Django and Vite do the same check).
2. A request that can change something (any method but GET, HEAD, OPTIONS) from a browser page of another origin is
   refused, whatever CORS would have let the page read afterwards: a cross-site form POST, upload included, is a
   "simple" request that CORS does not stop from running.
3. Without --auth, every request carries the app's token, as Jupyter's do: in the URL printed at start
   (`?token=...`, which sets a cookie for the rest of the visit), in that cookie, or in an `Authorization: token ...`
   header (scripts, gradio_client). Another local user, or a page in the user's own browser, does not know it.

4. Uploads (`/gradio_api/upload`, where every file a page sends lands before a handler sees it) are the admins':
   an annotator has no control that uploads, so one is refused; an admin (the one local user without --auth) may
   store at most `--max-upload-mb-per-hour` (Gradio caps each file; this caps a login's files together).

Pure checks first (`refusal`), then the ASGI middleware that applies them."""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
TOKEN_ENV = "RLHF_TOKEN"  # a token of the user's choosing (scripts); else a random one per start
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Gradio's launch() calls this on its own server before it returns (it starts the queue once; nothing else)
EXEMPT_PATHS = frozenset({"/gradio_api/startup-events"})


@dataclass(frozen=True)
class Boundary:
    """hosts: the names the Host header may carry (lower case; None: any, `--allowed-hosts '*'`); token: what every
    request must carry (None under --auth, where Gradio's login is the gate); port: names the token's cookie, since
    browsers share cookies between the ports of one host."""

    hosts: frozenset[str] | None
    token: str | None
    port: int

    @property
    def cookie(self) -> str:
        return f"rlhf-token-{self.port}"


def host_name(value: str) -> str:
    """The name part of a Host header or an origin's netloc, lower case: 'Example.COM:80' -> 'example.com',
    '[::1]:7860' -> '::1'."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def allowed_hosts(bind: str, extra: list[str] | None = None) -> frozenset[str] | None:
    """The Host names a server bound to `bind` answers to: loopback names always; the bind address itself; for every
    interface (0.0.0.0, ::) also this machine's name and its addresses; plus `extra` (--allowed-hosts, for a reverse
    proxy's name). '*' in `extra` turns the check off (None)."""
    extra = [e.strip().lower() for e in extra or [] if e.strip()]
    if "*" in extra:
        return None
    names = set(LOOPBACK_NAMES) | {host_name(e) for e in extra}
    bind = bind.strip().lower()
    if bind in ("0.0.0.0", "::", ""):
        names |= _machine_names()
    else:
        names.add(host_name(bind) if not _is_ip(bind) else str(ipaddress.ip_address(bind)))
    return frozenset(names)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def _machine_names() -> set[str]:
    """This machine's host name, its fully qualified name and the addresses they resolve to."""
    names = {socket.gethostname().lower(), socket.getfqdn().lower()}
    for name in list(names):
        try:
            names |= {info[4][0].lower() for info in socket.getaddrinfo(name, None)}
        except OSError:
            pass
    return {n for n in names if n}


def new_token() -> str:
    return os.environ.get(TOKEN_ENV, "").strip() or secrets.token_urlsafe(24)


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def cookies(headers: list[tuple[bytes, bytes]]) -> SimpleCookie:
    """The request's cookies; a malformed Cookie header is none, not a crash."""
    jar = SimpleCookie()
    try:
        jar.load(_header(headers, b"cookie") or "")
    except Exception:  # noqa: BLE001 - http.cookies raises CookieError and others on hostile input
        return SimpleCookie()
    return jar


def presented_token(headers: list[tuple[bytes, bytes]], query: str, cookie: str) -> tuple[str | None, bool]:
    """(the token a request carries, whether it came in the URL): `Authorization: token X`, the cookie, `?token=X`."""
    auth = _header(headers, b"authorization") or ""
    if auth[:6].lower() == "token ":
        return auth[6:].strip(), False
    jar = cookies(headers)
    if cookie in jar:
        return jar[cookie].value, False
    values = parse_qs(query).get("token")
    return (values[0], True) if values else (None, False)


def refusal(boundary: Boundary, method: str, path: str, headers: list[tuple[bytes, bytes]], query: str):
    """(HTTP status, one line) if the request is refused, else None."""
    host = _header(headers, b"host")
    if boundary.hosts is not None and (host is None or host_name(host) not in boundary.hosts):
        return 400, (
            f"rlhf-studio: refused a request for host {host!r}: this server answers to "
            f"{', '.join(sorted(boundary.hosts))} (start it with --allowed-hosts NAME to add a name)"
        )
    origin = _header(headers, b"origin")
    if method not in SAFE_METHODS and origin is not None and not _same_site(origin, host, boundary):
        return 403, f"rlhf-studio: refused a {method} from the page at {origin!r}: not this app's origin"
    if method not in SAFE_METHODS and (_header(headers, b"sec-fetch-site") or "") == "cross-site":
        return 403, f"rlhf-studio: refused a cross-site {method}"
    if boundary.token is not None and path not in EXEMPT_PATHS:
        token, _ = presented_token(headers, query, boundary.cookie)
        if token is None or not hmac.compare_digest(token.encode(), boundary.token.encode()):
            return 401, (
                "rlhf-studio: this app needs its token: open the URL `rlhf ui` printed at start "
                f"(http://HOST:PORT/?token=...), or send 'Authorization: token ...' (set it with {TOKEN_ENV})"
            )
    return None


def _same_site(origin: str, host: str | None, boundary: Boundary) -> bool:
    """An origin is this app's when it is the very host and port the request was sent to, or (behind a reverse
    proxy, which may rewrite the Host) a name given with --allowed-hosts. Another port on localhost is another site:
    any local program can serve a page there."""
    if origin == "null":  # sandboxed frames and file:// pages
        return False
    netloc = urlsplit(origin).netloc.lower()
    if host is not None and netloc == host.strip().lower():
        return True
    name = host_name(netloc)
    return boundary.hosts is not None and name in boundary.hosts and name not in LOOPBACK_NAMES


UPLOAD_PATH = "/gradio_api/upload"


@dataclass
class Uploads:
    """Who may upload and how much (point 4 above). `app` is Gradio's server app, set once it starts (its login
    tokens say who a request is); without --auth (`auth` False) every request is the one local admin's."""

    auth: bool
    admins: frozenset[str]
    mb_per_hour: float
    app: object = None
    clock: object = time.monotonic
    _sent: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def login(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        if not self.auth:
            return "local"
        if self.app is None:
            return None
        jar = cookies(headers)
        cookie_id = getattr(self.app, "cookie_id", "")
        for name in (f"access-token-{cookie_id}", f"access-token-unsecure-{cookie_id}"):
            if name in jar:
                return self.app.tokens.get(jar[name].value)
        return None

    def refusal(self, headers: list[tuple[bytes, bytes]]):
        """(status, line) for an upload this login may not make, else None (counted against its hour)."""
        user = self.login(headers)
        if user is None:
            return None  # not logged in: Gradio's own login check answers 401
        if self.auth and user not in self.admins:
            return 403, f"rlhf-studio: {user} is an annotator: uploads are for admins"
        try:
            size = int(_header(headers, b"content-length") or "")
        except ValueError:
            return 411, "rlhf-studio: an upload must say its size (Content-Length)"
        now, cap = self.clock(), int(self.mb_per_hour * 1_000_000)
        with self._lock:
            recent = [(t, n) for t, n in self._sent.get(user, []) if now - t < 3600]
            used = sum(n for _, n in recent)
            if used + size > cap:
                self._sent[user] = recent
                return 429, (
                    f"rlhf-studio: {user} has uploaded {used / 1e6:.1f} MB this hour; this server takes "
                    f"{self.mb_per_hour:g} MB an hour per login (--max-upload-mb-per-hour)"
                )
            self._sent[user] = [*recent, (now, size)]
        return None


class Guard:
    """ASGI middleware: refuses what `refusal` refuses with its one line, and sets the token's cookie when the token
    came in the URL (so the page's own requests carry it)."""

    def __init__(self, app, boundary: Boundary, uploads: Uploads | None = None):
        self.app = app
        self.boundary = boundary
        self.uploads = uploads

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        method = scope.get("method", "GET") if scope["type"] == "http" else "WEBSOCKET"
        query = scope.get("query_string", b"").decode("latin-1")
        refused = refusal(self.boundary, method, scope.get("path", ""), scope.get("headers", []), query)
        if refused is None and self.uploads is not None and method == "POST" and scope.get("path") == UPLOAD_PATH:
            refused = self.uploads.refusal(scope.get("headers", []))
        if refused is not None:
            return await self._refuse(scope, receive, send, *refused)
        token, in_url = presented_token(scope.get("headers", []), query, self.boundary.cookie)
        if self.boundary.token is None or not in_url or scope["type"] != "http":
            return await self.app(scope, receive, send)

        cookie = f"{self.boundary.cookie}={token}; Path=/; HttpOnly; SameSite=Strict".encode()

        async def with_cookie(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
            await send(message)

        return await self.app(scope, receive, with_cookie)

    @staticmethod
    async def _refuse(scope, receive, send, status: int, line: str) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        # read what the client is still sending (up to 2 MB) so it gets to read the refusal; a bigger body is cut
        drained, more = 0, True
        while more and drained <= 2_000_000:
            message = await receive()
            drained += len(message.get("body", b""))
            more = message.get("more_body", False) and message["type"] == "http.request"
        body = (line + "\n").encode()
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

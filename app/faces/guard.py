"""What the server checks before Gradio sees a request (docs/reliability.md, "Threat model").

1. The Host header names this server: loopback names, the address it was started on, and `--allowed-hosts`. A web
   page that rebinds its own DNS name to 127.0.0.1 reaches the port with its own name as the Host, and is refused
   (Gradio itself does not check; Jupyter, Django and Vite do the same check).
2. A request from a browser page of another origin is refused, whatever its method: a cross-site form POST, upload
   included, is a "simple" request that CORS does not stop from running, and a GET with credentials could be read
   by the page if anything answered it with CORS headers (Gradio's own CORS middleware reflects any Origin when the
   Host is not a loopback name). "This app's origin" is exact: the scheme, host and port the request was sent to,
   or one named with `--allowed-origins` (a reverse proxy's public origin). A page on another port of the same host
   name is another origin: any user of the machine can serve one there. The guard runs before Gradio's CORS
   middleware (`outermost`), so another origin never sees a CORS header.
3. Without --auth, every request carries the app's token, as Jupyter's do: in the URL printed at start
   (`?token=...`: the page answers with a cookie and a redirect to the same address without the token, so it stays
   out of the address bar, the history and the page's own request URLs), in that cookie, or in an
   `Authorization: token ...` header (scripts, gradio_client). Another local user, or a page in the user's own
   browser, does not know it.

4. Uploads (`/gradio_api/upload`, where every file a page sends lands before a handler sees it) are the admins':
   an annotator has no control that uploads, so one is refused; an admin (the one local user without --auth) may
   store at most `--max-upload-mb-per-hour` (Gradio caps each file; this caps a login's files together). Every other
   request body is capped at `--max-request-kb`.
5. Under TLS every cookie the app sets is Secure (Gradio sets one of its two session cookies without it) and every
   answer carries HSTS, so a page on a plain-HTTP port of the same name is sent no cookie of the app's.
6. Logins (`POST /login`) are counted per client address and in all (app/faces/logins.py): over budget, one is
   refused before its password is checked.

Pure checks first (`refusal`), then the ASGI middleware that applies them."""

from __future__ import annotations

import contextvars
import hmac
import ipaddress
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, parse_qsl, quote, urlencode, urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
TOKEN_ENV = "RLHF_TOKEN"  # a token of the user's choosing (scripts); else a random one per start
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Gradio's launch() calls this on its own server before it returns (it starts the queue once; nothing else)
EXEMPT_PATHS = frozenset({"/gradio_api/startup-events"})


DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


@dataclass(frozen=True)
class Boundary:
    """hosts: the names the Host header may carry (lower case; None: any, `--allowed-hosts '*'`); token: what every
    request must carry (None under --auth, where Gradio's login is the gate); port: names the token's cookie (a
    browser sends a host's cookies to all its ports: the name only keeps two apps' tokens apart); origins: pages
    of these origins may call the app besides its own (`--allowed-origins`, normalised by `origin_key`); tls: the
    app serves HTTPS itself."""

    hosts: frozenset[str] | None
    token: str | None
    port: int
    origins: frozenset[str] = frozenset()
    tls: bool = False

    @property
    def cookie(self) -> str:
        return f"rlhf-token-{self.port}"


def origin_key(origin: str) -> str | None:
    """An origin as 'scheme://host:port', lower case, the port always written: 'HTTPS://Labels.example.com' ->
    'https://labels.example.com:443', 'http://[::1]:7860' -> 'http://[::1]:7860'. None for anything that is not
    an http(s) origin ('null', 'file://', a malformed port)."""
    try:
        parts = urlsplit(origin.strip().lower())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{port or DEFAULT_PORTS[parts.scheme]}"


def allowed_origins(values: list[str]) -> frozenset[str]:
    """--allowed-origins as origin keys; a value that is not an origin is one line."""
    keys = set()
    for value in (v.strip() for v in values):
        if not value:
            continue
        key = origin_key(value)
        if key is None:
            raise ValueError(f"--allowed-origins takes origins like https://labels.example.com, got {value!r}")
        keys.add(key)
    return frozenset(keys)


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


def refusal(
    boundary: Boundary, method: str, path: str, headers: list[tuple[bytes, bytes]], query: str, scheme: str = "http"
):
    """(HTTP status, one line) if the request is refused, else None. scheme: the one the request came in by."""
    host = _header(headers, b"host")
    if boundary.hosts is not None and (host is None or host_name(host) not in boundary.hosts):
        return 400, (
            f"rlhf-studio: refused a request for host {host!r}: this server answers to "
            f"{', '.join(sorted(boundary.hosts))} (start it with --allowed-hosts NAME to add a name)"
        )
    origin = _header(headers, b"origin")
    if origin is not None and not own_origin(origin, host, scheme, boundary):
        return 403, (
            f"rlhf-studio: refused a {method} from the page at {origin!r}: not this app's origin (scheme, host "
            "and port; behind a proxy, start it with --allowed-origins ORIGIN)"
        )
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


def own_origin(origin: str, host: str | None, scheme: str, boundary: Boundary) -> bool:
    """An origin is this app's when it is exactly the scheme, host and port the request was sent to (the Host has
    passed its own check by now), or one of --allowed-origins (behind a reverse proxy, which may rewrite the Host
    and the scheme). Another port or scheme of the same name is another origin: any local user can serve a page
    there. 'null' (sandboxed frames, file:// pages) is nobody's."""
    key = origin_key(origin)
    if key is None:
        return False
    if key in boundary.origins:
        return True
    ws = {"ws": "http", "wss": "https"}  # a websocket's scope says ws/wss; its page's origin says http/https
    return host is not None and key == origin_key(f"{ws.get(scheme, scheme)}://{host.strip()}")


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


LOGIN_PATHS = frozenset({"/login", "/login/"})
HSTS = b"max-age=31536000"
# the address a login counts against (app/faces/logins.py reads it in the same request): the peer, or the client
# a proxy on this machine names in X-Forwarded-For (uvicorn puts that in the scope for a peer on 127.0.0.1)
CLIENT: contextvars.ContextVar[str] = contextvars.ContextVar("rlhf_client", default="")


class Guard:
    """ASGI middleware: refuses what `refusal` refuses with its one line; turns a token in the URL into a cookie and
    a redirect to the same address without it; caps request bodies; under TLS marks every cookie Secure and sends
    HSTS; counts logins per client address (`logins`, a LoginGate)."""

    def __init__(self, app, boundary: Boundary, uploads: Uploads | None = None, max_body: int = 1 << 20, logins=None):
        self.app = app
        self.boundary = boundary
        self.uploads = uploads
        self.max_body = max_body
        self.logins = logins

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        method = scope.get("method", "GET") if scope["type"] == "http" else "WEBSOCKET"
        headers = scope.get("headers", [])
        query = scope.get("query_string", b"").decode("latin-1")
        path = scope.get("path", "")
        refused = refusal(self.boundary, method, path, headers, query, scope.get("scheme", "http"))
        if refused is None and method == "POST" and path == UPLOAD_PATH and self.uploads is not None:
            refused = self.uploads.refusal(headers)
        elif refused is None and method not in SAFE_METHODS and scope["type"] == "http" and path != UPLOAD_PATH:
            refused = self._body_refusal(headers)
        client = (scope.get("client") or ("",))[0]
        if refused is None and method == "POST" and path in LOGIN_PATHS and self.logins is not None:
            refused = self.logins.refusal(client)
        if refused is not None:
            return await self._refuse(scope, receive, send, *refused)
        CLIENT.set(client)
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        token, in_url = presented_token(headers, query, self.boundary.cookie)
        if self.boundary.token is not None and in_url and method in ("GET", "HEAD"):
            return await self._token_to_cookie(scope, send, token, query)
        if method not in SAFE_METHODS and path != UPLOAD_PATH:
            receive = self._capped(receive)
        return await self.app(scope, receive, self._secured(send))

    def _body_refusal(self, headers):
        try:
            size = int(_header(headers, b"content-length") or 0)
        except ValueError:
            return 400, "rlhf-studio: a malformed Content-Length"
        if size > self.max_body:
            return 413, (
                f"rlhf-studio: a request of {size:,} bytes; this server takes at most {self.max_body:,} "
                "(--max-request-kb; files go through the upload)"
            )
        return None

    def _capped(self, receive):
        """A body sent without a length still stops at max_body: the app reads a disconnect past it."""
        seen = 0

        async def capped():
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            return {"type": "http.disconnect"} if seen > self.max_body else message

        return capped

    def _secured(self, send):
        """Under TLS: Secure on every cookie the app sets, and HSTS on every answer."""
        if not self.boundary.tls:
            return send

        async def secured(message):
            if message["type"] == "http.response.start":
                headers = [
                    (k, v + b"; Secure") if k.lower() == b"set-cookie" and not _is_secure(v) else (k, v)
                    for k, v in message.get("headers", [])
                ]
                message = {**message, "headers": [*headers, (b"strict-transport-security", HSTS)]}
            await send(message)

        return secured

    async def _token_to_cookie(self, scope, send, token: str, query: str) -> None:
        """303 to the same address without the token, setting the token's cookie: the token leaves the address bar
        and the history, and the page never repeats it in a request's URL."""
        rest = urlencode([(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k != "token"])
        path = "/" + (scope.get("root_path", "") + scope.get("path", "/")).lstrip("/")  # never '//host': off-site
        location = quote(path) + (f"?{rest}" if rest else "")
        secure = "; Secure" if self.boundary.tls else ""
        cookie = f"{self.boundary.cookie}={token}; Path=/; HttpOnly; SameSite=Strict{secure}".encode()
        headers = [(b"location", location.encode()), (b"set-cookie", cookie), (b"content-length", b"0")]
        if self.boundary.tls:
            headers.append((b"strict-transport-security", HSTS))
        await send({"type": "http.response.start", "status": 303, "headers": headers})
        await send({"type": "http.response.body", "body": b""})

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


def _is_secure(set_cookie: bytes) -> bool:
    """Whether a Set-Cookie value has the Secure attribute (not just the word: Gradio names one cookie
    `access-token-unsecure-...`)."""
    return b"secure" in [part.strip().lower() for part in set_cookie.split(b";")[1:]]


def outermost(app) -> None:
    """Put the Guard in front of the middleware Gradio adds after ours (its CORS middleware, which would answer a
    preflight and add CORS headers before the guard saw the request), and rebuild the stack. Called from the
    lifespan hook, before the first request the server answers."""
    first = [m for m in app.user_middleware if m.cls is Guard]
    app.user_middleware = first + [m for m in app.user_middleware if m.cls is not Guard]
    app.middleware_stack = app.build_middleware_stack()

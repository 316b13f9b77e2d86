"""Pulling an export straight from a running Label Studio with label-studio-sdk 2.x.

The key comes from the caller (the CLI reads LABEL_STUDIO_API_KEY); it is never stored or logged. Label Studio
1.2x disables legacy API tokens by default, so users paste a personal access token. A pull is held to the import
limit of a file (MAX_FILE_BYTES): every response body is counted as it arrives and the pull stops past it, before
the SDK has buffered the rest.

Where a pull may go (`destination_problem`): never a link-local or cloud metadata address (169.254.0.0/16, fe80::/10,
the metadata names and addresses), never an unspecified, multicast or reserved one, and a private-range one (10/8,
172.16/12, 192.168/16, 100.64/10, fc00::/7) only with `allow_private` (`--allow-private-address`); loopback is
allowed (a Label Studio on the same machine is the usual set-up). Every request of the pull is checked, redirects
included, and a redirect to another server is refused, so the key never travels to a host it was not given for. An
error line names the HTTP status, never the server's answer."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import httpx

from annotation import files
from annotation.labelstudio import server_url
from store.errors import UserError


class _CappedBody(httpx.SyncByteStream):
    """A response body that ends the pull with a UserError once more than `max_bytes` of it have arrived."""

    def __init__(self, body: httpx.SyncByteStream, max_bytes: int):
        self.body, self.max_bytes = body, max_bytes

    def __iter__(self):
        seen = 0
        for chunk in self.body:
            seen += len(chunk)
            if seen > self.max_bytes:
                raise UserError(f"the export is over the {self.max_bytes // 2**20} MB import limit")
            yield chunk

    def close(self) -> None:
        self.body.close()


def _cap_body(response: httpx.Response) -> None:
    """httpx calls this with each response before its body is read (the SDK streams the export's)."""
    response.stream = _CappedBody(response.stream, files.MAX_FILE_BYTES)


METADATA_NAMES = frozenset({"metadata.google.internal", "metadata", "instance-data", "metadata.azure.internal"})
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254")
)
SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT; Alibaba's metadata address sits in it


def destination_problem(host: str, allow_private: bool = False, resolve=None) -> str | None:
    """Why a pull may not go to `host` (None: it may). Every address the name resolves to (by `resolve`, getaddrinfo
    by default) is checked."""
    resolve = resolve or socket.getaddrinfo
    name = host.strip("[]").lower().rstrip(".")
    if name in METADATA_NAMES:
        return f"{name} is a cloud metadata name: never pulled from"
    try:
        addresses = {ipaddress.ip_address(info[4][0].split("%")[0]) for info in resolve(name, None)}
    except (OSError, UnicodeError, ValueError):
        return f"cannot resolve {name}"
    for a in sorted(addresses, key=str):
        a = a.ipv4_mapped or a if isinstance(a, ipaddress.IPv6Address) else a
        if a in METADATA_ADDRESSES or a.is_link_local:
            return f"{name} is a link-local or metadata address ({a}): never pulled from"
        if a.is_loopback:
            continue
        if a.is_unspecified or a.is_multicast or a.is_reserved:
            return f"{name} resolves to {a}, which is not a server's address"
        if (a.is_private or a in SHARED) and not allow_private:
            return f"{name} is a private address ({a}): pass --allow-private-address to pull from it"
    return None


def _same_server_only(url: str, allow_private: bool, resolve):
    """An httpx request hook: each request of the pull (a redirect's too) goes to the server it was given for, at
    an address `destination_problem` allows; else the pull stops before the request (and its key) is sent."""
    server = server_url(url)

    def check(request: httpx.Request) -> None:
        if server_url(str(request.url)) != server:
            raise UserError(f"the server redirected to {server_url(str(request.url))}: not followed")
        if problem := destination_problem(request.url.host, allow_private, resolve):
            raise UserError(problem)

    return check


def fetch_export(
    url: str, project: int, api_key: str, timeout: int = 120, allow_private: bool = False, resolve=None
) -> tuple[list, str]:
    """(tasks as in the JSON export, the project's labeling config XML). resolve: the name lookup the address check
    uses (tests give their own)."""
    if not api_key:
        raise UserError("set LABEL_STUDIO_API_KEY to a Label Studio access token to pull from --url")
    shown = server_url(url)  # what errors name: never the URL's user:password
    if problem := destination_problem(urlsplit(url.strip()).hostname or "", allow_private, resolve):
        raise UserError(f"cannot pull project {project} from {shown}: {problem}")
    from label_studio_sdk import LabelStudio  # heavy import, only for live pulls

    # identity: the cap counts bytes on the wire, so they should be the export's own bytes, not gzip's
    http = httpx.Client(
        timeout=timeout,
        follow_redirects=True,
        headers={"Accept-Encoding": "identity"},
        event_hooks={"request": [_same_server_only(url, allow_private, resolve)], "response": [_cap_body]},
    )
    try:
        client = LabelStudio(base_url=url.rstrip("/"), api_key=api_key, timeout=timeout, httpx_client=http)
        config = client.projects.get(id=project).label_config
        tasks = client.projects.exports.as_json(project, timeout=timeout)
    except UserError as e:
        raise UserError(f"cannot pull project {project} from {shown}: {e}") from None
    except Exception as e:  # network, auth and API errors all end the same way: one line for the user
        raise UserError(f"cannot pull project {project} from {shown}: {_reason(e, url, api_key)}") from None
    finally:
        http.close()
    if isinstance(tasks, dict):
        tasks = [tasks]
    return tasks, config or ""


def _reason(e: Exception, url: str, api_key: str) -> str:
    """What went wrong, without the server's answer (it may echo the key, or be anything the server likes): the
    HTTP status for an API error, the error's kind and first line for a network one."""
    status = getattr(e, "status_code", None)
    if isinstance(status, int):
        hint = " (check LABEL_STUDIO_API_KEY)" if status in (401, 403) else ""
        return f"the server answered HTTP {status}{hint}"
    msg = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {_without(msg, url, api_key)[:200]}" if msg else type(e).__name__


def _without(msg: str, url: str, api_key: str) -> str:
    """An error's text with the URL's credentials and the key taken out, should a library have quoted them."""
    userinfo = urlsplit(url.strip()).netloc.rpartition("@")[0]
    for secret in (userinfo, api_key):
        if secret:
            msg = msg.replace(secret, "***")
    return msg

"""Pulling an export straight from a running Label Studio with label-studio-sdk 2.x.

The key comes from the caller (the CLI reads LABEL_STUDIO_API_KEY); it is never stored or logged. Label Studio
1.2x disables legacy API tokens by default, so users paste a personal access token. A pull is held to the import
limit of a file (MAX_FILE_BYTES): every response body is counted as it arrives and the pull stops past it, before
the SDK has buffered the rest."""

from __future__ import annotations

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


def fetch_export(url: str, project: int, api_key: str, timeout: int = 120) -> tuple[list, str]:
    """(tasks as in the JSON export, the project's labeling config XML)."""
    if not api_key:
        raise UserError("set LABEL_STUDIO_API_KEY to a Label Studio access token to pull from --url")
    from label_studio_sdk import LabelStudio  # heavy import, only for live pulls

    shown = server_url(url)  # what errors name: never the URL's user:password
    # identity: the cap counts bytes on the wire, so they should be the export's own bytes, not gzip's
    http = httpx.Client(
        timeout=timeout,
        follow_redirects=True,
        headers={"Accept-Encoding": "identity"},
        event_hooks={"response": [_cap_body]},
    )
    try:
        client = LabelStudio(base_url=url.rstrip("/"), api_key=api_key, timeout=timeout, httpx_client=http)
        config = client.projects.get(id=project).label_config
        tasks = client.projects.exports.as_json(project, timeout=timeout)
    except UserError as e:
        raise UserError(f"cannot pull project {project} from {shown}: {e}") from None
    except Exception as e:  # network, auth and API errors all end the same way: one line for the user
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"cannot pull project {project} from {shown}: {_without(msg, url, api_key)[:200]}") from None
    finally:
        http.close()
    if isinstance(tasks, dict):
        tasks = [tasks]
    return tasks, config or ""


def _without(msg: str, url: str, api_key: str) -> str:
    """An error's text with the URL's credentials and the key taken out, should a library have quoted them."""
    userinfo = urlsplit(url.strip()).netloc.rpartition("@")[0]
    for secret in (userinfo, api_key):
        if secret:
            msg = msg.replace(secret, "***")
    return msg

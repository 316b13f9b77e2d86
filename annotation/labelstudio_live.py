"""Pulling an export straight from a running Label Studio with label-studio-sdk 2.x.

The key comes from the caller (the CLI reads LABEL_STUDIO_API_KEY); it is never stored or logged. Label Studio
1.2x disables legacy API tokens by default, so users paste a personal access token."""

from __future__ import annotations

from store.errors import UserError


def fetch_export(url: str, project: int, api_key: str, timeout: int = 120) -> tuple[list, str]:
    """(tasks as in the JSON export, the project's labeling config XML)."""
    if not api_key:
        raise UserError("set LABEL_STUDIO_API_KEY to a Label Studio access token to pull from --url")
    from label_studio_sdk import LabelStudio  # heavy import, only for live pulls

    try:
        client = LabelStudio(base_url=url.rstrip("/"), api_key=api_key, timeout=timeout)
        config = client.projects.get(id=project).label_config
        tasks = client.projects.exports.as_json(project, timeout=timeout)
    except Exception as e:  # network, auth and API errors all end the same way: one line for the user
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"cannot pull project {project} from {url}: {msg[:200]}") from None
    if isinstance(tasks, dict):
        tasks = [tasks]
    return tasks, config or ""

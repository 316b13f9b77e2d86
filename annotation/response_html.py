"""A model's response as HTML for the page (the ranker's cards, the Compare chat): Markdown rendered on the server,
with nothing of the response's own HTML or script ever reaching the page as markup.

- Raw HTML in the text is escaped (markdown-it with `html` off): `<script>` shows as the text `<script>`.
- Links go to http(s) or mailto only, in a new tab; `javascript:`, `data:`, `vbscript:`, `file:` and relative
  links stay plain text (markdown-it's own check lets some of those through).
- Images are off: an image would be fetched when the response is shown (a tracking pixel); `![a](url)` shows as
  `!` and a link.
- A single newline is a line break, as the plain text showed it before.
A prompt is shown the same way (`prompt_html`); a conversation prompt turn by turn."""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

from store.conversations import conversation_of

SAFE_LINK = re.compile(r"(https?:|mailto:)", re.IGNORECASE)


def _open_links_in_a_new_tab(self, tokens, idx, options, env) -> str:
    # a link followed in place would leave the page, and the ranking in progress with it
    tokens[idx].attrSet("target", "_blank")
    tokens[idx].attrSet("rel", "noopener noreferrer")
    return self.renderToken(tokens, idx, options, env)


def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable(["table", "strikethrough"])
    md.disable("image")
    md.validateLink = lambda url: SAFE_LINK.match(url) is not None  # called with the normalized URL
    md.add_render_rule("link_open", _open_links_in_a_new_tab)
    return md


_MD = _markdown()


def response_html(text: str) -> str:
    """`text` as Markdown rendered to HTML; every tag in `text` itself comes out escaped."""
    return _MD.render(text)


SHOWN_TURNS = 4  # a conversation prompt's last turns shown open; the earlier ones fold under one <details>
ROLE_NAMES = {"system": "System", "user": "User", "assistant": "Assistant"}


def _turn_html(message: dict) -> str:
    role = message["role"]
    return (
        f'<div class="turn turn-{role}" style="border-left: 3px solid #bbb; padding-left: 8px; margin: 6px 0">'
        f"<strong>{ROLE_NAMES[role]}</strong>{response_html(message['content'])}</div>"
    )


def prompt_html(text: str) -> str:
    """A stored prompt as the ranker shows it: a text prompt as a response is shown; a conversation
    (store/conversations.py) turn by turn, each labelled with its role, the turns before the last SHOWN_TURNS folded
    (one click opens them), so the annotator reads what the responses answer."""
    messages = conversation_of(text)
    if messages is None:
        return response_html(text)
    early, late = messages[:-SHOWN_TURNS], messages[-SHOWN_TURNS:]
    folded = (
        f"<details><summary>{len(early)} earlier turn{'s' if len(early) != 1 else ''}</summary>"
        + "".join(map(_turn_html, early))
        + "</details>"
        if early
        else ""
    )
    return f'<div class="conversation">{folded}{"".join(map(_turn_html, late))}</div>'

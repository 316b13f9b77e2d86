"""A model's response as HTML for the page (the ranker's cards, the Compare chat): Markdown rendered on the server,
with nothing of the response's own HTML or script ever reaching the page as markup.

- Raw HTML in the text is escaped (markdown-it with `html` off): `<script>` shows as the text `<script>`.
- Links go to http(s) or mailto only, in a new tab; `javascript:`, `data:`, `vbscript:`, `file:` and relative
  links stay plain text (markdown-it's own check lets some of those through).
- Images are off: an image would be fetched when the response is shown (a tracking pixel); `![a](url)` shows as
  `!` and a link.
- A single newline is a line break, as the plain text showed it before."""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

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

"""Responses shown as Markdown, safely: a response's own HTML is text, links are http(s) or mailto only, no images."""

import pytest

from annotation.ranker_view import widget_value
from annotation.response_html import response_html

LINK_ATTRS = 'target="_blank" rel="noopener noreferrer"'


@pytest.mark.parametrize(
    "text, html",
    [
        ("**bold** and `x<1`", "<p><strong>bold</strong> and <code>x&lt;1</code></p>\n"),
        (
            "```python\nif a < b:\n    pass\n```",
            '<pre><code class="language-python">if a &lt; b:\n    pass\n</code></pre>\n',
        ),
        ("- one\n- two", "<ul>\n<li>one</li>\n<li>two</li>\n</ul>\n"),
        ("## Title", "<h2>Title</h2>\n"),
        ("line one\nline two", "<p>line one<br />\nline two</p>\n"),  # one newline stays a line break, as before
        ('<img src=x onerror="alert(1)">', "<p>&lt;img src=x onerror=&quot;alert(1)&quot;&gt;</p>\n"),
        ("<script>alert(1)</script>", "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>\n"),
        ("<div>\n\n*x*\n\n</div>", "<p>&lt;div&gt;</p>\n<p><em>x</em></p>\n<p>&lt;/div&gt;</p>\n"),  # no HTML block
        ("[a](https://example.com)", f'<p><a href="https://example.com" {LINK_ATTRS}>a</a></p>\n'),
        ("<mailto:a@b.org>", f'<p><a href="mailto:a@b.org" {LINK_ATTRS}>mailto:a@b.org</a></p>\n'),
        (
            "![pixel](https://example.com/p.png)",
            f'<p>!<a href="https://example.com/p.png" {LINK_ATTRS}>pixel</a></p>\n',
        ),
        ("", ""),
    ],
)
def test_markdown_renders_and_a_responses_html_stays_text(text, html):
    assert response_html(text) == html


@pytest.mark.parametrize(
    "href",
    [
        "javascript:alert(1)",
        "JaVaScRiPt:alert(1)",
        "jav&#x09;ascript:alert(1)",
        "&#106;avascript:alert(1)",
        "vbscript:msgbox(1)",
        "data:text/html,<script>alert(1)</script>",
        "file:///etc/passwd",
        "//evil.example/x",
    ],
)
def test_a_link_is_http_or_mailto_or_no_link(href):
    for text in (f"[click]({href})", f"<{href}>", f"[click][r]\n\n[r]: {href}"):
        html = response_html(text)
        assert "<a" not in html and "href" not in html, (text, html)


def test_the_ranker_value_carries_each_responses_html_beside_its_text():
    value = widget_value([7, 3], ["**hi**", "<b>x</b>"], [2, 1])
    assert value == {
        "items": [
            {"id": 7, "text": "**hi**", "html": "<p><strong>hi</strong></p>\n", "pos": 0, "rank": 2, "tags": []},
            {"id": 3, "text": "<b>x</b>", "html": "<p>&lt;b&gt;x&lt;/b&gt;</p>\n", "pos": 1, "rank": 1, "tags": []},
        ],
        "tag_names": ["unsafe", "factually wrong", "off topic", "other"],
        "ask": False,
        "strengths": [],
        "edit_ok": False,
        "edit": "",
        # the questions asked as a row of choices (best_good.py)
        "more": [
            {"name": "best_good", "title": "Is the response you ranked best good as it is?", "choices": ["yes", "no"]}
        ],
    }
    assert widget_value([7, 3], ["a", "b"], [2, 1], ask_strength=True)["strengths"] == [None]  # one step to ask

"""What a page's markdown shows, as text: for tests that read a message quoting someone else's text (ui.layout.literal
escapes its punctuation, which the markdown source then carries)."""

from __future__ import annotations

import html
import re

from markdown_it import MarkdownIt

COMMONMARK = MarkdownIt("commonmark")


def shown(markdown: str) -> str:
    """What a CommonMark renderer shows of one line of markdown, as text; fails on any markup it made."""
    rendered = COMMONMARK.render(markdown).strip()
    inner = re.fullmatch(r"<p>(.*)</p>", rendered, flags=re.S)
    assert inner, rendered  # one plain paragraph: no heading, list, code block or quote
    assert "<" not in inner.group(1), rendered  # no link, emphasis, code span or HTML of its own
    return html.unescape(inner.group(1))

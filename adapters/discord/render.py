"""Markdown to Discord's dialect.

Discord renders most Markdown itself (bold, italics, code, fenced blocks,
lists, quotes, masked links, `#` to `###` headings), so rendering is close to
the identity: deeper headings become bold lines, images become links (a bot
message cannot inline one), and an empty text becomes an ellipsis because
Discord refuses empty messages. Code, fenced or inline, is left exactly as it is.

Only `http`, `https` and `mailto` targets stay masked links: `[t](target)` with
any other target is shown as the text `t (target)`. Mentions in the text
(`@everyone`, `<@&role>`, `<@user>`) are left alone here: the sender posts
every message with `allowed_mentions` that let no one be pinged.

Every rule runs in time linear in the line (links are found by `adapters.spans`).
"""

from __future__ import annotations

import re

from adapters import spans
from adapters.links import is_safe_target

_HEADING = re.compile(r"^#{4,6}\s+(.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")
EMPTY = "…"


def render(markdown: str) -> str:
    """The text to post for `markdown`."""
    lines: list[str] = []
    in_code = False
    for line in markdown.split("\n"):
        if _FENCE.match(line):
            in_code = not in_code
        elif not in_code:
            line = _render_line(line)
        lines.append(line)
    text = "\n".join(lines)
    return text if text.strip() else EMPTY


def _render_line(line: str) -> str:
    heading = _HEADING.match(line)
    text = _heading_text(heading.group(1)) if heading else ""
    if text:
        return f"**{_links(text)}**"
    return _links(line)


def _heading_text(text: str) -> str:
    """A heading's text without its closing hashes (`#### Title ##`)."""
    return text.rstrip().rstrip("#").rstrip()


def _links(line: str) -> str:
    """Rewrite the links and images of a line; inline code is passed over untouched."""
    if "](" not in line:
        return line
    links = spans.Links(line)
    code = spans.ExactCodeSpans(line) if "`" in line else spans.NOTHING
    out: list[str] = []
    pos = 0
    link, span = links.search(0), code.search(0)
    while link is not None:
        if span is not None and span.start() < link.start():
            out.append(line[pos : span.end()])
            pos = span.end()
        else:
            out.append(line[pos : link.start()])
            out.append(_link(link))
            pos = link.end()
        # Searches only move forward, as the finders require.
        if link.start() < pos:
            link = links.search(pos)
        if span is not None and span.start() < pos:
            span = code.search(pos)
    out.append(line[pos:])
    return "".join(out)


def _link(link: spans.Span) -> str:
    label, target = link.group(1), link.group(2)
    if not is_safe_target(target):
        return f"{label} ({target})" if label else target
    if link.group(0).startswith("!"):
        return f"[{label or 'image'}]({target})"
    return link.group(0)

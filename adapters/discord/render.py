"""Markdown to Discord's dialect.

Discord renders most Markdown itself (bold, italics, code, fenced blocks,
lists, quotes, masked links, `#` to `###` headings), so rendering is close to
the identity: deeper headings become bold lines, images become links (a bot
message cannot inline one), and an empty text becomes an ellipsis because
Discord refuses empty messages. Code blocks are left exactly as they are.
"""

from __future__ import annotations

import re

_HEADING = re.compile(r"^#{4,6}\s+(.+?)\s*#*\s*$")
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
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
    if heading:
        return f"**{heading.group(1)}**"
    return _IMAGE.sub(lambda m: f"[{m.group(1) or 'image'}]({m.group(2)})", line)

"""Markdown (what the model writes) to Slack mrkdwn (what Slack renders).

Why not a library: the maintained converters on PyPI were tried on model
output. `slackify-markdown` leaves `<`, `>` and `&` unescaped inside code (so a
code span holding `<!channel>` pings the whole channel), loses the `>` of every
blockquote line after the first and turns `\\*literal\\*` into bold;
`markdown-to-mrkdwn` rewrites `*` inside inline code; `md2mrkdwn` escapes
nothing. This converter is line based, small, and tested on those cases.

Rules: `**b**`/`__b__` -> `*b*`; `*i*`/`_i_` -> `_i_`; `~~s~~` -> `~s~`;
`[t](url)` -> `<url|t>`; headings -> bold lines; `-`/`*`/`+` items -> `•`;
fenced code keeps its body (the language tag is dropped: Slack would show it
as a line of code); `&`, `<`, `>` are escaped everywhere, code included, which
also keeps the model from writing live mentions such as `<!here>`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterator

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_QUOTE = re.compile(r"^\s{0,3}>\s?(.*)$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_TASK = re.compile(r"^\[([ xX])\]\s+")
_ORDERED = re.compile(r"^(\s*)(\d{1,9})[.)]\s+(.*)$")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_ESCAPED = re.compile(r"\\([\\`*_{}\[\]()#+\-.!~|>])")
_IMAGE_OR_LINK = re.compile(r"!?\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^>\s]+)>")
_BOLD_ITALIC = re.compile(r"(?<![*\w])\*\*\*(?=\S)(.+?)(?<=\S)\*\*\*(?![*\w])")
_BOLD_STARS = re.compile(r"(?<![*\\])\*\*(?=\S)(.+?)(?<=\S)\*\*(?!\*)")
_BOLD_UNDERSCORES = re.compile(r"(?<![\w_])__(?=\S)(.+?)(?<=\S)__(?![\w_])")
_ITALIC_STAR = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])")
_STRIKE = re.compile(r"(?<!~)~~(?=\S)(.+?)(?<=\S)~~(?!~)")

# Placeholders never found in model text: protected pieces (code, links,
# escaped characters) are swapped out while the emphasis rules run.
_HOLD = "\x00"
_BOLD = "\x01"
_HELD = re.compile(_HOLD + r"(\d+)" + _HOLD)


def escape(text: str) -> str:
    """Slack's three control characters, as its docs ask."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str) -> str:
    """Render Markdown as Slack mrkdwn."""
    lines = markdown.replace("\r\n", "\n").replace(_HOLD, "").replace(_BOLD, "").split("\n")
    return "\n".join(_blocks(lines)).strip("\n")


def _blocks(lines: list[str]) -> Iterator[str]:
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = _FENCE.match(line)
        if fence:
            index = yield from _code_block(lines, index, fence.group(2))
            continue
        if _is_table_start(lines, index):
            index = yield from _table(lines, index)
            continue
        yield _line(line)
        index += 1


def _code_block(lines: list[str], start: int, marker: str) -> Generator[str, None, int]:
    """Yield a fenced block as Slack code; an unclosed fence (a reply still streaming) is closed."""
    yield "```"
    index = start + 1
    closing = re.compile(r"^\s*" + re.escape(marker[0]) + "{" + str(len(marker)) + r",}\s*$")
    while index < len(lines) and not closing.match(lines[index]):
        yield escape(lines[index])
        index += 1
    yield "```"
    return index + 1


def _is_table_start(lines: list[str], index: int) -> bool:
    return (
        "|" in lines[index]
        and index + 1 < len(lines)
        and bool(_TABLE_SEPARATOR.match(lines[index + 1]))
        and "|" in lines[index + 1]
    )


def _table(lines: list[str], start: int) -> Generator[str, None, int]:
    """Slack has no tables; a code block keeps the columns readable."""
    yield "```"
    yield escape(lines[start])
    index = start + 2
    while index < len(lines) and "|" in lines[index] and lines[index].strip():
        yield escape(lines[index])
        index += 1
    yield "```"
    return index


def _line(line: str) -> str:
    heading = _HEADING.match(line)
    if heading:
        text = _inline(heading.group(1)).replace("*", "")
        return f"*{text}*" if text else ""
    if _RULE.match(line):
        return "──────────"
    quote = _QUOTE.match(line)
    if quote:
        # The quote marker stays a raw `>`: escaped, Slack would show it as text.
        return "> " + _line(quote.group(1)) if quote.group(1) else ">"
    bullet = _BULLET.match(line)
    if bullet:
        return _indent(bullet.group(1)) + "• " + _task(bullet.group(2))
    ordered = _ORDERED.match(line)
    if ordered:
        return f"{_indent(ordered.group(1))}{ordered.group(2)}. {_inline(ordered.group(3))}"
    return _inline(line.rstrip())


def _indent(spaces: str) -> str:
    """Nested list items: Slack collapses leading spaces, so indent with em spaces."""
    depth = len(spaces.expandtabs(4)) // 2
    return "\u2003" * depth


def _task(text: str) -> str:
    task = _TASK.match(text)
    if not task:
        return _inline(text)
    box = "☐" if task.group(1) == " " else "☑"
    return f"{box} {_inline(text[task.end():])}"


def _inline(text: str) -> str:
    held: list[str] = []

    def hold(piece: str) -> str:
        held.append(piece)
        return f"{_HOLD}{len(held) - 1}{_HOLD}"

    text = _CODE_SPAN.sub(lambda m: hold(f"`{escape(m.group(2).strip())}`"), text)
    text = _ESCAPED.sub(lambda m: hold(_literal(m.group(1))), text)
    text = _IMAGE_OR_LINK.sub(lambda m: hold(_link(m.group(2), m.group(1), _emphasis)), text)
    text = _AUTOLINK.sub(lambda m: hold(_link(m.group(1), "", _emphasis)), text)
    text = _emphasis(escape(text))
    while _HELD.search(text):
        text = _HELD.sub(lambda m: held[int(m.group(1))], text)
    return text


def _literal(char: str) -> str:
    """A backslash-escaped character. Slack has no escapes, so a literal `*` or `~`
    becomes its look-alike that never formats."""
    return {"*": "∗", "~": "∼"}.get(char) or escape(char)


def _emphasis(text: str) -> str:
    text = _BOLD_ITALIC.sub(lambda m: f"{_BOLD}_{m.group(1)}_{_BOLD}", text)
    text = _BOLD_STARS.sub(lambda m: f"{_BOLD}{m.group(1)}{_BOLD}", text)
    text = _BOLD_UNDERSCORES.sub(lambda m: f"{_BOLD}{m.group(1)}{_BOLD}", text)
    text = _ITALIC_STAR.sub(lambda m: f"_{m.group(1)}_", text)
    text = _STRIKE.sub(lambda m: f"~{m.group(1)}~", text)
    return text.replace(_BOLD, "*")


def _link(url: str, label: str, style: Callable[[str], str]) -> str:
    # `|` and `>` would end Slack's <url|label> early; `&` is escaped like all text.
    safe_url = escape(url.replace("|", "%7C"))
    text = style(escape(label.replace("|", "¦"))) if label else ""
    if not text or text == safe_url:
        return f"<{safe_url}>"
    return f"<{safe_url}|{text}>"

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
as a line of code); `&`, `<`, `>` are escaped everywhere, code included.

Model text never notifies anyone: a raw `<!here>`, `<@U0123>` or `<#C1>` is
shown escaped, and only `http`, `https` and `mailto` targets become links: in
Slack `<!channel|x>` pings a channel and `<@U0123|x>` a person, so
`[x](!channel)` is shown as the text `x (!channel)`.

Text Slack renders itself (a stream's `markdown_text`, a `markdown` block) keeps its
Markdown and goes through `safe_markdown` instead, under the same two rules: no
mention ever notifies (an invisible character breaks `<!here>`, `<@U0123>`,
`@channel`, so they show as written), and a link to a target other than `http`,
`https` or `mailto` is shown as its text, never live. Each rule inserts a
character where the text already is, never rewrites what came before: the safe
form of a text that grows grows too (a stream appends only the new part).

Every rule runs in time linear in the line: the inline spans are found by
`adapters.spans` (a lazy regex for `**bold**` rescans the rest of the line from
every unclosed `**`), and the line patterns have no two adjacent parts
that can match the same run of spaces.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Generator, Iterator

from adapters import spans
from adapters.links import is_safe_target

_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*)$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_QUOTES = re.compile(r"^(?:\s{0,3}>\s?)+")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_TASK = re.compile(r"^\[([ xX])\]\s+")
_ORDERED = re.compile(r"^(\s*)(\d{1,9})[.)]\s+(.*)$")
_TABLE_CELL = re.compile(r"\s*:?-+:?\s*")

_ESCAPED = re.compile(r"\\([\\`*_{}\[\]()#+\-.!~|>])")
# No `<` inside: each autolink candidate then stops at the next `<`, not at the line's end.
_AUTOLINK = re.compile(r"<((?:https?|mailto):[^<>\s]+)>")
_BOLD_ITALIC = spans.Delimited("*", r"(?<![*\w])\*\*\*(?=\S)", r"(?<=\S)\*\*\*(?![*\w])")
_BOLD_STARS = spans.Delimited("*", r"(?<![*\\])\*\*(?=\S)", r"(?<=\S)\*\*(?!\*)")
_BOLD_UNDERSCORES = spans.Delimited("_", r"(?<![\w_])__(?=\S)", r"(?<=\S)__(?![\w_])")
_ITALIC_STAR = spans.Delimited("*", r"(?<![*\w])\*(?=[^\s*])", r"(?<=[^\s*])\*(?![*\w])")
_STRIKE = spans.Delimited("~", r"(?<!~)~~(?=\S)", r"(?<=\S)~~(?!~)")

# Mentions in Slack's own syntax (`<@U0123>`, `<!here>`, `<!subteam^S1>`, `<#C1>`) and
# written out (`@channel`): each is broken by an invisible character after its first one.
_PINGS = re.compile(r"<(?=[@#]|!(?:here|channel|everyone|subteam\^))", re.IGNORECASE)
_AT_ALL = re.compile(r"(?<![\w@.])@(?=(?:here|channel|everyone)\b)", re.IGNORECASE)
# `<scheme:...>`: an autolink, in CommonMark and in Slack's own `<url|label>`.
_ANGLE_LINK = re.compile(r"<(?=([A-Za-z][A-Za-z0-9+.-]{1,31}:[^<>\s]*))")
_BREAK = "\u200b"  # zero width space: the token no longer parses, and looks the same
_JOIN = "\u2060"  # word joiner: `@here` shown as it is, no longer a mention

# Placeholders never found in model text: protected pieces (code, links,
# escaped characters) are swapped out while the emphasis rules run.
_HOLD = "\x00"
_BOLD = "\x01"
_HELD = re.compile(_HOLD + r"(\d+)" + _HOLD)


def escape(text: str) -> str:
    """Slack's three control characters, as its docs ask."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def safe_markdown(markdown: str) -> str:
    """`markdown` for Slack to render as Markdown, its mentions and unsafe links defused.

    Outside code, a link or autolink to a target `is_safe_target` refuses loses its
    syntax: `[x](javascript:y)` shows as `[x](javascript:y)`, a text. Mentions are
    broken everywhere, code included (Slack reads `<!here>` in code too)."""
    lines = markdown.replace("\r\n", "\n").split("\n")
    out: list[str] = []
    fence: str | None = None
    for line in lines:
        opened = _FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(2)
        elif fence is not None and line.strip().startswith(fence[0] * len(fence)):
            fence = None
        elif fence is None:
            line = _safe_line(line)
        out.append(no_pings(line))
    return "\n".join(out)


def no_pings(text: str) -> str:
    """`text` with every mention broken, shown as written (a task's title, code)."""
    return _AT_ALL.sub("@" + _JOIN, _PINGS.sub("<" + _BREAK, text))


def _safe_line(line: str) -> str:
    """A line outside fenced code, its unsafe links defused (code spans left alone)."""
    held: list[str] = []

    def hold(piece: str) -> str:
        held.append(piece)
        return f"{_HOLD}{len(held) - 1}{_HOLD}"

    line = line.replace(_HOLD, "")
    code = spans.LooseCodeSpans(line) if "`" in line else spans.NOTHING
    line = spans.sub(code, line, lambda m: hold(m.group(0)))
    links = spans.Links(line) if "](" in line else spans.NOTHING
    line = spans.sub(links, line, lambda m: hold(_defused_link(m.group(0), m.group(2))))
    line = _ANGLE_LINK.sub(lambda m: "<" if is_safe_target(m.group(1)) else "<" + _BREAK, line)
    while _HELD.search(line):
        line = _HELD.sub(lambda m: held[int(m.group(1))], line)
    return line


def _defused_link(link: str, target: str) -> str:
    """`[label](target)` as it is where the target is safe, else with its `](` broken."""
    return link if is_safe_target(target) else link.replace("](", "]" + _BREAK + "(", 1)


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
        and "|" in lines[index + 1]
        and _is_table_separator(lines[index + 1])
    )


def _is_table_separator(line: str) -> bool:
    """`|---|:-:|`: cells of dashes (colons for alignment) between optional outer pipes."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") else inner
    return all(_TABLE_CELL.fullmatch(cell) for cell in inner.split("|"))


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
    quotes = _QUOTES.match(line)
    if not quotes:
        return _unquoted(line)
    # The quote markers stay raw `>`s: escaped, Slack would show them as text.
    depth, inside = quotes.group(0).count(">"), line[quotes.end() :]
    return "> " * depth + _unquoted(inside) if inside else "> " * (depth - 1) + ">"


def _unquoted(line: str) -> str:
    heading = _HEADING.match(line)
    if heading:
        text = _inline(_heading_text(heading.group(1))).replace("*", "")
        return f"*{text}*" if text else ""
    if _RULE.match(line):
        return "──────────"
    bullet = _BULLET.match(line)
    if bullet:
        return _indent(bullet.group(1)) + "• " + _task(bullet.group(2))
    ordered = _ORDERED.match(line)
    if ordered:
        return f"{_indent(ordered.group(1))}{ordered.group(2)}. {_inline(ordered.group(3))}"
    return _inline(line.rstrip())


def _heading_text(text: str) -> str:
    """A heading's text without its closing hashes (`## Title ##`), as CommonMark reads it."""
    return text.rstrip().rstrip("#").rstrip()


def _indent(spaces: str) -> str:
    """Nested list items: Slack collapses leading spaces, so indent with em spaces."""
    depth = len(spaces.expandtabs(4)) // 2
    return "\u2003" * depth


def _task(text: str) -> str:
    task = _TASK.match(text)
    if not task:
        return _inline(text)
    box = "☐" if task.group(1) == " " else "☑"
    return f"{box} {_inline(text[task.end() :])}"


def _inline(text: str) -> str:
    held: list[str] = []

    def hold(piece: str) -> str:
        held.append(piece)
        return f"{_HOLD}{len(held) - 1}{_HOLD}"

    code = spans.LooseCodeSpans(text) if "`" in text else spans.NOTHING
    text = spans.sub(code, text, lambda m: hold(f"`{escape(m.group(2).strip())}`"))
    text = _ESCAPED.sub(lambda m: hold(_literal(m.group(1))), text)
    links = spans.Links(text) if "](" in text else spans.NOTHING
    text = spans.sub(links, text, lambda m: hold(_link(m.group(2), m.group(1), _emphasis)))
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
    text = _styled(_BOLD_ITALIC, text, lambda inside: f"{_BOLD}_{inside}_{_BOLD}")
    text = _styled(_BOLD_STARS, text, lambda inside: f"{_BOLD}{inside}{_BOLD}")
    text = _styled(_BOLD_UNDERSCORES, text, lambda inside: f"{_BOLD}{inside}{_BOLD}")
    text = _styled(_ITALIC_STAR, text, lambda inside: f"_{inside}_")
    text = _styled(_STRIKE, text, lambda inside: f"~{inside}~")
    return text.replace(_BOLD, "*")


def _styled(span: spans.Delimited, text: str, style: Callable[[str], str]) -> str:
    return spans.sub(span.finder(text), text, lambda m: style(m.group(1)))


def _link(url: str, label: str, style: Callable[[str], str]) -> str:
    if not is_safe_target(url):
        # Shown, never live: Slack would read `<!channel|x>` as a mention.
        text = style(escape(label)) if label else ""
        return f"{text} ({escape(url)})" if text else escape(url)
    # `|` and `>` would end Slack's <url|label> early; `&` is escaped like all text.
    safe_url = escape(url.replace("|", "%7C"))
    text = style(escape(label.replace("|", "¦"))) if label else ""
    if not text or text == safe_url:
        return f"<{safe_url}>"
    return f"<{safe_url}|{text}>"

"""Markdown from the model -> Telegram HTML, and the length Telegram counts.

HTML is the Telegram dialect that is easiest to produce correctly: three
characters to escape and tags that are balanced by construction. Everything
Telegram has no entity for is kept as readable text: headings become bold
lines, bullets become "•", tables stay as they are. Half-written Markdown (an
unclosed `**` in a streamed reply) stays literal until it closes; an unclosed
code fence is rendered as a code block at once, so a streaming code block
looks like one.

`visible_length` is what Telegram's 4,096 limit applies to: the text after
entity parsing (no tags, entities decoded) in UTF-16 code units. It is exact
for our own output, except that Telegram also trims leading and trailing
whitespace, so it is never below Telegram's count.

Only `http`, `https` and `mailto` targets become `<a href>` links: `tg://user?id=`
would mention someone, `javascript:` and app schemes have no place in a chat;
any other target is shown as text. Every rule runs in time linear in the line:
the inline spans are found by `adapters.spans`, not by lazy regexes that rescan
the rest of the line from every unclosed `**`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

from adapters import spans
from adapters.links import is_safe_target

# The info string's rest must hold no backtick; checked apart, as `[^`]*$` after
# `\s*` would try every split of a long run of spaces.
_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]{0,32})")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*)$")
_RULE = re.compile(r"^\s{0,3}([-*_])(?:\s*\1){2,}\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_QUOTE = re.compile(r"^\s{0,3}>\s?(.*)$")
_TAG = re.compile(r"<[^>]*>")
_ENTITIES = (("&lt;", "<"), ("&gt;", ">"), ("&quot;", '"'), ("&#x27;", "'"), ("&amp;", "&"))

# The label holds no bracket, the target no parenthesis: a failed candidate stops
# at the next `[` or `(`, so no text is scanned from more than one of them.
_MARKUP = re.compile(r"[\\`\[*_~]")  # a line without these is plain text
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_LINK = re.compile(r"\[([^\[\]\n]+)\]\(([^()\s]+)(?:\s+\"[^\"\n]*\")?\)")
_BOLD = (
    spans.Delimited("*", r"\*\*(?=\S)", r"(?<=\S)\*\*"),
    spans.Delimited("_", r"(?<!\w)__(?=\S)", r"(?<=\S)__(?!\w)"),
)
_STRIKE = spans.Delimited("~", r"~~(?=\S)", r"(?<=\S)~~")
_ITALIC = (
    spans.Delimited("*", r"(?<![\w*])\*(?=[^\s*])", r"(?<=[^\s*])\*(?![\w*])"),
    spans.Delimited("_", r"(?<![\w_])_(?=[^\s_])", r"(?<=[^\s_])_(?![\w_])"),
)


def render(markdown: str) -> str:
    """Telegram HTML (parse_mode="HTML") for `markdown`; lines and blank lines are kept."""
    out: list[str] = []
    lines = markdown.split("\n")
    i = 0
    while i < len(lines):
        fence = _fence(lines[i])
        if fence:
            i = _code_block(lines, i, fence, out)
        elif _QUOTE.match(lines[i]):
            i = _quote_block(lines, i, out)
        else:
            out.append(_line(lines[i]))
            i += 1
    return "\n".join(out)


def visible_text(telegram_html: str) -> str:
    """The text Telegram shows for HTML we rendered (our text never holds a raw `<`).

    Our HTML holds no entities but those `html.escape` writes, so five replaces
    decode it (`&amp;` last), many times faster than `html.unescape` on a reply
    full of `<` or `&`."""
    text = _TAG.sub("", telegram_html)
    if "&" not in text:
        return text
    for entity, char in _ENTITIES:
        text = text.replace(entity, char)
    return text


def utf16_length(text: str) -> int:
    """Length in UTF-16 code units, the unit of Telegram's limits and entity offsets."""
    return len(text.encode("utf-16-le")) // 2


def visible_length(telegram_html: str) -> int:
    return utf16_length(visible_text(telegram_html))


def _fence(line: str) -> re.Match[str] | None:
    fence = _FENCE.match(line)
    return fence if fence and "`" not in line[fence.end(1) :] else None


def _code_block(lines: list[str], start: int, fence: re.Match[str], out: list[str]) -> int:
    marker, language = fence.group(1), fence.group(2)
    closing = re.compile(rf"^\s{{0,3}}{re.escape(marker[0])}{{{len(marker)},}}\s*$")
    end = start + 1
    while end < len(lines) and not closing.match(lines[end]):
        end += 1
    code = html.escape("\n".join(lines[start + 1 : end]), quote=False)
    if language:
        out.append(f'<pre><code class="language-{html.escape(language)}">{code}</code></pre>')
    else:
        out.append(f"<pre>{code}</pre>")
    return end + 1


def _quote_block(lines: list[str], start: int, out: list[str]) -> int:
    end, quoted = start, []
    while end < len(lines) and (match := _QUOTE.match(lines[end])):
        quoted.append(inline(match.group(1)))
        end += 1
    out.append("<blockquote>" + "\n".join(quoted) + "</blockquote>")
    return end


def _line(line: str) -> str:
    if heading := _HEADING.match(line):
        return f"<b>{inline(_heading_text(heading.group(1)))}</b>"
    if _RULE.match(line):
        return "———"
    if bullet := _BULLET.match(line):
        return f"{bullet.group(1)}• {inline(bullet.group(2))}"
    return inline(line)


def _heading_text(text: str) -> str:
    """A heading's text without its closing hashes (`## Title ##`; `C#` keeps its `#`)."""
    text = text.rstrip()
    unclosed = text.rstrip("#")
    return unclosed.rstrip() if unclosed != text and unclosed[-1:].isspace() else text


def inline(text: str, *, in_link: bool = False) -> str:
    """Render the inline Markdown of one line (code, links, bold, italic, strikethrough)."""
    if _MARKUP.search(text) is None:
        return _text(text)
    finders = _finders(text, in_link)
    # The leftmost span wins, the earlier finder on a tie; searches only move forward.
    found = [finder.search(0) for finder, _ in finders]
    out: list[str] = []
    pos = 0
    while True:
        if "\\" in text:
            pos = _escapes_at(text, pos, out)
        best, chosen = -1, None
        for index, match in enumerate(found):
            if match is not None and match.start() < pos:
                match = found[index] = finders[index][0].search(pos)
            if match is not None and (chosen is None or match.start() < chosen.start()):
                best, chosen = index, match
        if chosen is None:
            break
        if chosen.start() > pos:
            out.append(_text(text[pos : chosen.start()]))
        out.append(finders[best][1](chosen))
        pos = chosen.end()
    out.append(_text(text[pos:]))
    return "".join(out)


def _escapes_at(text: str, pos: int, out: list[str]) -> int:
    """Take the backslash escapes that start right at `pos`: nothing else can start
    earlier, and an escape wins a tie, so the other finders need not be asked."""
    while (escape := _ESCAPE.match(text, pos)) is not None:
        out.append(_text(escape.group(1)))
        pos = escape.end()
    return pos


def _finders(text: str, in_link: bool) -> list[tuple[spans.Finder, Callable[[spans.Span], str]]]:
    """The spans `text` may hold, in the order that breaks a tie; absent ones are left out."""
    finders: list[tuple[spans.Finder, Callable[[spans.Span], str]]] = []
    if "\\" in text:
        finders.append((spans.Searched(_ESCAPE, text), lambda m: _text(m.group(1))))
    if "`" in text:
        finders.append((spans.ExactCodeSpans(text), lambda m: _code_span(m, in_link)))
    if "](" in text:
        finders.append((spans.Searched(_LINK, text), lambda m: _link(m, in_link)))
    if "**" in text or "__" in text:
        finders.append((_either(_BOLD, text), lambda m: _wrap("b", m, in_link)))
    if "~~" in text:
        finders.append((_STRIKE.finder(text), lambda m: _wrap("s", m, in_link)))
    if "*" in text or "_" in text:
        finders.append((_either(_ITALIC, text), lambda m: _wrap("i", m, in_link)))
    return finders


def _either(delimited: tuple[spans.Delimited, ...], text: str) -> spans.Finder:
    return spans.Alternatives([span.finder(text) for span in delimited])


def _text(text: str) -> str:
    return html.escape(text, quote=False)


def _code_span(match: spans.Span, in_link: bool) -> str:
    code = match.group(2)
    if len(code) > 1 and code.startswith(" ") and code.endswith(" "):
        code = code[1:-1]
    # Telegram does not allow a code entity inside a link: keep the text, drop the style.
    return _text(code) if in_link else f"<code>{_text(code)}</code>"


def _link(match: spans.Span, in_link: bool) -> str:
    label, url = match.group(1), match.group(2)
    if in_link:
        return _text(match.group(0))  # Telegram has no link inside a link
    if not is_safe_target(url):
        return f"{inline(label)} ({_text(url)})"
    return f'<a href="{html.escape(url, quote=True)}">{inline(label, in_link=True)}</a>'


def _wrap(tag: str, match: spans.Span, in_link: bool) -> str:
    return f"<{tag}>{inline(match.group(1), in_link=in_link)}</{tag}>"

"""Markdown -> Telegram HTML: valid for Telegram's parser, and measured as Telegram counts."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from adapters.telegram.render import render, utf16_length, visible_length, visible_text
from tests.fakes.telegram_api import parse_html

SAMPLES = [
    "plain text",
    "**bold** and *italic* and _also_ and ~~gone~~ and `co<de>`",
    "# Heading with **bold**\n\nParagraph & <tags> stay text > quoted",
    "- one\n* two\n+ three\n  - nested *it*",
    "> quoted **bold**\n> second line\n\nafter",
    "```python\nif a < b and c > d:\n    print('&')\n```",
    "```\nunterminated fence, still streaming <x>",
    "[a link](https://example.com/?q=1&r=2) and [not a link](javascript:alert(1))",
    "[**bold label** with `code`](https://example.com)",
    "snake_case_names and 2 * 3 * 4 and a*b*c",
    "**unclosed bold and `unclosed code",
    "\\*escaped\\* and \\_this\\_",
    "emoji 😀 and 𝕏 outside the BMP",
    "***both*** and **_mixed_**",
    "",
]


@pytest.mark.parametrize("markdown", SAMPLES)
def test_rendered_html_is_accepted_by_telegrams_rules(markdown: str) -> None:
    rendered = render(markdown)
    assert parse_html(rendered) == visible_text(rendered)


def test_formatting_becomes_tags() -> None:
    assert render("**b** *i* ~~s~~ `c`") == "<b>b</b> <i>i</i> <s>s</s> <code>c</code>"
    assert render("# Title") == "<b>Title</b>"
    assert render("- item") == "• item"


def test_text_is_escaped_and_links_keep_their_target() -> None:
    assert render("a < b & c > d") == "a &lt; b &amp; c &gt; d"
    assert render("[x](https://e.com/?a=1&b=2)") == '<a href="https://e.com/?a=1&amp;b=2">x</a>'


def test_code_block_keeps_its_language_and_text() -> None:
    rendered = render("```python\nx = 1 < 2\n```")
    assert rendered == '<pre><code class="language-python">x = 1 &lt; 2</code></pre>'


def test_words_with_underscores_and_lone_stars_stay_literal() -> None:
    assert render("my_var_name") == "my_var_name"
    assert render("2 * 3 * 4") == "2 * 3 * 4"


def test_half_written_emphasis_stays_literal_while_streaming() -> None:
    assert visible_text(render("**still writ")) == "**still writ"


def test_length_is_counted_in_utf16_code_units_of_the_visible_text() -> None:
    assert utf16_length("😀") == 2
    assert visible_length(render("**😀**")) == 2
    assert visible_length(render("`<&>`")) == 3
    assert visible_length(render("[label](https://example.com/a/long/path)")) == 5


def test_line_structure_is_kept() -> None:
    markdown = "one\n\ntwo\nthree"
    assert visible_text(render(markdown)) == markdown


class _Links(HTMLParser):
    """The targets of every `<a>` in rendered HTML, as a browser would read them."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.targets.extend(value for name, value in attrs if name == "href")


def link_targets(rendered: str) -> list[str | None]:
    links = _Links()
    links.feed(rendered)
    return links.targets


@pytest.mark.parametrize(
    ("markdown", "shown"),
    [
        ("[x](javascript:alert)", "x (javascript:alert)"),
        ("[x](JavaScript:alert)", "x (JavaScript:alert)"),
        ("[x](javascript:alert(1))", "[x](javascript:alert(1))"),
        ("[x](tg://user?id=123456)", "x (tg://user?id=123456)"),
        ("[x](tg://resolve?domain=someone)", "x (tg://resolve?domain=someone)"),
        ("[x](data:text/html,<script>)", "x (data:text/html,<script>)"),
        ("[x](vbscript:msgbox)", "x (vbscript:msgbox)"),
        ("[x](file:///etc/passwd)", "x (file:///etc/passwd)"),
        ("[x](//evil.example)", "x (//evil.example)"),
        ("[**x**](javascript:alert)", "x (javascript:alert)"),
        ('<a href="javascript:alert(1)">x</a>', '<a href="javascript:alert(1)">x</a>'),
    ],
)
def test_only_web_and_mail_targets_become_links(markdown: str, shown: str) -> None:
    rendered = render(markdown)
    assert link_targets(rendered) == []
    assert parse_html(rendered) == shown


@pytest.mark.parametrize(
    ("markdown", "target"),
    [
        ("[x](https://e.io/a?b=1&c=2)", "https://e.io/a?b=1&c=2"),
        ("[x](HTTPS://E.IO)", "HTTPS://E.IO"),
        ("[x](mailto:a@b.io)", "mailto:a@b.io"),
        ('[x](https://e.io/"onclick="alert)', 'https://e.io/"onclick="alert'),
        ('[x](https://e.io/"><b>x)', 'https://e.io/"><b>x'),
        ("[x](https://e.io/'a'<>)", "https://e.io/'a'<>"),
    ],
)
def test_a_link_target_cannot_leave_its_attribute(markdown: str, target: str) -> None:
    rendered = render(markdown)
    assert link_targets(rendered) == [target]
    assert parse_html(rendered) == "x"

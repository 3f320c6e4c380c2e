"""Markdown -> Slack mrkdwn."""

from __future__ import annotations

import pytest

from adapters.slack.mrkdwn import to_mrkdwn


@pytest.mark.parametrize(("markdown", "mrkdwn"), [
    ("**bold** and __also__", "*bold* and *also*"),
    ("*italic* and _italic_", "_italic_ and _italic_"),
    ("***both***", "*_both_*"),
    ("~~gone~~", "~gone~"),
    ("# Title", "*Title*"),
    ("### **Bold** title with `code`", "*Bold title with `code`*"),
    ("[the docs](https://example.com/a?b=1&c=2)", "<https://example.com/a?b=1&amp;c=2|the docs>"),
    ("[**bold** label](https://x.io)", "<https://x.io|*bold* label>"),
    ("<https://auto.link/x>", "<https://auto.link/x>"),
    ("![a chart](https://img.io/c.png)", "<https://img.io/c.png|a chart>"),
    ("- one\n* two\n+ three", "• one\n• two\n• three"),
    ("1. first\n2) second", "1. first\n2. second"),
    ("- [ ] todo\n- [x] done", "• ☐ todo\n• ☑ done"),
    ("> quoted\n> still quoted", "> quoted\n> still quoted"),
    ("a & b < c > d", "a &amp; b &lt; c &gt; d"),
    ("5 * 3 = 15, a*b and snake_case_name", "5 * 3 = 15, a*b and snake_case_name"),
    ("**not closed yet", "**not closed yet"),
    ("---", "──────────"),
])
def test_inline_and_line_rules(markdown: str, mrkdwn: str) -> None:
    assert to_mrkdwn(markdown) == mrkdwn


def test_code_is_left_alone_but_escaped() -> None:
    markdown = "Use `a**b**c` or `x < y && z`:\n\n```python\nif a < b and **kw:\n    pass\n```"
    assert to_mrkdwn(markdown) == (
        "Use `a**b**c` or `x &lt; y &amp;&amp; z`:\n\n```\nif a &lt; b and **kw:\n    pass\n```"
    )


def test_the_model_cannot_ping_a_channel_or_a_user() -> None:
    rendered = to_mrkdwn("hey <!channel> <@U123> `<!here>`\n```\n<!everyone>\n```")
    assert "<!" not in rendered
    assert "<@" not in rendered


def test_an_unclosed_fence_is_closed_so_a_streaming_reply_renders() -> None:
    assert to_mrkdwn("Here:\n```js\nlet x = 1") == "Here:\n```\nlet x = 1\n```"


def test_backslash_escapes_stay_literal() -> None:
    assert to_mrkdwn(r"\*not bold\* and 2 \* 3") == "∗not bold∗ and 2 ∗ 3"
    assert to_mrkdwn(r"\[not a link\](x)") == "[not a link](x)"


def test_a_table_becomes_a_code_block() -> None:
    table = "| a | b |\n|---|:-:|\n| 1 | 2 |\n\nafter"
    assert to_mrkdwn(table) == "```\n| a | b |\n| 1 | 2 |\n```\n\nafter"


def test_nested_lists_are_indented() -> None:
    expected = "• top\n\u2003• nested\n\u2003\u2003• deeper"
    assert to_mrkdwn("- top\n  - nested\n    - deeper") == expected


def test_a_pipe_in_a_url_cannot_end_the_link_early() -> None:
    assert to_mrkdwn("[x](https://a.io/p|q)") == "<https://a.io/p%7Cq|x>"


def test_plain_text_and_blank_lines_survive() -> None:
    assert to_mrkdwn("one\n\ntwo\nthree\n") == "one\n\ntwo\nthree"

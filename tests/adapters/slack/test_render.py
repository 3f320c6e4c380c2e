"""Markdown -> Slack mrkdwn."""

from __future__ import annotations

import pytest

from adapters.slack.render import safe_markdown, to_mrkdwn


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**bold** and __also__", "*bold* and *also*"),
        ("*italic* and _italic_", "_italic_ and _italic_"),
        ("***both***", "*_both_*"),
        ("~~gone~~", "~gone~"),
        ("# Title", "*Title*"),
        ("### **Bold** title with `code`", "*Bold title with `code`*"),
        (
            "[the docs](https://example.com/a?b=1&c=2)",
            "<https://example.com/a?b=1&amp;c=2|the docs>",
        ),
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
    ],
)
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


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("[here](!channel)", "here (!channel)"),
        ("[everyone](!everyone) [all](!here)", "everyone (!everyone) all (!here)"),
        ("[x](@U0123)", "x (@U0123)"),
        ("[t](!subteam^S1)", "t (!subteam^S1)"),
        ("[room](#C0123)", "room (#C0123)"),
        ("[when](!date^1392734382^{date}|x)", "when (!date^1392734382^{date}|x)"),
        ("[x](<!channel>)", "x (!channel)"),
        ("![chart](!here)", "chart (!here)"),
        ("[](!channel)", "!channel"),
        ("[**loud**](!channel)", "*loud* (!channel)"),
        ("[x](javascript:alert(1))", "x (javascript:alert(1))"),
        ("[x](slack://open?team=T1)", "x (slack://open?team=T1)"),
        ("[x](ftp://files.io/a)", "x (ftp://files.io/a)"),
        ("[x](./relative/path)", "x (./relative/path)"),
        ("[x](https://e.io/<!here>)", "<https://e.io/&lt;!here|x>"),
        ("[x](https://e.io/|<!here)", "<https://e.io/%7C&lt;!here|x>"),
        ("[<!here>](https://e.io)", "<https://e.io|&lt;!here&gt;>"),
        ("[mail](mailto:a@b.io)", "<mailto:a@b.io|mail>"),
        ("[web](HTTPS://E.IO)", "<HTTPS://E.IO|web>"),
    ],
)
def test_only_web_and_mail_targets_become_links(markdown: str, mrkdwn: str) -> None:
    assert to_mrkdwn(markdown) == mrkdwn


@pytest.mark.parametrize(
    "markdown",
    [
        "<!here> <!channel> <!everyone>",
        "<!channel|channel> <@U0123|bob> <#C0123|general>",
        "<!subteam^S0123|team> <!date^1392734382^{date}|Feb>",
        "`<!here>` and `<@U0123>`",
        "```\n<!channel>\n<@U0123>\n<#C0123>\n```",
        "> <!here> quoted",
        "- <@U0123> in a list",
        "# <!channel> in a heading",
        "| <!here> | a |\n|---|---|\n| <@U1> | b |",
        "**<!here>** _<@U0123>_ ~<#C1>~",
        "\\<!here\\>",
        "<mailto:x|<!here>>",
    ],
)
def test_raw_mention_syntax_is_shown_as_text(markdown: str) -> None:
    rendered = to_mrkdwn(markdown)
    for opening in ("<!", "<@", "<#"):
        assert opening not in rendered


@pytest.mark.parametrize(
    "markdown",
    [
        "hey <!channel> and <!here|here> and <!everyone>",
        "ask <@U123> or <@W9|someone> in <#C1> or <!subteam^S1>",
        "`<!here>` in code\n```\n<@U123> <!channel>\n```",
        "@channel @here @everyone, look",
    ],
)
def test_safe_markdown_never_pings(markdown: str) -> None:
    safe = safe_markdown(markdown)
    for ping in ("<!", "<@", "<#", "@channel", "@here", "@everyone"):
        assert ping not in safe
    # Shown as written: only invisible characters were added.
    assert safe.replace("\u200b", "").replace("\u2060", "") == markdown


def test_safe_markdown_keeps_safe_links_and_defuses_the_others() -> None:
    markdown = (
        "[docs](https://example.com/a) <https://auto.link> [mail](mailto:a@b.c)\n"
        "[x](javascript:alert(1)) ![i](data:image/png) <slack://open> <tel:123>"
    )
    safe = safe_markdown(markdown).split("\n")
    assert safe[0] == "[docs](https://example.com/a) <https://auto.link> [mail](mailto:a@b.c)"
    assert "](javascript" not in safe[1] and "](data" not in safe[1]
    assert "<slack:" not in safe[1] and "<tel:" not in safe[1]


def test_safe_markdown_leaves_code_as_it_is() -> None:
    markdown = (
        "`[x](javascript:y)` and\n```cpp\nstd::vector<std::string> v; // <!DOCTYPE html>\n```"
    )
    assert safe_markdown(markdown) == markdown


def test_safe_markdown_of_a_growing_text_grows() -> None:
    """Each rule adds a character where the text already is: what a stream appended
    stays a prefix of the safe form of the longer text."""
    final = "see [docs](javascript:alert(1)) and <!here> or @channel, then <https://ok.io>"
    for end in range(len(final)):
        word_end = final.rfind(" ", 0, end)
        if word_end < 0:
            continue
        settled = safe_markdown(final[:word_end])
        assert safe_markdown(final).startswith(settled), final[:word_end]

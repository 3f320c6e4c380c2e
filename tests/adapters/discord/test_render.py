"""Markdown -> Discord: near the identity, but no live link to anything but the web or mail."""

from __future__ import annotations

import pytest

from adapters.discord.render import render


@pytest.mark.parametrize(
    ("markdown", "shown"),
    [
        ("[t](javascript:alert(1))", "t (javascript:alert(1))"),
        ("[t](JAVASCRIPT:alert)", "t (JAVASCRIPT:alert)"),
        ("[t](<javascript:alert>)", "t (javascript:alert)"),
        ("[t]( javascript:alert )", "t (javascript:alert)"),
        ('[t](javascript:alert "title")', "t (javascript:alert)"),
        ("[t](discord://-/channels/1/2)", "t (discord://-/channels/1/2)"),
        ("[t](steam://run/10)", "t (steam://run/10)"),
        ("[t](data:text/html,x)", "t (data:text/html,x)"),
        ("[](javascript:alert)", "javascript:alert"),
        ("![chart](javascript:alert)", "chart (javascript:alert)"),
        ("#### [t](javascript:alert)", "**t (javascript:alert)**"),
        ("see [a](vbscript:x) and [b](https://e.io)", "see a (vbscript:x) and [b](https://e.io)"),
    ],
)
def test_only_web_and_mail_targets_stay_links(markdown: str, shown: str) -> None:
    assert render(markdown) == shown


@pytest.mark.parametrize(
    ("markdown", "rendered"),
    [
        ("[docs](https://e.io/a?b=1)", "[docs](https://e.io/a?b=1)"),
        ("[mail](mailto:a@b.io)", "[mail](mailto:a@b.io)"),
        ("![a chart](https://img.io/c.png)", "[a chart](https://img.io/c.png)"),
        ("![](https://img.io/c.png)", "[image](https://img.io/c.png)"),
        ("`[t](javascript:x)` stays code", "`[t](javascript:x)` stays code"),
        ("```\n[t](javascript:x)\n![a](b)\n```", "```\n[t](javascript:x)\n![a](b)\n```"),
        ("#### Title ##", "**Title**"),
        ("### Kept", "### Kept"),
        ("@everyone <@&123> <@456> <#789>", "@everyone <@&123> <@456> <#789>"),
        ("", "…"),
    ],
)
def test_everything_else_passes_through(markdown: str, rendered: str) -> None:
    assert render(markdown) == rendered

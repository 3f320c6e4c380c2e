"""Mentions of the bot stripped from a message's text."""

from __future__ import annotations

import re

from adapters.mentions import strip_mentions


def test_mentions_are_stripped_without_leaving_runs_of_spaces() -> None:
    mention = re.compile(r"<@U0BOT>")
    assert strip_mentions("<@U0BOT>  hello  <@U0BOT> there", mention) == "hello there"

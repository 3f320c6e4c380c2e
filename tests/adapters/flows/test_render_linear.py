"""Rendering and splitting a long hostile reply stays fast on every platform.

A reply is rendered and split on every streamed flush, on the worker's event
loop; these inputs made the old regex converters take seconds to minutes. The
one time bound of the suite: a linear converter takes a small part of it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from adapters.discord import render as discord_render
from adapters.discord.sender import DiscordSender
from adapters.slack.client import web_client
from adapters.slack.render import to_mrkdwn
from adapters.slack.sender import SlackSender
from adapters.telegram import render as markup
from adapters.telegram.client import BotClient
from adapters.telegram.sender import TelegramSender
from gateway.delivery.splitting import split_markdown
from gateway.messages import Address
from tests.support.adversarial import adversarial, within_a_second

SIZE = 100_000
SHAPES = (
    "link-open",
    "image-open",
    "star-word",
    "double-star",
    "triple-star",
    "underscore-word",
    "double-underscore",
    "tilde-pair",
    "nested-brackets",
    "autolink-open",
    "quote-run",
    "heading-spaces",
    "fence-spaces",
    "table-spaces",
    "escapes",
    "mix",
)
UNREACHABLE = "http://127.0.0.1:9"  # nothing is sent: only the senders' measures are used


@dataclass(frozen=True)
class Platform:
    render: Callable[[str], str]
    measure: Callable[[str], int]
    limit: int


@pytest.fixture(params=["slack", "telegram", "discord"])
async def platform(request: pytest.FixtureRequest) -> AsyncIterator[Platform]:
    address = Address(platform=request.param, workspace="w", channel="1")
    if request.param == "slack":
        slack = SlackSender(web_client("xoxb-test", f"{UNREACHABLE}/api/"), edit_interval=1.0)
        yield Platform(to_mrkdwn, slack.measure, slack.limits(address).max_length)
        await slack.aclose()
    elif request.param == "telegram":
        telegram = TelegramSender(
            BotClient.build("1:test", f"{UNREACHABLE}/bot"),
            edit_interval=1.0,
            group_edit_interval=3.0,
        )
        yield Platform(markup.render, telegram.measure, telegram.limits(address).max_length)
        await telegram.aclose()
    else:
        discord = DiscordSender("test", edit_interval=1.0)
        yield Platform(discord_render.render, discord.measure, discord.limits(address).max_length)
        await discord.aclose()


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_long_hostile_reply_renders_within_a_second(platform: Platform, shape: str) -> None:
    text = adversarial(shape, SIZE)
    within_a_second(lambda: platform.render(text))


@pytest.mark.parametrize("shape", SHAPES)
async def test_a_long_hostile_reply_splits_within_a_second(platform: Platform, shape: str) -> None:
    text = adversarial(shape, SIZE)
    pieces = within_a_second(lambda: split_markdown(text, platform.limit, platform.measure))
    assert all(platform.measure(piece) <= platform.limit for piece in pieces)

"""The feedback buttons under a reply's last message, in a channel and on an interaction's
follow-up; and a follow-up whose interaction token ran out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.buttons import FEEDBACK_DOWN_LABEL, FEEDBACK_UP_LABEL
from adapters.discord.sender import DiscordSender
from gateway.errors import PlatformError
from gateway.messages import Address
from tests.fakes.discord_api import FakeDiscord

GUILD, CHANNEL = "1200000000000000001", "1300000000000000001"
FEEDBACK_ROW = [
    {
        "type": 1,
        "components": [
            {"type": 2, "style": 2, "label": FEEDBACK_UP_LABEL, "custom_id": "f:up"},
            {"type": 2, "style": 2, "label": FEEDBACK_DOWN_LABEL, "custom_id": "f:down"},
        ],
    }
]


@pytest.fixture
async def sender(fake_discord: FakeDiscord) -> AsyncIterator[DiscordSender]:
    client = DiscordSender(fake_discord.token, edit_interval=1.0)
    yield client
    await client.aclose()


def channel() -> Address:
    return Address(platform="discord", workspace=GUILD, channel=CHANNEL)


def deferred(fake_discord: FakeDiscord) -> Address:
    """The address of an interaction's follow-up, its interaction deferred already."""
    interaction = fake_discord.interaction(
        CHANNEL, "what?", fake_discord.user("42"), guild_id=GUILD
    )
    fake_discord.callbacks[interaction["token"]] = {"type": 5}  # the gateway process deferred it
    return channel().model_copy(update={"token": interaction["token"], "side": True})


def buttons(components: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The buttons of a message's rows, with the fields the buttons are made of."""
    fields = ("type", "style", "label", "custom_id")
    return [
        {
            "type": row["type"],
            "components": [{k: b.get(k) for k in fields} for b in row["components"]],
        }
        for row in components
    ]


@pytest.mark.parametrize("where", ["channel", "follow-up"])
async def test_a_final_message_asked_for_feedback_carries_the_two_buttons(
    fake_discord: FakeDiscord, sender: DiscordSender, where: str
) -> None:
    address = channel() if where == "channel" else deferred(fake_discord)
    posted = await sender.send(address, "the whole answer", final=True, feedback=True)
    assert buttons(fake_discord.messages[posted]["components"]) == FEEDBACK_ROW

    drafted = await sender.send(address, "a draft", final=False)
    assert fake_discord.messages[drafted]["components"] == []
    await sender.edit(address, drafted, "a longer draft", final=False)
    assert fake_discord.messages[drafted]["components"] == []
    await sender.edit(address, drafted, "the answer", final=True, feedback=True)
    assert buttons(fake_discord.messages[drafted]["components"]) == FEEDBACK_ROW


async def test_without_feedback_no_components_are_sent_at_all(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    for address in (channel(), deferred(fake_discord)):
        message_id = await sender.send(address, "answer", final=True)
        await sender.edit(address, message_id, "answer, edited", final=True)
    bodies = [
        call.body
        for call in fake_discord.calls
        if call.method in ("POST", "PATCH")
        and ("/messages" in call.path or "/webhooks/" in call.path)
    ]
    assert len(bodies) == 4 and all("components" not in body for body in bodies)


async def test_a_followup_after_the_interaction_token_ran_out_is_a_platform_error(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    address = deferred(fake_discord)
    message_id = await sender.send(address, "in time", final=False)
    assert address.token is not None
    fake_discord.expire(address.token)
    for attempt in (
        sender.send(address, "too late", final=True),
        sender.edit(address, message_id, "too late", final=True),
    ):
        with pytest.raises(PlatformError) as caught:
            await attempt
        assert "50027" in str(caught.value) and address.token not in str(caught.value)
    assert fake_discord.messages[message_id]["content"] == "in time"

"""Feedback clicks on Discord: component interactions `f:up` / `f:down` under a reply,
over the fake gateway, reaching `Ingest.feedback`, each answered (a deferred update when
it counted, an ephemeral refusal when it did not).

Real pieces: discord.py against the loopback REST API and gateway, the real Ingest and
feedback store on a real Redis.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from redis.asyncio import Redis

from adapters.discord.sender import DiscordSender
from gateway.feedback.store import REFUSED_TEXT, UNKNOWN_TEXT, Reply
from gateway.messages import Address
from gateway.state.keys import Keys
from tests.fakes.discord_api import FakeDiscord
from tests.support.discord_helpers import CHANNEL, GUILD, Gateway

SESSION = f"discord:{GUILD}:{CHANNEL}"
ADDRESS = Address(platform="discord", workspace=GUILD, channel=CHANNEL)
USER, STRANGER = "4200000000000000001", "4200000000000000002"
EPHEMERAL = 64
DEFERRED_UPDATE = 6
EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
async def sender(fake_discord: FakeDiscord) -> AsyncIterator[DiscordSender]:
    client = DiscordSender(fake_discord.token, edit_interval=1.0)
    yield client
    await client.aclose()


async def _reply(gateway: Gateway, sender: DiscordSender) -> str:
    """A reply posted and registered as one that takes feedback; its message id."""
    message_id = await sender.send(ADDRESS, "The answer.", final=True)
    reply = Reply("discord", GUILD, CHANNEL, message_id, SESSION, "turn-1", "openai/m")
    await gateway.ingest.feedback_store.register(reply)
    return message_id


async def _clicked(
    fake_discord: FakeDiscord, gateway: Gateway, message_id: str, custom_id: str, user: str
) -> dict[str, Any]:
    """Dispatch a click and wait for its answer; returns the interaction callback."""
    interaction = fake_discord.click(message_id, custom_id, fake_discord.user(user), guild_id=GUILD)
    await fake_discord.dispatch("INTERACTION_CREATE", interaction)
    token = interaction["token"]
    return cast(
        dict[str, Any], await gateway.until(fake_discord, lambda: fake_discord.callbacks.get(token))
    )


async def _votes(gateway: Gateway) -> list[tuple[str, str]]:
    return [(v.user, v.value) for v in await gateway.ingest.feedback_store.since(EPOCH)]


async def _counters(redis: Redis) -> dict[str, str]:
    found = cast(dict[str, str], await redis.hgetall(Keys.METRICS))
    return {field: value for field, value in found.items() if field.startswith("feedback|")}


async def test_a_click_is_recorded_once_and_answered_with_a_deferred_update(
    fake_discord: FakeDiscord, sender: DiscordSender, redis_client: Redis
) -> None:
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        message_id = await _reply(gateway, sender)
        first = await _clicked(fake_discord, gateway, message_id, "f:up", USER)
        again = await _clicked(fake_discord, gateway, message_id, "f:up", USER)
        assert first["type"] == again["type"] == DEFERRED_UPDATE
        assert await _votes(gateway) == [(USER, "up")]
        assert await _counters(redis_client) == {f"feedback|discord|{GUILD}|up|openai/m": "1"}


async def test_the_other_value_replaces_the_first(
    fake_discord: FakeDiscord, sender: DiscordSender, redis_client: Redis
) -> None:
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        message_id = await _reply(gateway, sender)
        await _clicked(fake_discord, gateway, message_id, "f:up", USER)
        await _clicked(fake_discord, gateway, message_id, "f:down", USER)
        assert await _votes(gateway) == [(USER, "down")]
        assert await _counters(redis_client) == {
            f"feedback|discord|{GUILD}|up|openai/m": "0",
            f"feedback|discord|{GUILD}|down|openai/m": "1",
        }


async def test_a_strangers_click_gets_an_ephemeral_refusal_and_changes_nothing(
    fake_discord: FakeDiscord, sender: DiscordSender, redis_client: Redis
) -> None:
    only_user = {"DISCORD_ALLOW_ALL": False, "GATEWAY_ALLOWED_USERS": f"discord:{USER}"}
    async with Gateway(fake_discord, redis_client, **only_user) as gateway:
        await gateway.ready(fake_discord)
        message_id = await _reply(gateway, sender)
        callback = await _clicked(fake_discord, gateway, message_id, "f:down", STRANGER)
        assert callback["data"]["content"] == REFUSED_TEXT
        assert callback["data"]["flags"] & EPHEMERAL
        assert await _votes(gateway) == []
        assert await _counters(redis_client) == {}


async def test_a_click_under_a_message_that_takes_no_feedback_is_told_so(
    fake_discord: FakeDiscord, sender: DiscordSender, redis_client: Redis
) -> None:
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        message_id = await sender.send(ADDRESS, "Not a reply that takes feedback.", final=True)
        callback = await _clicked(fake_discord, gateway, message_id, "f:up", USER)
        assert callback["data"]["content"] == UNKNOWN_TEXT
        assert callback["data"]["flags"] & EPHEMERAL
        assert await _votes(gateway) == []


async def test_a_malformed_or_bots_feedback_click_is_left_alone(
    fake_discord: FakeDiscord, sender: DiscordSender, redis_client: Redis
) -> None:
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        message_id = await _reply(gateway, sender)
        for custom_id, bot in (("f:sideways", False), ("f:up", True)):
            user = fake_discord.user(USER, bot=bot)
            interaction = fake_discord.click(message_id, custom_id, user, guild_id=GUILD)
            await fake_discord.dispatch("INTERACTION_CREATE", interaction)
        # A valid click after them is answered: the ones before it were seen and dropped.
        await _clicked(fake_discord, gateway, message_id, "f:down", USER)
        assert len(fake_discord.callbacks) == 1
        assert await _votes(gateway) == [(USER, "down")]

"""The application commands: registered for server and user installs, and each one,
wherever it is used, handed to the real Ingest with the typed command's effect."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.inbound.ingest import Receipt
from gateway.messages import Inbound
from gateway.state.keys import Keys
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.discord_rules import (
    BOT_DM_CONTEXT,
    GUILD_CONTEXT,
    PRIVATE_CHANNEL_CONTEXT,
)
from tests.support.discord_helpers import CHANNEL, GUILD, Gateway

NAMES = ["btw", "stop", "reset", "status", "usage"]
# A server the bot is not in (the fake knows nothing of it), and a group DM.
FOREIGN_GUILD, FOREIGN_CHANNEL = "1400000000000000001", "1500000000000000001"
GROUP_DM = "1600000000000000001"
DM = "555"


@dataclass(frozen=True)
class Place:
    """Where a command is used, and whether the bot reads typed messages there."""

    channel: str
    guild: str | None
    context: int
    user_install: bool
    bot_reads: bool


PLACES = {
    "server channel": Place(CHANNEL, GUILD, GUILD_CONTEXT, False, True),
    "bot DM": Place(DM, None, BOT_DM_CONTEXT, False, True),
    "bot DM, user install": Place(DM, None, BOT_DM_CONTEXT, True, True),
    "server without the bot, user install": Place(
        FOREIGN_CHANNEL, FOREIGN_GUILD, GUILD_CONTEXT, True, False
    ),
    "group DM, user install": Place(GROUP_DM, None, PRIVATE_CHANNEL_CONTEXT, True, False),
}
# What each command does, typed or not: Ingest's receipt and the job it leaves.
EFFECTS = {
    "btw": (Receipt.SIDE, "side", None),
    "stop": (Receipt.COMMAND, "notice", "Nothing is running."),
    "reset": (Receipt.COMMAND, "notice", "Started a fresh conversation."),
    "status": (Receipt.COMMAND, "status", None),
    "usage": (Receipt.COMMAND, "usage", None),
}


async def jobs(redis: Redis) -> list[dict[str, Any]]:
    entries = await redis.xrange(Keys.jobs("discord", 0))
    return [{**fields, "payload": json.loads(fields["payload"])} for _, fields in entries]


async def use(
    fake: FakeDiscord, gateway: Gateway, name: str, place: Place, user: dict[str, Any]
) -> tuple[dict[str, Any], Inbound, Receipt]:
    """Invoke `/name` at `place`; the interaction, what Ingest got and its receipt."""
    interaction = fake.invoke(
        name,
        place.channel,
        user,
        guild_id=place.guild,
        context=place.context,
        user_install=place.user_install,
        question="what did we decide?" if name == "btw" else "",
    )
    count = len(gateway.ingest.seen)
    await fake.dispatch("INTERACTION_CREATE", interaction)
    seen = await gateway.seen(fake, count + 1)
    inbound, receipt = seen[count]
    return interaction, inbound, receipt


async def first_message(pubsub: Any, within: float = 5.0) -> Any:
    """The first message published on the subscribed channel (the subscription's own
    confirmation skipped); None when none came within `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        message = await pubsub.get_message(timeout=deadline - time.monotonic())
        if message is not None and message["type"] == "message":
            return message
    return None


async def typed(
    fake: FakeDiscord, gateway: Gateway, text: str, place: Place, user: dict[str, Any]
) -> tuple[Inbound, Receipt]:
    """Type `text` at `place` (mentioning the bot in a server)."""
    mention = place.guild is not None
    message = fake.message(
        place.channel,
        f"<@{fake.bot['id']}> {text}" if mention else text,
        user,
        guild_id=place.guild,
        mentions=(fake.bot,) if mention else (),
    )
    count = len(gateway.ingest.seen)
    await fake.dispatch("MESSAGE_CREATE", message)
    return (await gateway.seen(fake, count + 1))[count]


async def test_the_commands_are_registered_for_server_and_user_installs_everywhere(
    fake_discord: FakeDiscord, redis_client: Redis
) -> None:
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        commands = await fake_discord.wait_for(lambda: fake_discord.commands.get("global"))
    assert [c["name"] for c in commands] == NAMES
    for command in commands:
        assert command["integration_types"] == [0, 1], command["name"]
        assert command["contexts"] == [0, 1, 2], command["name"]
        assert command["id"] and 1 <= len(command["description"]) <= 100
    assert [o["name"] for o in commands[0]["options"]] == ["question"]
    assert all(not c["options"] for c in commands[1:])


@pytest.mark.parametrize("where", list(PLACES))
async def test_each_command_has_the_typed_commands_effect_answered_through_the_interaction(
    fake_discord: FakeDiscord, redis_client: Redis, where: str
) -> None:
    place, alice = PLACES[where], fake_discord.user("42")
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        for name in NAMES:
            interaction, inbound, receipt = await use(fake_discord, gateway, name, place, alice)
            receipt_wanted, kind, text = EFFECTS[name]
            assert receipt == receipt_wanted, name
            job = (await jobs(redis_client))[-1]
            assert job["kind"] == kind and job["session"] == inbound.session_key, name
            if text is not None:
                assert job["payload"]["text"] == text, name
            # The answer goes out as the interaction's follow-up, deferred at once.
            assert job["payload"]["address"]["token"] == interaction["token"], name
            assert fake_discord.callbacks[interaction["token"]]["type"] == 5, name
            assert inbound.session_key == (f"discord:{place.guild or 'dm'}:{place.channel}"), name
            assert inbound.is_dm == (place.context == BOT_DM_CONTEXT), name
            if place.bot_reads:
                argument = " what did we decide?" if name == "btw" else ""
                typed_inbound, typed_receipt = await typed(
                    fake_discord, gateway, f"/{name}{argument}", place, alice
                )
                typed_job = (await jobs(redis_client))[-1]
                assert typed_receipt == receipt, name
                assert typed_inbound.session_key == inbound.session_key, name
                assert typed_job["kind"] == job["kind"], name
                assert typed_job["payload"].get("text") == job["payload"].get("text"), name


@pytest.mark.parametrize("where", ["server channel", "bot DM"])
async def test_reset_starts_a_fresh_conversation_and_stop_reaches_the_running_turn(
    fake_discord: FakeDiscord, redis_client: Redis, where: str
) -> None:
    place, alice = PLACES[where], fake_discord.user("42")
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        asked, receipt = await typed(fake_discord, gateway, "remember this", place, alice)
        sessions, session_key = gateway.ingest.sessions, asked.session_key
        assert receipt == Receipt.QUEUED and await sessions.inbox(session_key)
        cancels = redis_client.pubsub()
        await cancels.subscribe(Keys.CANCEL_CHANNEL)
        # A turn running for the session holds its lease (gateway/state/lease.py).
        await redis_client.set(Keys.lease(session_key), "a running turn")
        await use(fake_discord, gateway, "stop", place, alice)
        stopping = (await jobs(redis_client))[-1]
        published = await first_message(cancels)
        await cancels.aclose()
        await redis_client.delete(Keys.lease(session_key))
        await use(fake_discord, gateway, "reset", place, alice)
        assert not await sessions.inbox(session_key)
        assert not await sessions.history(session_key)
    assert stopping["payload"]["text"] == "Stopping the reply."
    assert published is not None and published["data"] == session_key


@pytest.mark.parametrize("where", ["server channel", "server without the bot, user install"])
async def test_a_stranger_is_refused_as_for_messages_and_told_every_time(
    fake_discord: FakeDiscord, redis_client: Redis, where: str
) -> None:
    place, stranger = PLACES[where], fake_discord.user("66", "mallory")
    async with Gateway(
        fake_discord, redis_client, DISCORD_ALLOW_ALL=False, GATEWAY_ALLOWED_USERS="discord:42"
    ) as gateway:
        await gateway.ready(fake_discord)
        _, typed_receipt = await typed(fake_discord, gateway, "hello", PLACES["bot DM"], stranger)
        message_refusal = (await jobs(redis_client))[-1]["payload"]["text"]
        answers = []
        for name in ("status", "reset"):
            interaction, _, receipt = await use(fake_discord, gateway, name, place, stranger)
            job = (await jobs(redis_client))[-1]
            answers.append((receipt, job["kind"], job["payload"], interaction["token"]))
    assert typed_receipt == Receipt.REFUSED and "discord:66" in message_refusal
    for receipt, kind, payload, token in answers:
        assert (receipt, kind) == (Receipt.REFUSED, "notice")
        assert payload["text"] == message_refusal and payload["address"]["token"] == token


async def test_commands_registered_in_a_guild_answer_there_and_only_for_its_members(
    fake_discord: FakeDiscord, redis_client: Redis
) -> None:
    alice = fake_discord.user("42")
    async with Gateway(fake_discord, redis_client, DISCORD_COMMAND_GUILDS=GUILD) as gateway:
        await gateway.ready(fake_discord)
        await fake_discord.wait_for(lambda: fake_discord.commands.get(GUILD))
        interaction, inbound, receipt = await use(
            fake_discord, gateway, "status", PLACES["server channel"], alice
        )
        for elsewhere in ("bot DM", "server without the bot, user install"):
            with pytest.raises(AssertionError, match="offers no"):
                await use(fake_discord, gateway, "status", PLACES[elsewhere], alice)
    assert interaction["data"]["guild_id"] == GUILD
    assert receipt == Receipt.COMMAND and inbound.session_key == f"discord:{GUILD}:{CHANNEL}"
    assert "global" not in fake_discord.commands

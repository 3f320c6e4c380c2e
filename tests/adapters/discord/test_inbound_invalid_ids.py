"""Messages and `/btw` interactions whose snowflakes or content are malformed never become turns.

discord.py reads ids with `int()`, which takes `-5` and `2**70` as readily as a
snowflake, and keeps `content` whatever its JSON type: such events reach the
adapter, which must drop them. Every case is dispatched by the fake gateway to
the real discord.py client feeding the real Ingest on a real Redis, followed by
a control mention that does get through.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest
from redis.asyncio import Redis

from gateway.state.keys import Keys
from tests.fakes.discord_api import FakeDiscord
from tests.support.discord_helpers import CHANNEL, GUILD, Gateway

HUGE = 2**64


def mention(fake_discord: FakeDiscord, text: str, *, dm: bool = False) -> dict[str, Any]:
    author = fake_discord.user("42")
    if dm:
        return fake_discord.message("555", text, author)
    return fake_discord.message(
        CHANNEL,
        f"<@{fake_discord.bot['id']}> {text}",
        author,
        guild_id=GUILD,
        mentions=(fake_discord.bot,),
    )


def messages(fake_discord: FakeDiscord) -> dict[str, dict[str, Any]]:
    """MESSAGE_CREATE bodies, each a mention (or a DM) with one field malformed."""
    cases: dict[str, dict[str, Any]] = {}

    def case(name: str, path: str, value: object, *, dm: bool = False) -> None:
        body = copy.deepcopy(mention(fake_discord, name, dm=dm))
        if path.startswith("message_reference"):
            body["message_reference"] = {"channel_id": body["channel_id"], "type": 0}
        *parents, field = path.split(".")
        target = body
        for parent in parents:
            target = target[parent]
        target[field] = value
        cases[name] = body

    for label, value in (
        ("negative", -1),
        ("a negative string", "-1"),
        ("2**64", HUGE),
        ("2**64 as a string", str(HUGE)),
        ("2**70", 2**70),
        ("-2**63", -(2**63)),
    ):
        case(f"id {label}", "id", value)
    for label, value in (
        ("negative", -5),
        ("a negative string", "-5"),
        ("2**64", HUGE),
        ("2**64 as a string", str(HUGE)),
        ("10**30", 10**30),
    ):
        case(f"channel_id {label}", "channel_id", value)
    for label, value in (
        ("negative", -42),
        ("a negative string", "-42"),
        ("2**64", HUGE),
        ("2**64 as a string", str(HUGE)),
        ("2**100", 2**100),
    ):
        case(f"author.id {label}", "author.id", value)
    for label, value in (
        ("null", None),
        ("a number", 5),
        ("a list", ["hi"]),
        ("an object", {"text": "hi"}),
        ("true", True),
        ("a float", 3.5),
        ("an empty list", []),
    ):
        case(f"content {label}", "content", value)
    for label, value in (
        ("negative", -7),
        ("a negative string", "-7"),
        ("2**64", HUGE),
        ("2**64 as a string", str(HUGE)),
    ):
        case(f"message_reference.message_id {label}", "message_reference.message_id", value)
    case("a DM's id negative", "id", -1, dm=True)
    case("a DM's channel_id 2**64", "channel_id", HUGE, dm=True)
    case("a DM's author.id negative", "author.id", -42, dm=True)
    case("a DM's content null", "content", None, dm=True)
    case("a DM's author.id 2**64 as a string", "author.id", str(HUGE), dm=True)
    case(
        "a DM's message_reference.message_id negative", "message_reference.message_id", -7, dm=True
    )
    return cases


def interactions(fake_discord: FakeDiscord) -> dict[str, dict[str, Any]]:
    """INTERACTION_CREATE bodies for `/btw`, each with one id malformed."""

    def interaction(name: str) -> dict[str, Any]:
        return fake_discord.interaction(CHANNEL, name, fake_discord.user("42"), guild_id=GUILD)

    negative_channel = interaction("/btw channel_id negative")
    negative_channel["channel_id"] = negative_channel["channel"]["id"] = "-5"
    huge_guild = interaction("/btw guild_id 2**64")
    huge_guild["guild_id"] = huge_guild["channel"]["guild_id"] = str(HUGE)
    huge_id = interaction("/btw id 2**64")
    huge_id["id"] = str(HUGE)
    negative_user = interaction("/btw user id negative")
    negative_user["member"]["user"] = {**negative_user["member"]["user"], "id": "-42"}
    return {
        body["data"]["options"][0]["value"]: body
        for body in (negative_channel, huge_guild, huge_id, negative_user)
    }


async def test_messages_and_interactions_with_malformed_ids_are_dropped_with_one_line_each(
    fake_discord: FakeDiscord, redis_client: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    malformed = messages(fake_discord)
    commands = interactions(fake_discord)
    assert len(malformed) >= 32
    control = mention(fake_discord, "the control")
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        with caplog.at_level(logging.INFO):
            caplog.clear()
            for body in malformed.values():
                await fake_discord.dispatch("MESSAGE_CREATE", body)
            for body in commands.values():
                await fake_discord.dispatch("INTERACTION_CREATE", body)
            await fake_discord.dispatch("MESSAGE_CREATE", control)

            def drops() -> list[str]:
                return [r.getMessage() for r in caplog.records if r.name == "adapters.fields"]

            def raised() -> list[str]:  # discord.py's own line for a listener that raised
                return [
                    r.getMessage()
                    for r in caplog.records
                    if r.name == "discord.client" and r.exc_info is not None
                ]

            def taken() -> list[str]:
                return [
                    inbound.text
                    for inbound, _ in gateway.ingest.seen
                    if inbound.message_id != control["id"]
                ]

            # Each case ends one of three ways: dropped with its line, raised, or taken.
            cases = len(malformed) + len(commands)
            await gateway.until(
                fake_discord,
                lambda: (
                    len(drops()) + len(raised()) + len(taken()) >= cases
                    and len(gateway.ingest.seen) > len(taken())
                ),
            )
    assert taken() == [], f"{len(taken())} of {cases} malformed events reached ingest"
    assert raised() == []
    assert len(drops()) == cases and all("\n" not in line for line in drops())
    assert [inbound.text for inbound, _ in gateway.ingest.seen] == ["the control"]
    assert await redis_client.xlen(Keys.jobs("discord", 0)) == 1
    assert not set(fake_discord.callbacks) & {body["token"] for body in commands.values()}

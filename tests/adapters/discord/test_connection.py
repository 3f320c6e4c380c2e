"""The real discord.py client connecting to the fake gateway and REST API, feeding a real Ingest."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from redis.asyncio import Redis

from adapters.discord.platform import INTENT_REFUSED, DiscordPlatform, shard_plan
from gateway.errors import ConfigError, PlatformError
from gateway.inbound.ingest import Ingest, Receipt
from gateway.settings.env import Settings
from gateway.state.health import Health
from gateway.state.keys import Keys
from tests.fakes.discord_api import FakeDiscord, FakeGuild
from tests.support.discord_helpers import (
    CHANNEL,
    CHANNEL_B,
    GUILD,
    GUILD_B,
    INTENTS,
    Gateway,
)


@pytest.fixture
def discord_guilds() -> tuple[FakeGuild, ...]:
    return (FakeGuild(GUILD, channels=(CHANNEL,)), FakeGuild(GUILD_B, channels=(CHANNEL_B,)))


def only(fake_discord: FakeDiscord, predicate: Callable[[Any], bool]) -> list[Any]:
    return [c for c in fake_discord.calls if predicate(c)]


async def test_connects_with_the_intents_registers_the_commands_and_reports_health(
    fake_discord: FakeDiscord, redis_client: Redis
) -> None:
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        identify = fake_discord.identifies[0]
        assert identify["intents"] == INTENTS and identify["shard"] == [0, 1]
        commands = await fake_discord.wait_for(lambda: fake_discord.commands.get("global"))
        assert [c["name"] for c in commands] == ["btw", "stop", "reset", "status", "usage"]
        assert commands[0]["options"][0]["name"] == "question"
        assert "1 of 1 shards" in str(gateway.reports["discord"]["detail"])
    report = json.loads(await redis_client.hget(Keys.HEALTH, "discord") or "{}")
    assert report["up"] is False


async def test_messages_reach_ingest_and_noise_does_not(
    fake_discord: FakeDiscord, redis_client: Redis
) -> None:
    alice, other_bot = fake_discord.user("42"), fake_discord.user("99", "otherbot", bot=True)
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        noise = [
            fake_discord.message(
                CHANNEL,
                f"<@{fake_discord.bot['id']}> hi",
                other_bot,
                guild_id=GUILD,
                mentions=(fake_discord.bot,),
            ),
            fake_discord.message(CHANNEL, "I am the bot", fake_discord.bot, guild_id=GUILD),
            fake_discord.message(CHANNEL, "", alice, guild_id=GUILD, kind=7),
        ]
        for message in noise:
            await fake_discord.dispatch("MESSAGE_CREATE", message)
        edited = fake_discord.message(
            CHANNEL,
            f"<@{fake_discord.bot['id']}> edited",
            alice,
            guild_id=GUILD,
            mentions=(fake_discord.bot,),
        )
        await fake_discord.dispatch(
            "MESSAGE_UPDATE", {**edited, "edited_timestamp": edited["timestamp"]}
        )
        mention = fake_discord.message(
            CHANNEL,
            f"<@{fake_discord.bot['id']}> hello there",
            alice,
            guild_id=GUILD,
            mentions=(fake_discord.bot,),
        )
        await fake_discord.dispatch("MESSAGE_CREATE", mention)
        await fake_discord.dispatch("MESSAGE_CREATE", fake_discord.message("555", "a dm", alice))
        await fake_discord.dispatch(
            "MESSAGE_CREATE", fake_discord.role_mention(CHANNEL, GUILD, "via role", alice)
        )
        seen = await gateway.seen(fake_discord, 3)
    # discord.py runs each event's handler as a task of its own: order is not kept.
    by_text = {inbound.text: (inbound, outcome) for inbound, outcome in seen}
    assert sorted(by_text) == ["a dm", "hello there", "via role"]
    first, outcome = by_text["hello there"]
    assert first.message_id == mention["id"] and first.mentions_bot
    assert outcome == Receipt.QUEUED
    assert by_text["a dm"][0].is_dm and by_text["via role"][0].mentions_bot


async def test_the_btw_command_is_deferred_at_once_and_handed_over(
    fake_discord: FakeDiscord, redis_client: Redis
) -> None:
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        interaction = fake_discord.interaction(
            CHANNEL, "what did we decide?", fake_discord.user("42"), guild_id=GUILD
        )
        started = asyncio.get_running_loop().time()
        await fake_discord.dispatch("INTERACTION_CREATE", interaction)
        seen = await gateway.seen(fake_discord)
        callback = fake_discord.callbacks[interaction["token"]]
    assert callback["type"] == 5  # DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE
    assert not (callback.get("data") or {}).get("flags")  # visible in the channel
    assert asyncio.get_running_loop().time() - started < 3
    inbound, outcome = seen[0]
    assert inbound.text == "/btw what did we decide?" and outcome == Receipt.SIDE
    assert inbound.side_reply.token == interaction["token"]
    assert inbound.event_id == interaction["id"]


async def test_commands_go_to_the_listed_guilds_only(
    fake_discord: FakeDiscord, redis_client: Redis
) -> None:
    async with Gateway(
        fake_discord, redis_client, DISCORD_COMMAND_GUILDS=f"{GUILD},{GUILD_B}"
    ) as gw:
        await gw.ready(fake_discord)
        await fake_discord.wait_for(
            lambda: GUILD in fake_discord.commands and GUILD_B in fake_discord.commands
        )
    assert "global" not in fake_discord.commands
    assert [c["name"] for c in fake_discord.commands[GUILD]][:2] == ["btw", "stop"]


async def test_auto_thread_opens_a_thread_that_becomes_the_session(
    fake_discord: FakeDiscord, redis_client: Redis
) -> None:
    alice = fake_discord.user("42")
    async with Gateway(fake_discord, redis_client, DISCORD_AUTO_THREAD=True) as gateway:
        await gateway.ready(fake_discord)
        mention = fake_discord.message(
            CHANNEL,
            f"<@{fake_discord.bot['id']}> plan the launch",
            alice,
            guild_id=GUILD,
            mentions=(fake_discord.bot,),
        )
        await fake_discord.dispatch("MESSAGE_CREATE", mention)
        inbound, _ = (await gateway.seen(fake_discord))[0]
        follow_up = fake_discord.message(mention["id"], "and the budget?", alice, guild_id=GUILD)
        await fake_discord.dispatch("MESSAGE_CREATE", follow_up)
        later, _ = (await gateway.seen(fake_discord, 2))[1]
    created = fake_discord.calls_to(
        "POST", rf"/channels/{CHANNEL}/messages/{mention['id']}/threads"
    )
    assert created and created[0].body["name"] == "plan the launch"
    assert inbound.channel == mention["id"] and inbound.reply.channel == mention["id"]
    assert later.channel == mention["id"] and later.follows_thread


async def test_a_strangers_mention_opens_no_thread_and_gets_one_refusal(
    fake_discord: FakeDiscord, redis_client: Redis
) -> None:
    stranger, alice = fake_discord.user("66", "mallory"), fake_discord.user("42")
    async with Gateway(
        fake_discord,
        redis_client,
        DISCORD_AUTO_THREAD=True,
        DISCORD_ALLOW_ALL=False,
        GATEWAY_ALLOWED_USERS="discord:42",
    ) as gateway:
        await gateway.ready(fake_discord)
        for text in ("name a thread after me", "and another one"):
            await fake_discord.dispatch(
                "MESSAGE_CREATE",
                fake_discord.message(
                    CHANNEL,
                    f"<@{fake_discord.bot['id']}> {text}",
                    stranger,
                    guild_id=GUILD,
                    mentions=(fake_discord.bot,),
                ),
            )
        await gateway.seen(fake_discord, 2)
        allowed = fake_discord.message(
            CHANNEL,
            f"<@{fake_discord.bot['id']}> plan the launch",
            alice,
            guild_id=GUILD,
            mentions=(fake_discord.bot,),
        )
        await fake_discord.dispatch("MESSAGE_CREATE", allowed)
        seen = await gateway.seen(fake_discord, 3)
    threads = fake_discord.calls_to("POST", rf"/channels/{CHANNEL}/messages/\d+/threads")
    assert [call.body["name"] for call in threads] == ["plan the launch"]
    refused = [inbound for inbound, outcome in seen if outcome == Receipt.REFUSED]
    assert [inbound.speaker.id for inbound in refused] == ["66", "66"]
    assert all(inbound.channel == CHANNEL for inbound in refused)
    jobs = [fields for _, fields in await redis_client.xrange(Keys.jobs("discord", 0))]
    notices = [json.loads(job["payload"])["text"] for job in jobs if job["kind"] == "notice"]
    assert len(notices) == 1 and "discord:66" in notices[0]


async def test_auto_thread_falls_back_to_a_reply_and_logs_once(
    fake_discord: FakeDiscord, redis_client: Redis, caplog: pytest.LogCaptureFixture
) -> None:
    fake_discord.forbid_threads = True
    alice = fake_discord.user("42")
    caplog.set_level(logging.WARNING, logger="adapters.discord.connection")
    async with Gateway(fake_discord, redis_client, DISCORD_AUTO_THREAD=True) as gateway:
        await gateway.ready(fake_discord)
        for text in ("first", "second"):
            await fake_discord.dispatch(
                "MESSAGE_CREATE",
                fake_discord.message(
                    CHANNEL,
                    f"<@{fake_discord.bot['id']}> {text}",
                    alice,
                    guild_id=GUILD,
                    mentions=(fake_discord.bot,),
                ),
            )
        seen = await gateway.seen(fake_discord, 2)
    assert all(inbound.channel == CHANNEL for inbound, _ in seen)
    assert all(inbound.reply.reply_to == inbound.message_id for inbound, _ in seen)
    warnings = [r for r in caplog.records if "Create Public Threads" in r.getMessage()]
    assert len(warnings) == 1


async def test_a_refused_message_content_intent_ends_with_the_clear_line(
    fake_discord: FakeDiscord, redis_client: Redis
) -> None:
    fake_discord.message_content_enabled = False
    gateway = Gateway(fake_discord, redis_client)
    with pytest.raises(ConfigError) as caught:
        await asyncio.wait_for(gateway.platform.connect(gateway.ingest, gateway.health), 40)
    assert str(caught.value) == INTENT_REFUSED
    assert "Message Content" in INTENT_REFUSED and "developer portal" in INTENT_REFUSED


async def test_a_process_runs_only_its_shards(
    fake_discord: FakeDiscord, redis_client: Redis
) -> None:
    async with Gateway(
        fake_discord, redis_client, DISCORD_SHARD_COUNT=2, DISCORD_SHARD_IDS="1"
    ) as gw:
        await gw.until(fake_discord, lambda: fake_discord.identifies)
        assert [i["shard"] for i in fake_discord.identifies] == [[1, 2]]
        report = await gw.until(
            fake_discord, lambda: gw.reports.get("discord-shards-1", {}).get("up")
        )
        await fake_discord.dispatch(
            "MESSAGE_CREATE",
            fake_discord.message(
                CHANNEL_B,
                f"<@{fake_discord.bot['id']}> on shard one",
                fake_discord.user("42"),
                guild_id=GUILD_B,
                mentions=(fake_discord.bot,),
            ),
        )
        ((inbound, _),) = await gw.seen(fake_discord)
    assert report is True
    assert inbound.workspace == GUILD_B


async def test_a_dropped_connection_resumes(fake_discord: FakeDiscord, redis_client: Redis) -> None:
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        downs = gateway.health.reported.count(False)
        await fake_discord.close_sessions(4000)
        await gateway.until(fake_discord, lambda: gateway.health.reported.count(False) > downs)
        await gateway.until(fake_discord, lambda: fake_discord.resumes, within=20)
        await gateway.ready(fake_discord)
        await fake_discord.dispatch(
            "MESSAGE_CREATE", fake_discord.message("555", "still there?", fake_discord.user("42"))
        )
        seen = await gateway.seen(fake_discord)
    assert fake_discord.resumes[0]["session_id"] == "session-1"
    assert seen[0][0].text == "still there?"


def test_shard_settings_are_checked() -> None:
    assert shard_plan(None, None) == (None, None)
    assert shard_plan(4, "0,2-3") == (4, [0, 2, 3])
    for count, ids in ((None, "0"), (2, "2"), (2, "x")):
        with pytest.raises(ConfigError):
            shard_plan(count, ids)


def test_validate_names_the_missing_token(redis_client: Redis) -> None:
    platform = DiscordPlatform(Settings(DISCORD_BOT_TOKEN=None), redis_client)
    with pytest.raises(ConfigError, match="DISCORD_BOT_TOKEN"):
        platform.validate("send")
    platform.validate("http")


async def test_doctor_checks_the_token_over_rest(
    fake_discord: FakeDiscord, redis_client: Redis
) -> None:
    settings = Settings(DISCORD_BOT_TOKEN=fake_discord.token, DISCORD_API_URL=fake_discord.api_url)
    detail = await DiscordPlatform(settings, redis_client).doctor()
    assert "gatewaybot" in detail and fake_discord.application_id in detail

    wrong = Settings(DISCORD_BOT_TOKEN="wrong-token", DISCORD_API_URL=fake_discord.api_url)
    with pytest.raises(PlatformError) as caught:
        await DiscordPlatform(wrong, redis_client).doctor()
    assert "wrong-token" not in str(caught.value)


async def test_an_unreachable_discord_is_one_platform_error(redis_client: Redis) -> None:
    settings = Settings(
        DISCORD_BOT_TOKEN="t",
        DISCORD_API_URL="http://127.0.0.1:9/api/v10",
        DISCORD_GATEWAY_URL="ws://127.0.0.1:9/",
    )
    platform = DiscordPlatform(settings, redis_client)
    with pytest.raises(PlatformError, match="could not be reached"):
        await platform.connect(Ingest(settings, redis_client), Health(redis_client, "discord"))


async def test_without_a_gateway_url_the_one_discord_names_is_used(
    fake_discord: FakeDiscord, redis_client: Redis
) -> None:
    async with Gateway(fake_discord, redis_client, DISCORD_GATEWAY_URL=None) as gateway:
        await gateway.ready(fake_discord)
    assert fake_discord.calls_to("GET", r"/gateway/bot")
    assert gateway.settings.discord_gateway_url is None

"""Approval requests on Discord: the buttons posted and taken away, and clicks (component
interactions over the fake gateway) reaching `Ingest.decide`.

Real pieces: discord.py against the loopback REST API and gateway, the real Ingest on a
real Redis.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from redis.asyncio import Redis

from adapters.discord.sender import DiscordSender
from gateway.approvals.store import Status
from gateway.inbound.ingest import CLOSED_TEXT, NOT_YOURS_TEXT, Ingest
from gateway.messages import Address
from gateway.state.keys import Keys
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.llm_server import FakeLLM
from tests.support.discord_helpers import CHANNEL, GUILD, Gateway
from tests.support.helpers import inbound
from tests.support.tool_servers import TIMED_OUT_RESULT, unanswered_confirmation

SESSION = f"discord:{GUILD}:{CHANNEL}"
ADDRESS = Address(platform="discord", workspace=GUILD, channel=CHANNEL)
ASKER, OTHER = "4200000000000000001", "4200000000000000002"
EPHEMERAL = 64


@pytest.fixture
async def sender(fake_discord: FakeDiscord) -> AsyncIterator[DiscordSender]:
    client = DiscordSender(fake_discord.token, edit_interval=1.0)
    yield client
    await client.aclose()


async def _open(ingest: Ingest) -> str:
    return await ingest.approvals.open(
        SESSION, "0.0", "call-1", "files__delete", '{"path": "/srv/a"}', ASKER, ADDRESS, 600
    )


async def _status(ingest: Ingest, approval_id: str) -> Status | None:
    approval = await ingest.approvals.by_id(SESSION, approval_id)
    return approval.status if approval else None


async def _turn_jobs(redis: Redis) -> list[dict[str, str]]:
    raw = await redis.xrange(Keys.jobs("discord", 0))
    return [f for _, f in cast(list[tuple[str, dict[str, str]]], raw) if f["kind"] == "turn"]


def _buttons(message: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (button["label"], button["custom_id"])
        for row in message["components"]
        for button in row["components"]
    ]


async def test_the_request_is_posted_with_two_buttons_and_settled_without_them(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    message_id = await sender.ask_approval(ADDRESS, "Run **files__delete** @everyone?", "A" * 16)
    posted = fake_discord.messages[message_id]
    assert "**files__delete**" in posted["content"]
    assert _buttons(posted) == [
        ("Approve", "a:" + "A" * 16 + ":y"),
        ("Decline", "a:" + "A" * 16 + ":n"),
    ]
    assert posted["allowed_mentions"]["parse"] == []
    await sender.settle_approval(ADDRESS, message_id, "Approved.")
    assert posted["components"] == [] and posted["content"] == "Approved."


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


async def test_the_askers_click_is_decided_enqueued_and_answered_with_a_deferred_update(
    fake_discord: FakeDiscord, sender: DiscordSender, redis_client: Redis
) -> None:
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        approval_id = await _open(gateway.ingest)
        message_id = await sender.ask_approval(ADDRESS, "Run it?", approval_id)
        callback = await _clicked(fake_discord, gateway, message_id, f"a:{approval_id}:y", ASKER)
        assert callback["type"] == 6  # DEFERRED_UPDATE_MESSAGE
        assert await _status(gateway.ingest, approval_id) == Status.APPROVED
        assert [job["session"] for job in await _turn_jobs(redis_client)] == [SESSION]


async def test_someone_elses_click_gets_an_ephemeral_refusal_and_changes_nothing(
    fake_discord: FakeDiscord, sender: DiscordSender, redis_client: Redis
) -> None:
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        approval_id = await _open(gateway.ingest)
        message_id = await sender.ask_approval(ADDRESS, "Run it?", approval_id)
        callback = await _clicked(fake_discord, gateway, message_id, f"a:{approval_id}:y", OTHER)
        assert callback["type"] == 4  # CHANNEL_MESSAGE_WITH_SOURCE
        assert callback["data"]["content"] == NOT_YOURS_TEXT
        assert callback["data"]["flags"] & EPHEMERAL
        assert await _status(gateway.ingest, approval_id) == Status.PENDING
        assert await _turn_jobs(redis_client) == []


async def test_a_second_click_is_told_the_request_is_closed(
    fake_discord: FakeDiscord, sender: DiscordSender, redis_client: Redis
) -> None:
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        approval_id = await _open(gateway.ingest)
        message_id = await sender.ask_approval(ADDRESS, "Run it?", approval_id)
        await _clicked(fake_discord, gateway, message_id, f"a:{approval_id}:n", ASKER)
        callback = await _clicked(fake_discord, gateway, message_id, f"a:{approval_id}:y", ASKER)
        assert callback["data"]["content"] == CLOSED_TEXT
        assert await _status(gateway.ingest, approval_id) == Status.DECLINED


async def test_a_malformed_foreign_or_bots_click_is_left_alone(
    fake_discord: FakeDiscord, sender: DiscordSender, redis_client: Redis
) -> None:
    async with Gateway(fake_discord, redis_client) as gateway:
        await gateway.ready(fake_discord)
        approval_id = await _open(gateway.ingest)
        message_id = await sender.ask_approval(ADDRESS, "Run it?", approval_id)
        for custom_id, bot in (
            (f"a:{approval_id}:maybe", False),
            ("someone-elses-button", False),
            (f"a:{approval_id}:y", True),  # a bot (with the asker's id, even)
        ):
            user = fake_discord.user(ASKER, bot=bot)
            interaction = fake_discord.click(message_id, custom_id, user, guild_id=GUILD)
            await fake_discord.dispatch("INTERACTION_CREATE", interaction)
        # A valid click after them is answered: the ones before it were seen and dropped.
        await _clicked(fake_discord, gateway, message_id, f"a:{approval_id}:y", ASKER)
        assert len(fake_discord.callbacks) == 1
        assert await _status(gateway.ingest, approval_id) == Status.APPROVED


# -- a request nobody answers ----------------------------------------------------------


async def test_a_request_nobody_answers_in_time_is_settled_as_refused_and_the_turn_goes_on(
    fake_discord: FakeDiscord, sender: DiscordSender, redis_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    message = inbound("delete the old one", platform="discord", channel=CHANNEL, user=ASKER)
    outcome = await unanswered_confirmation(
        redis_url, llm, tmp_path, message, sender, DISCORD_ALLOW_ALL=True
    )
    (result,) = outcome.results
    assert result.output == TIMED_OUT_RESULT and outcome.effects == []
    posts = fake_discord.calls_to("POST", rf"/channels/{CHANNEL}/messages")
    assert any("a:" in str(call.body) for call in posts)  # it was asked with buttons
    (request,) = [m for m in fake_discord.messages.values() if "desk__delete_item" in m["content"]]
    assert request["components"] == []  # the buttons are gone
    assert "Not approved in time" in request["content"]
    assert any(TIMED_OUT_RESULT in m["content"] for m in fake_discord.messages.values())

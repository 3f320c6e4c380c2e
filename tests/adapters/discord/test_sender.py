"""DiscordSender against the loopback fake of Discord's REST API, through the real discord.py."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import AsyncIterator

import pytest

from adapters.discord.sender import DiscordSender, nonce
from gateway.errors import MessageRejected, PlatformError, RateLimited
from gateway.messages import Address
from gateway.state.jobs import Job
from gateway.state.keys import Keys
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import start_workers

GUILD, CHANNEL = "1200000000000000001", "1300000000000000001"


@pytest.fixture
async def sender(fake_discord: FakeDiscord) -> AsyncIterator[DiscordSender]:
    client = DiscordSender(fake_discord.token, edit_interval=1.0)
    yield client
    await client.aclose()


def channel(reply_to: str | None = None, *, side: bool = False) -> Address:
    return Address(
        platform="discord", workspace=GUILD, channel=CHANNEL, reply_to=reply_to, side=side
    )


async def test_send_then_edit_one_message_without_pings(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    message_id = await sender.send(channel(), "hello <@123> @everyone", final=False)
    await sender.edit(channel(), message_id, "hello again", final=True)

    message = fake_discord.messages[message_id]
    assert message["content"] == "hello again" and message["edits"] == 1
    posted = fake_discord.calls_to("POST", rf"/channels/{CHANNEL}/messages")[0]
    assert posted.authorized
    assert posted.body["allowed_mentions"] == {"parse": []}
    assert "message_reference" not in posted.body


async def test_mentions_written_into_an_edit_ping_no_one(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    message_id = await sender.send(channel(), "draft", final=False)
    await sender.edit(channel(), message_id, "@everyone @here <@&77> <@123> <#456>", final=True)

    edited = fake_discord.calls_to("PATCH", rf"/channels/{CHANNEL}/messages/{message_id}")[0]
    assert edited.body["content"] == "@everyone @here <@&77> <@123> <#456>"
    assert edited.body["allowed_mentions"] == {"parse": []}


async def test_mentions_in_an_interaction_followup_edit_ping_no_one(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    interaction = fake_discord.interaction(
        CHANNEL, "what?", fake_discord.user("42"), guild_id=GUILD
    )
    fake_discord.callbacks[interaction["token"]] = {"type": 5}
    address = channel(side=True).model_copy(update={"token": interaction["token"]})
    message_id = await sender.send(address, "draft", final=False)
    await sender.edit(address, message_id, "@everyone <@&77>", final=True)

    edits = fake_discord.calls_to(
        "PATCH", rf"/webhooks/{fake_discord.application_id}/{interaction['token']}/.*"
    )
    assert edits and all(call.body["allowed_mentions"] == {"parse": []} for call in edits)


async def test_a_reply_quotes_the_question_and_may_notify_only_the_asker(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    await sender.send(channel("1400000000000000009", side=True), "answer", final=True)

    body = fake_discord.calls_to("POST", rf"/channels/{CHANNEL}/messages")[0].body
    assert body["message_reference"] == {
        "message_id": "1400000000000000009",
        "channel_id": CHANNEL,
        "fail_if_not_exists": False,
    }
    assert body["allowed_mentions"] == {"parse": [], "replied_user": True}


async def test_editing_to_the_same_text_is_not_an_error(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    message_id = await sender.send(channel(), "same", final=False)
    await sender.edit(channel(), message_id, "same", final=True)
    assert fake_discord.messages[message_id]["content"] == "same"


async def test_typing_posts_the_typing_endpoint(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    await sender.thinking(channel(), True)
    await sender.thinking(channel(), False)
    assert len(fake_discord.calls_to("POST", rf"/channels/{CHANNEL}/typing")) == 1
    assert sender.limits(channel()).typing_interval is not None


async def test_limits_and_measure_follow_discord(sender: DiscordSender) -> None:
    limits = sender.limits(channel())
    assert limits.max_length == 2000 and limits.edit_interval == 1.0
    assert sender.measure("#### Title") == len("**Title**")


async def test_a_short_429_is_waited_out_by_discord_py_and_the_text_arrives(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    message_id = await sender.send(channel(), "draft", final=False)
    fake_discord.rate_limit("PATCH", rf"/channels/{CHANNEL}/messages/\d+", retry_after=0.3)

    started = time.monotonic()
    await sender.edit(channel(), message_id, "final text", final=True)

    assert time.monotonic() - started >= 0.3
    assert len(fake_discord.calls_to("PATCH", rf"/channels/{CHANNEL}/messages/{message_id}")) == 2
    assert fake_discord.messages[message_id]["content"] == "final text"


async def test_a_long_429_reaches_the_core_as_rate_limited(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    fake_discord.rate_limit("POST", rf"/channels/{CHANNEL}/messages", retry_after=45.0)
    started = time.monotonic()
    with pytest.raises(RateLimited) as caught:
        await sender.send(channel(), "hello", final=True)
    assert caught.value.retry_after == 45.0
    assert time.monotonic() - started < 5


async def test_a_429_discord_py_will_not_retry_is_rate_limited(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    fake_discord.rate_limit("POST", rf"/channels/{CHANNEL}/messages", retry_after=2.5, via=False)
    with pytest.raises(RateLimited) as caught:
        await sender.send(channel(), "hello", final=True)
    assert caught.value.retry_after == 2.5


async def test_a_post_whose_answer_was_lost_is_not_posted_twice_under_its_key(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    # Discord took the post, the answer came back 502: discord.py sends it again.
    fake_discord.lose_answers("POST", rf"/channels/{CHANNEL}/messages")
    message_id = await sender.send(channel(), "hello", final=True, key="turn-1:0")
    # A run that took the turn over, not knowing that id, posts it once more.
    again = await sender.send(channel(), "hello", final=True, key="turn-1:0")

    assert [m["id"] for m in fake_discord.channel_messages(CHANNEL)] == [message_id] == [again]
    posts = fake_discord.calls_to("POST", rf"/channels/{CHANNEL}/messages")
    assert len(posts) == 3 and {call.body["nonce"] for call in posts} == {nonce("turn-1:0")}
    assert all(call.body["enforce_nonce"] for call in posts)


async def test_without_a_key_a_lost_answer_leaves_a_second_message(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    """What the key is for: discord.py's own retry of the 502 posts a copy."""
    fake_discord.lose_answers("POST", rf"/channels/{CHANNEL}/messages")
    await sender.send(channel(), "hello", final=True)
    assert [m["content"] for m in fake_discord.channel_messages(CHANNEL)] == ["hello", "hello"]
    assert "nonce" not in fake_discord.calls_to("POST", rf"/channels/{CHANNEL}/messages")[0].body


async def test_each_key_is_its_own_message(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    first = await sender.send(channel(), "part one", final=True, key="turn-3:0")
    second = await sender.send(channel(), "part two", final=True, key="turn-3:1")
    assert first != second and len(fake_discord.channel_messages(CHANNEL)) == 2


async def test_an_oversized_message_is_rejected(sender: DiscordSender) -> None:
    with pytest.raises(MessageRejected):
        await sender.send(channel(), "x" * 2001, final=True)


async def test_an_unknown_message_is_a_platform_error(sender: DiscordSender) -> None:
    with pytest.raises(PlatformError, match="10008"):
        await sender.edit(channel(), "1999", "text", final=True)


async def test_a_wrong_token_is_a_platform_error_without_the_token(
    fake_discord: FakeDiscord,
) -> None:
    sender = DiscordSender("not-the-token", edit_interval=1.0)
    try:
        with pytest.raises(PlatformError) as caught:
            await sender.send(channel(), "hello", final=True)
        assert "not-the-token" not in str(caught.value)
    finally:
        await sender.aclose()


async def test_an_interaction_reply_is_a_followup_on_the_webhook(
    fake_discord: FakeDiscord, sender: DiscordSender
) -> None:
    interaction = fake_discord.interaction(
        CHANNEL, "what?", fake_discord.user("42"), guild_id=GUILD
    )
    fake_discord.callbacks[interaction["token"]] = {"type": 5}  # the gateway process deferred it
    address = channel(side=True).model_copy(update={"token": interaction["token"]})

    message_id = await sender.send(address, "short answer", final=False)
    await sender.edit(address, message_id, "the answer", final=True)
    await sender.thinking(address, True)

    followups = fake_discord.calls_to(
        "POST", rf"/webhooks/{fake_discord.application_id}/{interaction['token']}"
    )
    assert len(followups) == 1 and not followups[0].authorized
    assert followups[0].body["allowed_mentions"] == {"parse": []}
    assert fake_discord.messages[message_id]["content"] == "the answer"
    assert fake_discord.messages[message_id]["channel_id"] == CHANNEL
    assert not fake_discord.calls_to("POST", rf"/channels/{CHANNEL}/typing")


async def test_interaction_tokens_stay_out_of_debug_logs(
    fake_discord: FakeDiscord, sender: DiscordSender, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    interaction = fake_discord.interaction(CHANNEL, "q", fake_discord.user("42"), guild_id=GUILD)
    fake_discord.callbacks[interaction["token"]] = {"type": 5}
    address = channel(side=True).model_copy(update={"token": interaction["token"]})
    await sender.send(address, "answer", final=True)
    ours = "\n".join(
        r.getMessage() for r in caplog.records if r.name.startswith(("discord", "adapters"))
    )
    assert interaction["token"] not in ours and fake_discord.token not in ours


async def test_a_side_answer_whose_post_answer_was_lost_is_shown_once(
    fake_discord: FakeDiscord, sender: DiscordSender, redis_url: str, llm: FakeLLM
) -> None:
    """A side answer is posted under its job's key: discord.py's retry of a post Discord
    took but answered 502, and a second delivery of the job, show no copy."""
    llm.reply = "what was decided"
    fake_discord.lose_answers("POST", rf"/channels/{CHANNEL}/messages")
    payload = {"address": channel(side=True).model_dump(), "question": "what did we decide?"}
    job = Job(Keys.jobs("discord", 0), "1-0", "side", f"discord:{GUILD}:{CHANNEL}", payload)
    async with start_workers(redis_url, llm, 1, senders={"discord": sender}) as h:
        await h.workers[0].answers.side(job)
        await h.workers[0].answers.side(dataclasses.replace(job, deliveries=2))
    (shown,) = fake_discord.channel_messages(CHANNEL)
    assert shown["content"].endswith("what was decided")
    assert len(fake_discord.calls_to("POST", rf"/channels/{CHANNEL}/messages")) == 3

"""Ingest: dedupe, access, the answer rule, commands, and bad input."""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as aioredis

from gateway.inbound.ingest import Ingest, Receipt
from gateway.messages import Inbound, Speaker
from gateway.state.jobs import JobQueue
from gateway.state.keys import Keys
from gateway.state.session import SessionStore
from tests.support.helpers import inbound, settings


async def jobs(redis: aioredis.Redis, platform: str = "test") -> list[dict[str, str]]:
    entries = await redis.xrange(Keys.jobs(platform, 0))
    return [fields for _, fields in entries]


async def test_a_message_lands_in_the_inbox_with_exactly_one_job(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    message = inbound("hello")
    assert await ingest.receive(message) == Receipt.QUEUED
    inbox = await SessionStore(redis_client).inbox(message.session_key)
    assert [e["text"] for e in inbox] == ["hello"]
    assert [j["kind"] for j in await jobs(redis_client)] == ["turn"]


async def test_the_same_event_twice_is_answered_once(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    first = inbound("hello", event_id="E1")
    assert await ingest.receive(first) == Receipt.QUEUED
    assert await ingest.receive(inbound("hello", event_id="E1")) == Receipt.DUPLICATE
    assert len(await SessionStore(redis_client).inbox(first.session_key)) == 1
    assert len(await jobs(redis_client)) == 1


async def test_messages_while_a_turn_is_queued_share_its_job(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    for text in ["one", "two", "three"]:
        assert await ingest.receive(inbound(text)) == Receipt.QUEUED
    assert len(await jobs(redis_client)) == 1
    assert len(await SessionStore(redis_client).inbox(inbound("x").session_key)) == 3


async def test_unknown_user_on_an_open_network_gets_one_refusal_naming_their_id(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    stranger = inbound("hi", platform="telegram", user="999")
    assert await ingest.receive(stranger) == Receipt.REFUSED
    assert (
        await ingest.receive(inbound("again", platform="telegram", user="999")) == Receipt.REFUSED
    )
    notices = await jobs(redis_client, "telegram")
    assert [j["kind"] for j in notices] == ["notice"]
    text = json.loads(notices[0]["payload"])["text"]
    assert "telegram:999" in text and "\n" not in text
    assert await SessionStore(redis_client).inbox(stranger.session_key) == []


async def test_every_interaction_of_a_stranger_is_answered(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    for _ in range(2):
        message = inbound("/btw hi", platform="discord", user="77")
        token = message.reply.model_copy(update={"token": "interaction-token"})
        message = message.model_copy(update={"reply": token, "side_reply": token})
        assert await ingest.receive(message) == Receipt.REFUSED
    assert [j["kind"] for j in await jobs(redis_client, "discord")] == ["notice", "notice"]


async def test_allow_all_opens_the_platform(redis_url: str, redis_client: aioredis.Redis) -> None:
    ingest = Ingest(settings(redis_url, TELEGRAM_ALLOW_ALL="1"), redis_client)
    assert await ingest.receive(inbound("hi", platform="telegram", user="5")) == Receipt.QUEUED
    assert await ingest.receive(inbound("hi", platform="discord", user="5")) == Receipt.REFUSED


def guest(text: str, **extra: Any) -> Inbound:
    """A Slack message from a member of another organisation (a Slack Connect guest)."""
    message = inbound(text, platform="slack", user="U7", **extra)
    return message.model_copy(update={"speaker": Speaker(id="U7", name="Eve", external=True)})


async def test_a_member_of_another_organisation_gets_one_refusal_and_reaches_nothing(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    first = guest("hi")
    assert await ingest.receive(first) == Receipt.REFUSED
    assert await ingest.receive(guest("again")) == Receipt.REFUSED
    notices = await jobs(redis_client, "slack")
    assert [j["kind"] for j in notices] == ["notice"]
    text = json.loads(notices[0]["payload"])["text"]
    assert "slack:U7" in text and "\n" not in text
    assert await SessionStore(redis_client).inbox(first.session_key) == []
    assert await ingest.receive(inbound("hi", platform="slack", user="U1")) == Receipt.QUEUED


async def test_reset_and_stop_from_another_organisation_do_nothing(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    member = inbound("remember 42", platform="slack")
    await ingest.receive(member)
    pubsub = redis_client.pubsub()
    await pubsub.subscribe(Keys.CANCEL_CHANNEL)
    await pubsub.get_message(timeout=1)
    for text in ("/reset", "/new", "/stop"):
        assert await ingest.receive(guest(text)) == Receipt.REFUSED
    # Published after the commands on the same connection: it arrives first only if
    # none of them published a cancel.
    await redis_client.publish(Keys.CANCEL_CHANNEL, "marker")
    received = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5)
    await pubsub.aclose()
    assert received is not None and received["data"] == "marker"
    store = SessionStore(redis_client)
    assert [e["text"] for e in await store.inbox(member.session_key)] == ["remember 42"]
    assert "epoch" not in await store.meta(member.session_key)


async def test_slack_allow_external_or_a_listing_lets_another_organisation_in(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    opened = Ingest(settings(redis_url, SLACK_ALLOW_EXTERNAL="1"), redis_client)
    assert await opened.receive(guest("hi")) == Receipt.QUEUED
    listed = Ingest(settings(redis_url, GATEWAY_ALLOWED_USERS="slack:U7"), redis_client)
    assert await listed.receive(guest("hi again", channel="C2")) == Receipt.QUEUED
    assert await jobs(redis_client, "slack") != []
    assert all(j["kind"] == "turn" for j in await jobs(redis_client, "slack"))


async def test_group_messages_need_a_mention_a_reply_or_a_thread_the_bot_is_in(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    assert await ingest.receive(inbound("chatter", dm=False)) == Receipt.IGNORED
    assert await ingest.receive(inbound("hey bot", dm=False, mentions_bot=True)) == Receipt.QUEUED
    assert await ingest.receive(inbound("re", dm=False, replies_to_bot=True)) == Receipt.QUEUED
    follow = inbound("follow-up", dm=False, thread="T9", follows_thread=True)
    assert await ingest.receive(follow) == Receipt.IGNORED
    await redis_client.hset(Keys.meta(follow.session_key), "participated", "1")
    again = inbound("follow-up 2", dm=False, thread="T9", follows_thread=True)
    assert await ingest.receive(again) == Receipt.QUEUED


async def test_bots_are_ignored(redis_url: str, redis_client: aioredis.Redis) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    message = inbound("beep").model_copy(update={"speaker": Speaker(id="B", name="b", is_bot=True)})
    assert await ingest.receive(message) == Receipt.IGNORED
    assert await jobs(redis_client) == []


async def test_empty_and_oversized_messages_get_a_clear_answer_and_store_nothing(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    assert await ingest.receive(inbound("   \n\t ")) == Receipt.IGNORED
    huge = inbound("x" * 1_048_576)
    assert await ingest.receive(huge) == Receipt.IGNORED
    notices = [json.loads(j["payload"])["text"] for j in await jobs(redis_client)]
    assert "empty" in notices[0] and "too long" in notices[1] and "1,048,576" in notices[1]
    assert await SessionStore(redis_client).inbox(huge.session_key) == []


async def test_control_characters_and_lone_surrogates_are_cleaned(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    message = inbound("a\x00b\x1bc\ud800d\tе\n😀")
    assert await ingest.receive(message) == Receipt.QUEUED
    stored = (await SessionStore(redis_client).inbox(message.session_key))[0]["text"]
    assert stored == "abc\ufffdd\tе\n😀"


async def test_btw_is_a_side_job_and_never_touches_history(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    for text in ["/btw what was that?", "!btw and this?", "/btw@gw_bot third?"]:
        assert await ingest.receive(inbound(text)) == Receipt.SIDE
    kinds = [
        (j["kind"], json.loads(j["payload"]).get("question")) for j in await jobs(redis_client)
    ]
    assert kinds == [("side", "what was that?"), ("side", "and this?"), ("side", "third?")]
    assert await SessionStore(redis_client).inbox(inbound("x").session_key) == []
    assert await redis_client.exists(Keys.history(inbound("x").session_key)) == 0


async def test_btw_without_a_question_is_a_usage_hint(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    assert await ingest.receive(inbound("/btw   ")) == Receipt.COMMAND
    (job,) = await jobs(redis_client)
    payload = json.loads(job["payload"])
    assert job["kind"] == "notice" and payload["text"].startswith("Usage: /btw")
    assert payload["address"]["side"] is True


async def test_side_questions_in_flight_are_capped(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url, GATEWAY_SIDE_MAX_IN_FLIGHT=2), redis_client)
    outcomes = [await ingest.receive(inbound(f"/btw q{i}")) for i in range(3)]
    assert outcomes == [Receipt.SIDE, Receipt.SIDE, Receipt.COMMAND]
    last = (await jobs(redis_client))[-1]
    assert last["kind"] == "notice" and "Busy" in json.loads(last["payload"])["text"]
    queue = JobQueue(redis_client, ["test"])
    await queue.ensure_groups()
    first = (await queue.read(count=1, block_ms=10))[0]
    await queue.complete(first)  # one answered: room for another
    assert await ingest.receive(inbound("/btw q4")) == Receipt.SIDE


async def test_reset_starts_a_fresh_session_and_stop_is_broadcast(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    message = inbound("remember 42")
    await ingest.receive(message)
    pubsub = redis_client.pubsub()
    await pubsub.subscribe(Keys.CANCEL_CHANNEL)
    await pubsub.get_message(timeout=1)
    assert await ingest.receive(inbound("/new")) == Receipt.COMMAND
    assert await SessionStore(redis_client).inbox(message.session_key) == []
    assert (await SessionStore(redis_client).meta(message.session_key))["epoch"] == "1"
    await ingest.receive(inbound("/stop"))
    received = [await pubsub.get_message(timeout=1) for _ in range(2)]
    assert [m["data"] for m in received if m] == [message.session_key, message.session_key]
    await pubsub.aclose()


async def test_a_retried_command_acts_once(redis_url: str, redis_client: aioredis.Redis) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    await ingest.receive(inbound("/reset", event_id="R1"))
    assert await ingest.receive(inbound("/reset", event_id="R1")) == Receipt.DUPLICATE
    meta = await SessionStore(redis_client).meta(inbound("x").session_key)
    assert meta["epoch"] == "1"

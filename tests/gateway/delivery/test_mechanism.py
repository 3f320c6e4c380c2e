"""The one place a reply's mechanism is chosen: the sender's native surface, edit-in-place
where it has none, for a re-run, and for a while in a chat that refused it; the replies
and fallbacks counted for /metrics."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, generate_latest

from gateway.delivery.mechanism import EDIT, REMEMBER, Mechanisms
from gateway.errors import StreamRefused
from gateway.messages import Address
from gateway.metrics import Metrics, SnapshotCollector, snapshot
from gateway.state.keys import Keys
from tests.support.recording_sender import RecordingNativeSender, RecordingSender

ADDRESS = Address(platform="test", workspace="w", channel="c", thread="t")


async def test_the_native_surface_is_chosen_where_the_sender_has_one(
    redis_client: aioredis.Redis,
) -> None:
    mechanisms = Mechanisms(redis_client, Metrics(redis_client))
    assert await mechanisms.choose(RecordingNativeSender(), ADDRESS, rerun=False) == "live"
    assert await mechanisms.choose(RecordingSender(), ADDRESS, rerun=False) == EDIT
    assert await mechanisms.choose(RecordingNativeSender(), ADDRESS, rerun=True) == EDIT
    side = ADDRESS.model_copy(update={"side": True})
    assert await mechanisms.choose(RecordingNativeSender(), side, rerun=False) == EDIT


async def test_a_refusal_for_the_channel_is_remembered_for_a_while_there_only(
    redis_client: aioredis.Redis,
) -> None:
    mechanisms = Mechanisms(redis_client, Metrics(redis_client))
    sender = RecordingNativeSender()
    await mechanisms.refused(ADDRESS, "live", StreamRefused("not_here", for_channel=True))
    assert await mechanisms.choose(sender, ADDRESS, rerun=False) == EDIT
    other = ADDRESS.model_copy(update={"channel": "c2"})
    assert await mechanisms.choose(sender, other, rerun=False) == "live"
    ttl = await redis_client.ttl(Keys.native_refused(ADDRESS.chat_key))
    assert 0 < ttl <= REMEMBER


async def test_what_redis_said_of_a_chat_is_trusted_for_a_while_then_asked_again(
    redis_client: aioredis.Redis,
) -> None:
    here = Mechanisms(redis_client, Metrics(redis_client), look_again=0.3)
    elsewhere = Mechanisms(redis_client, Metrics(redis_client))
    sender = RecordingNativeSender()
    assert await here.choose(sender, ADDRESS, rerun=False) == "live"
    await elsewhere.refused(ADDRESS, "live", StreamRefused("not_here", for_channel=True))
    # Told a moment ago that the chat takes streams: no look-up, the stream is tried.
    assert await here.choose(sender, ADDRESS, rerun=False) == "live"
    async with asyncio.timeout(5):  # asked again once the while is over
        while await here.choose(sender, ADDRESS, rerun=False) != EDIT:
            await asyncio.sleep(0.05)
    assert await elsewhere.choose(sender, ADDRESS, rerun=False) == EDIT  # its own, at once


async def test_a_refusal_met_here_is_known_here_whatever_redis_holds(
    redis_client: aioredis.Redis,
) -> None:
    mechanisms = Mechanisms(redis_client, Metrics(redis_client))
    await mechanisms.refused(ADDRESS, "live", StreamRefused("not_here", for_channel=True))
    await redis_client.delete(Keys.native_refused(ADDRESS.chat_key))  # as if never stored
    assert await mechanisms.choose(RecordingNativeSender(), ADDRESS, rerun=False) == EDIT


async def test_a_refusal_of_one_reply_is_not_remembered(redis_client: aioredis.Redis) -> None:
    mechanisms = Mechanisms(redis_client, Metrics(redis_client))
    await mechanisms.refused(ADDRESS, "live", StreamRefused("expired", for_channel=False))
    assert await mechanisms.choose(RecordingNativeSender(), ADDRESS, rerun=False) == "live"


async def test_replies_and_fallbacks_are_counted_by_platform_and_mechanism(
    redis_client: aioredis.Redis,
) -> None:
    mechanisms = Mechanisms(redis_client, Metrics(redis_client))
    await mechanisms.delivered(ADDRESS, "live")
    await mechanisms.delivered(ADDRESS, "live")
    await mechanisms.delivered(ADDRESS, EDIT)
    await mechanisms.refused(ADDRESS, "live", StreamRefused("not_here", for_channel=True))
    values, depth = await snapshot(redis_client, [])
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(values, depth))
    text = generate_latest(registry).decode()
    assert 'gateway_replies_total{mechanism="live",platform="test"} 2.0' in text
    assert 'gateway_replies_total{mechanism="edit",platform="test"} 1.0' in text
    assert 'gateway_stream_fallbacks_total{code="not_here",platform="test"} 1.0' in text


async def test_redis_away_means_edit_in_place(redis_url: str) -> None:
    broken = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    try:
        mechanisms = Mechanisms(broken, Metrics(broken))
        assert await mechanisms.choose(RecordingNativeSender(), ADDRESS, rerun=False) == EDIT
        await mechanisms.refused(ADDRESS, "live", StreamRefused("x", for_channel=True))
    finally:
        await broken.aclose()

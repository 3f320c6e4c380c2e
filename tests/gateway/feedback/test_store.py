"""The feedback store against a real Redis: registered replies, one vote per clicker
and reply (moved by the other value, left by the same), the log, and the counters
`/metrics` renders (never by user)."""

from __future__ import annotations

import datetime as dt
import time
from typing import cast

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from redis.asyncio import Redis

from gateway.feedback.store import LOG_KEEP, REPLY_TTL, FeedbackStore, FeedbackVerdict, Reply
from gateway.metrics import SnapshotCollector, snapshot
from gateway.state.keys import Keys

REPLY = Reply("slack", "T1", "C1", "1700000000.000100", "slack:T1:C1:1.2", "turn-1", "openai/m|x")
EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


@pytest.fixture
async def store(redis_client: Redis) -> FeedbackStore:
    found = FeedbackStore(redis_client)
    await found.register(REPLY)
    return found


async def _click(store: FeedbackStore, user: str, value: str, **at: float) -> FeedbackVerdict:
    return await store.record(REPLY.platform, REPLY.channel, REPLY.message_id, user, value, **at)


async def _counters(redis: Redis) -> dict[str, str]:
    found = cast(dict[str, str], await redis.hgetall(Keys.METRICS))
    return {field: value for field, value in found.items() if field.startswith("feedback|")}


async def test_a_click_is_recorded_once_with_its_reply_and_clicker(
    store: FeedbackStore, redis_client: Redis
) -> None:
    assert await _click(store, "U1", "up") == FeedbackVerdict.RECORDED
    assert await _counters(redis_client) == {"feedback|slack|T1|up|openai/m|x": "1"}
    (vote,) = await store.since(EPOCH)
    assert (vote.session, vote.turn, vote.model, vote.user, vote.value) == (
        REPLY.session,
        "turn-1",
        "openai/m|x",
        "U1",
        "up",
    )
    assert (vote.platform, vote.workspace, vote.channel, vote.message_id) == (
        "slack",
        "T1",
        "C1",
        REPLY.message_id,
    )


async def test_the_other_value_replaces_the_vote_and_moves_the_counter(
    store: FeedbackStore, redis_client: Redis
) -> None:
    await _click(store, "U1", "up")
    assert await _click(store, "U1", "down") == FeedbackVerdict.CHANGED
    assert await _counters(redis_client) == {
        "feedback|slack|T1|up|openai/m|x": "0",
        "feedback|slack|T1|down|openai/m|x": "1",
    }
    assert [vote.value for vote in await store.since(EPOCH)] == ["down"]


async def test_the_same_value_twice_is_one_vote(store: FeedbackStore, redis_client: Redis) -> None:
    await _click(store, "U1", "up")
    assert await _click(store, "U1", "up") == FeedbackVerdict.UNCHANGED
    assert await _counters(redis_client) == {"feedback|slack|T1|up|openai/m|x": "1"}
    assert len(await store.since(EPOCH)) == 1


async def test_each_clicker_has_a_vote_of_their_own(
    store: FeedbackStore, redis_client: Redis
) -> None:
    await _click(store, "U1", "up", now=1_800_000_000.0)
    await _click(store, "U2", "up", now=1_800_000_001.0)
    await _click(store, "U3", "down", now=1_800_000_002.0)
    assert await _counters(redis_client) == {
        "feedback|slack|T1|up|openai/m|x": "2",
        "feedback|slack|T1|down|openai/m|x": "1",
    }
    assert [vote.user for vote in await store.since(EPOCH)] == ["U3", "U2", "U1"]  # newest first


async def test_a_click_on_a_message_that_is_no_registered_reply_changes_nothing(
    store: FeedbackStore, redis_client: Redis
) -> None:
    verdict = await store.record("slack", "C1", "1700000000.000999", "U1", "up")
    assert verdict == FeedbackVerdict.UNKNOWN
    elsewhere = await store.record("slack", "C2", REPLY.message_id, "U1", "up")
    assert elsewhere == FeedbackVerdict.UNKNOWN
    assert await _counters(redis_client) == {}
    assert await store.since(EPOCH) == []


@pytest.mark.parametrize("value", ["sideways", "", "UP"])
async def test_a_value_other_than_up_or_down_changes_nothing(
    store: FeedbackStore, redis_client: Redis, value: str
) -> None:
    await _click(store, "U1", "up")
    assert await _click(store, "U1", value) == FeedbackVerdict.INVALID
    assert await _counters(redis_client) == {"feedback|slack|T1|up|openai/m|x": "1"}
    assert [vote.value for vote in await store.since(EPOCH)] == ["up"]


async def test_a_reply_takes_clicks_for_a_while_and_a_rerun_keeps_its_votes(
    store: FeedbackStore, redis_client: Redis
) -> None:
    await _click(store, "U1", "down")
    key = Keys.feedback_reply(REPLY.platform, REPLY.channel, REPLY.message_id)
    assert REPLY_TTL - 60 < await redis_client.ttl(key) <= REPLY_TTL
    await store.register(REPLY)  # a re-run of the turn delivers the same message
    assert await _click(store, "U1", "down") == FeedbackVerdict.UNCHANGED
    await redis_client.delete(key)  # expired
    assert await _click(store, "U1", "up") == FeedbackVerdict.UNKNOWN


async def test_since_lists_from_its_start_and_the_log_forgets_what_is_past_keeping(
    store: FeedbackStore,
) -> None:
    now = time.time()
    await _click(store, "U1", "up", now=now - LOG_KEEP - 10)
    await _click(store, "U2", "down", now=now - 3600)
    recent = dt.datetime.fromtimestamp(now - 7200, dt.UTC)
    assert [vote.user for vote in await store.since(recent)] == ["U2"]
    await _click(store, "U3", "up", now=now)
    assert [vote.user for vote in await store.since(EPOCH)] == ["U3", "U2"]  # U1's dropped


async def test_the_metric_has_platform_workspace_model_and_value_never_the_user(
    store: FeedbackStore, redis_client: Redis
) -> None:
    await _click(store, "U1", "up")
    await _click(store, "U2", "up")
    await _click(store, "U2", "down")
    values, depth = await snapshot(redis_client, [])
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(values, depth))
    lines = [
        line
        for line in generate_latest(registry).decode().splitlines()
        if line.startswith("gateway_feedback_total{")
    ]
    labels = 'model="openai/m|x",platform="slack",value="{}",workspace="T1"'
    assert sorted(lines) == [
        f"gateway_feedback_total{{{labels.format('down')}}} 1.0",
        f"gateway_feedback_total{{{labels.format('up')}}} 1.0",
    ]
    assert all("U1" not in line and "U2" not in line for line in lines)

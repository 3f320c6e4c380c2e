"""Rate limits at ingest, with a worker answering: what is over the limit never
reaches the session or the model, and its sender is told once."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, generate_latest

from gateway.inbound.ingest import Ingest, Receipt
from gateway.metrics import SnapshotCollector, snapshot
from gateway.state.keys import Keys, connect
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import Harness, start_workers, texts
from tests.support.helpers import inbound, settings
from tests.support.redis_servers import client_for

BURST = 3
NOTICE = "faster than this bot answers: 1 per minute. Try again in"


@pytest.fixture
async def limited(redis_url: str, llm: FakeLLM) -> AsyncIterator[Harness]:
    values = {"GATEWAY_RATE_USER": "1/min", "GATEWAY_RATE_BURST": BURST}
    async with start_workers(redis_url, llm, 1, **values) as h:
        yield h


def _notices(h: Harness) -> list[str]:
    return [t for t in texts(h.sender) if NOTICE in t]


def _model_saw(llm: FakeLLM, text: str) -> bool:
    return any(text in json.dumps(request) for request in llm.requests)


async def test_a_burst_over_the_limit_answers_the_allowed_and_tells_once(
    limited: Harness,
) -> None:
    sent = [inbound(f"message-{i}") for i in range(BURST + 4)]
    outcomes = [await limited.ingest.receive(m) for m in sent]
    assert outcomes == [Receipt.QUEUED] * BURST + [Receipt.LIMITED] * 4
    key = sent[0].session_key
    await limited.idle(key)
    users = [e["text"] for e in await limited.history(key) if e["role"] == "user"]
    assert users == [f"message-{i}" for i in range(BURST)]
    assert _model_saw(limited.llm, "message-0")
    assert not any(_model_saw(limited.llm, f"message-{i}") for i in range(BURST, BURST + 4))
    (notice,) = _notices(limited)
    assert notice.startswith("You're sending messages")


async def test_two_ingest_processes_share_the_bucket(limited: Harness, redis_url: str) -> None:
    client = client_for(redis_url)
    try:
        elsewhere = Ingest(limited.ingest.settings, client)
        doors = [limited.ingest, elsewhere] * BURST
        outcomes = [await door.receive(inbound(f"m{i}")) for i, door in enumerate(doors)]
    finally:
        await client.aclose()
    assert outcomes.count(Receipt.QUEUED) == BURST
    assert outcomes[BURST:] == [Receipt.LIMITED] * BURST
    await limited.idle(inbound("x").session_key)
    assert len(_notices(limited)) == 1


async def test_side_questions_count_and_over_the_limit_are_not_asked(limited: Harness) -> None:
    first = inbound("hello")
    assert await limited.ingest.receive(first) == Receipt.QUEUED
    assert await limited.ingest.receive(inbound("/btw first side")) == Receipt.SIDE
    assert await limited.ingest.receive(inbound("/btw second side")) == Receipt.SIDE
    assert await limited.ingest.receive(inbound("/btw third side")) == Receipt.LIMITED
    assert await limited.ingest.receive(inbound("a message")) == Receipt.LIMITED
    await limited.idle(first.session_key)
    assert len(limited.llm.requests_for("side-model")) == 2
    assert not _model_saw(limited.llm, "third side")
    side_notice = [a for a in limited.sender.calls if NOTICE in a.text]
    assert len(side_notice) == 1 and side_notice[0].address.side


async def test_stop_and_status_are_never_limited(limited: Harness) -> None:
    for i in range(BURST + 1):
        await limited.ingest.receive(inbound(f"m{i}"))
    assert await limited.ingest.receive(inbound("/stop")) == Receipt.COMMAND
    assert await limited.ingest.receive(inbound("/status")) == Receipt.COMMAND
    await limited.idle(inbound("x").session_key)
    assert any(t in ("Stopping the reply.", "Nothing is running.") for t in texts(limited.sender))
    assert any(t.startswith("Model:") for t in texts(limited.sender))


async def test_two_hundred_at_once_answer_exactly_the_burst_with_one_notice(
    limited: Harness, redis_url: str
) -> None:
    sent = [inbound(f"drill-{i:03}") for i in range(200)]
    client = connect(redis_url)  # a web process's client: its pool waits for a connection
    try:
        door = Ingest(limited.ingest.settings, client)
        outcomes = await asyncio.gather(*(door.receive(m) for m in sent))
    finally:
        await client.aclose()
    assert outcomes.count(Receipt.QUEUED) == BURST
    assert outcomes.count(Receipt.LIMITED) == 200 - BURST
    key = sent[0].session_key
    await limited.idle(key)
    users = [e for e in await limited.history(key) if e["role"] == "user"]
    assert len(users) == BURST
    assert len(_notices(limited)) == 1
    values, _ = await snapshot(limited.sessions.redis, [])
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(values, {}))
    metric = f'gateway_rate_limited_messages_total{{platform="test"}} {200 - BURST}.0'
    assert metric in generate_latest(registry).decode()


# -- ingest alone: what is written, and what is told ------------------------------


def _ingest(redis_url: str, client: aioredis.Redis, **values: object) -> Ingest:
    return Ingest(settings(redis_url, **values), client)


async def _notice_texts(client: aioredis.Redis) -> list[str]:
    entries = await client.xrange(Keys.jobs("test", 0))
    return [json.loads(f["payload"])["text"] for _, f in entries if f["kind"] == "notice"]


async def test_a_retried_delivery_takes_no_token(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = _ingest(redis_url, redis_client, GATEWAY_RATE_USER="1/min,burst 2")
    assert await ingest.receive(inbound("one", event_id="E1")) == Receipt.QUEUED
    assert await ingest.receive(inbound("one", event_id="E1")) == Receipt.DUPLICATE
    assert await ingest.receive(inbound("two", event_id="E2")) == Receipt.QUEUED
    assert await ingest.receive(inbound("three", event_id="E3")) == Receipt.LIMITED
    assert await ingest.receive(inbound("three", event_id="E3")) == Receipt.DUPLICATE
    assert len(await _notice_texts(redis_client)) == 1


async def test_a_busy_conversation_is_limited_for_everyone_in_it(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = _ingest(
        redis_url,
        redis_client,
        GATEWAY_ALLOWED_USERS="test:U1,test:U2",
        GATEWAY_RATE_USER="10/min",
        GATEWAY_RATE_CONVERSATION="2/min",
    )
    speakers = ["U1", "U2", "U1", "U2"]
    outcomes = [
        await ingest.receive(inbound(f"m{i}", user=u, dm=False, mentions_bot=True))
        for i, u in enumerate(speakers)
    ]
    assert outcomes == [Receipt.QUEUED] * 2 + [Receipt.LIMITED] * 2
    (notice,) = await _notice_texts(redis_client)
    assert notice.startswith("This conversation is getting messages faster")
    assert "2 per minute" in notice


async def test_an_album_counts_as_one_message(redis_url: str, redis_client: aioredis.Redis) -> None:
    ingest = _ingest(redis_url, redis_client, GATEWAY_RATE_USER="1/min,burst 1")
    album = [inbound(f"photo {i}", media_group="G1") for i in range(4)]
    assert [await ingest.receive(item) for item in album] == [Receipt.QUEUED] * 4
    assert await ingest.receive(inbound("and a question")) == Receipt.LIMITED


async def test_every_limited_interaction_gets_an_answer(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = _ingest(redis_url, redis_client, GATEWAY_RATE_USER="1/min")
    for i in range(3):
        message = inbound(f"/btw question {i}")
        token = message.side_reply.model_copy(update={"token": "interaction-token"})
        await ingest.receive(message.model_copy(update={"side_reply": token}))
    assert len(await _notice_texts(redis_client)) == 2


async def test_without_limits_nothing_is_refused(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = _ingest(redis_url, redis_client)
    outcomes = [await ingest.receive(inbound(f"m{i}")) for i in range(50)]
    assert set(outcomes) == {Receipt.QUEUED}

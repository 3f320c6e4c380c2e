"""The metrics workers write, read back as `/metrics` renders them, against a real Redis."""

from __future__ import annotations

import redis.asyncio as aioredis
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from gateway.metrics import Metrics, SnapshotCollector, snapshot
from gateway.state.keys import Keys


async def rendered(redis: aioredis.Redis) -> str:
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(*await snapshot(redis, [])))
    return generate_latest(registry).decode()


async def test_a_turn_adds_to_its_outcome_latency_tokens_and_early_start(
    redis_client: aioredis.Redis,
) -> None:
    metrics = Metrics(redis_client)
    await metrics.turn("slack", 0.3, 120, 40, "ok", early="used")
    await metrics.turn("slack", 7.5, 80, 10, "ok")
    assert await redis_client.hgetall(Keys.METRICS) == {
        "turns|slack|ok": "2",
        "latency_bucket|0.5": "1",
        "latency_bucket|10.0": "1",
        "latency_sum": "7.8",
        "tokens|prompt": "200",
        "tokens|completion": "50",
        "early|used": "1",
    }
    text = await rendered(redis_client)
    assert 'gateway_turns_total{outcome="ok",platform="slack"} 2.0' in text
    assert 'gateway_turn_latency_seconds_bucket{le="0.5"} 1.0' in text
    assert "gateway_turn_latency_seconds_sum 7.8" in text


async def test_tool_calls_and_downloads_add_to_theirs(redis_client: aioredis.Redis) -> None:
    metrics = Metrics(redis_client)
    await metrics.tool_call("desk__search", "ok", 0.2)
    await metrics.download("ok", 2048)
    await metrics.download("too_large", 0)
    assert await redis_client.hgetall(Keys.METRICS) == {
        "tools|desk__search|ok": "1",
        "tool_latency_bucket|0.25": "1",
        "tool_latency_sum": "0.2",
        "downloads|ok": "1",
        "download_bytes|total": "2048",
        "downloads|too_large": "1",
    }

"""The metrics workers write, read back as `/metrics` renders them, against a real Redis."""

from __future__ import annotations

import asyncio
import logging

import pytest
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


async def script_calls(redis: aioredis.Redis) -> int:
    stats = await redis.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


async def test_a_workers_counters_are_gathered_and_written_together(
    redis_client: aioredis.Redis,
) -> None:
    metrics = Metrics(redis_client, gather=0.3)
    before = await script_calls(redis_client)
    for seconds in (0.3, 0.4, 7.5):
        await metrics.turn("slack", seconds, 100, 10, "ok")
    await metrics.count("replies", "slack|stream")
    assert await redis_client.hgetall(Keys.METRICS) == {}  # held for the window
    async with asyncio.timeout(5):
        while not await redis_client.hgetall(Keys.METRICS):
            await asyncio.sleep(0.02)
    values = await redis_client.hgetall(Keys.METRICS)
    assert values["turns|slack|ok"] == "3" and values["tokens|prompt"] == "300"
    assert values["latency_bucket|0.5"] == "2" and float(values["latency_sum"]) == 8.2
    assert values["replies|slack|stream"] == "1"
    assert await script_calls(redis_client) - before == 1  # four writers, one call

    await metrics.turn("slack", 0.3, 1, 1, "failed")  # a new window, on its own
    async with asyncio.timeout(5):
        while "turns|slack|failed" not in await redis_client.hgetall(Keys.METRICS):
            await asyncio.sleep(0.02)
    assert await script_calls(redis_client) - before == 2


async def test_what_a_worker_holds_is_written_on_its_way_out(redis_client: aioredis.Redis) -> None:
    metrics = Metrics(redis_client, gather=60.0)
    await metrics.turn("slack", 0.3, 5, 1, "ok")
    await metrics.aclose()
    assert (await redis_client.hgetall(Keys.METRICS))["turns|slack|ok"] == "1"


async def test_counters_redis_will_not_take_are_dropped_with_a_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    try:
        metrics = Metrics(broken, gather=0.05)
        with caplog.at_level(logging.WARNING, logger="gateway.metrics"):
            await metrics.turn("slack", 0.3, 5, 1, "ok")  # never raises into the turn
            async with asyncio.timeout(10):
                while "metrics not written" not in caplog.text:
                    await asyncio.sleep(0.02)
            await metrics.aclose()  # nothing left, and no wait for a Redis that is gone
        assert caplog.text.count("metrics not written") == 1
    finally:
        await broken.aclose()

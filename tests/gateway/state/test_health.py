"""Health reports through a real Redis: the newest per component, stale and unreadable
ones left out, and a Redis that does not answer never failing the reporter."""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis

from gateway.state.health import REPORT_TTL, Health, read_all
from gateway.state.keys import Keys
from tests.support.redis_servers import free_port


async def test_each_component_shows_its_newest_report(redis_client: aioredis.Redis) -> None:
    slack, telegram = Health(redis_client, "slack"), Health(redis_client, "telegram")
    await slack.report(False, "connecting")
    await slack.report(True, "1 socket")
    await telegram.report(True)
    reports = await read_all(redis_client)
    assert {c: (r["up"], r["detail"]) for c, r in reports.items()} == {
        "slack": (True, "1 socket"),
        "telegram": (True, ""),
    }


async def test_a_report_not_renewed_within_the_ttl_is_left_out(
    redis_client: aioredis.Redis,
) -> None:
    await Health(redis_client, "discord-shards-0_1").report(True)
    later = time.time() + REPORT_TTL + 1
    assert "discord-shards-0_1" in await read_all(redis_client)
    assert await read_all(redis_client, now=later) == {}


async def test_an_unreadable_report_is_left_out_and_the_others_shown(
    redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    await redis_client.hset(Keys.HEALTH, "broken", "{not json")
    await redis_client.hset(Keys.HEALTH, "no-time", '{"up": true}')
    await Health(redis_client, "slack").report(True)
    assert list(await read_all(redis_client)) == ["slack"]
    assert "health report of broken is unreadable" in caplog.text


async def test_reporting_to_a_redis_that_is_away_logs_once_and_does_not_raise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    away = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}")
    try:
        await Health(away, "telegram-polling").report(True)
    finally:
        await away.aclose()
    assert "health of telegram-polling not reported" in caplog.text

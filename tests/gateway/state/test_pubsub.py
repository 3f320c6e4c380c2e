"""A kept subscription (gateway/state/pubsub.py) against a redis-server that dies and
comes back on the same port: messages before and after, one warning for the outage."""

from __future__ import annotations

import asyncio
import logging
import tempfile

import pytest
import redis.asyncio as aioredis

from gateway.state.connection import RedisOptions, connect
from gateway.state.pubsub import keep_subscribed
from tests.support.redis_servers import free_port, redis_command, serve, until


async def test_a_subscription_outlives_its_server_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = free_port()
    command = redis_command(port, tempfile.mkdtemp(prefix="gw-pubsub-"), "--appendonly", "no")
    server = serve(command)
    client = connect(f"redis://127.0.0.1:{port}", RedisOptions(retry_seconds=0.5))  # as a worker's
    publisher = aioredis.Redis(port=port, decode_responses=True)
    got: list[str] = []
    held = asyncio.Event()
    caplog.set_level(logging.DEBUG, logger="gateway.state.pubsub")
    kept = asyncio.create_task(
        keep_subscribed(
            client, "bell", got.append, "bell", on_subscribed=held.set, on_lost=held.clear
        )
    )
    try:
        await until(held.is_set)
        await publisher.publish("bell", "one")
        await until(lambda: got == ["one"])

        server.kill()
        server.wait()
        await until(lambda: not held.is_set())

        def attempts() -> int:
            return sum("still no Redis" in r.message for r in caplog.records)

        await until(lambda: attempts() >= 3)  # tried again and again meanwhile
        server = serve(command)
        await until(held.is_set)
        await publisher.publish("bell", "two")
        await until(lambda: got == ["one", "two"])

        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert [r.message.split(" (")[0] for r in warnings] == ["bell lost Redis"]
        assert any("bell subscribed again after" in r.message for r in caplog.records)
    finally:
        kept.cancel()
        await asyncio.gather(kept, return_exceptions=True)
        await client.aclose()
        await publisher.aclose()
        server.kill()
        server.wait()

"""Processes counted by kind while they say they are alive, against a real Redis."""

from __future__ import annotations

import asyncio
import time

from redis.asyncio import Redis

from gateway.state import processes
from gateway.state.keys import Keys


async def test_a_process_is_counted_while_alive_and_not_once_it_stops(
    redis_client: Redis,
) -> None:
    assert await processes.counts(redis_client) == {"web": 0, "worker": 0}
    alive = asyncio.create_task(processes.keep_alive(redis_client, "web", "web-1"))
    async with asyncio.timeout(5):
        while (await processes.counts(redis_client))["web"] != 1:
            await asyncio.sleep(0.01)
    alive.cancel()
    await asyncio.gather(alive, return_exceptions=True)
    assert await processes.counts(redis_client) == {"web": 0, "worker": 0}


async def test_one_not_heard_of_within_the_window_is_not_counted(redis_client: Redis) -> None:
    now_ms = int(time.time() * 1000)
    gone_ms = now_ms - int(processes.GONE_AFTER * 1000) - 1000
    await redis_client.zadd(Keys.processes("web"), {"killed": gone_ms, "alive": now_ms})
    await redis_client.zadd(Keys.WORKERS, {"w-killed": gone_ms, "w-1": now_ms, "w-2": now_ms})
    assert await processes.counts(redis_client) == {"web": 1, "worker": 2}

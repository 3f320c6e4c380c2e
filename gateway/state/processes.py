"""The gateway's processes by kind, each counted while it says it is alive: what the
console's health page shows of a deployment that runs on several machines.

A `gateway web` says so every ALIVE_EVERY seconds (`keep_alive`, for its whole life)
and takes its name off when it stops; a worker says so every reclaim round
(`Worker.say_alive`, `Keys.WORKERS`). A process is counted while it was heard of
within GONE_AFTER: one killed without a word drops out of the count that long after.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.state.keys import Keys

log = logging.getLogger(__name__)

ALIVE_EVERY = 15.0
GONE_AFTER = 60.0  # longer than a worker's reclaim round (22.5 s at the default lease)
KINDS = ("web", "worker")


def process_name() -> str:
    """This process, as the counts name it: its host, pid and a random part."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _key(kind: str) -> str:
    return Keys.WORKERS if kind == "worker" else Keys.processes(kind)


async def say_alive(redis: Redis, kind: str, name: str) -> None:
    now_ms = int(time.time() * 1000)
    async with redis.pipeline(transaction=True) as pipe:
        pipe.zadd(_key(kind), {name: now_ms})
        pipe.zremrangebyscore(_key(kind), "-inf", now_ms - 10 * GONE_AFTER * 1000)
        await pipe.execute()


async def keep_alive(redis: Redis, kind: str, name: str) -> None:
    """Say so every ALIVE_EVERY seconds until cancelled, then take the name off (best
    effort: a process that cannot is dropped GONE_AFTER later)."""
    try:
        while True:
            try:
                await say_alive(redis, kind, name)
            except RedisError as exc:
                log.debug("%s %s could not say it is alive: %s", kind, name, exc)
            await asyncio.sleep(ALIVE_EVERY)
    finally:
        try:
            await asyncio.shield(redis.zrem(_key(kind), name))
        except (RedisError, asyncio.CancelledError) as exc:
            log.debug("%s %s stays listed until it is gone: %s", kind, name, exc)


async def counts(redis: Redis) -> dict[str, int]:
    """Each kind's processes heard of within GONE_AFTER."""
    since = int((time.time() - GONE_AFTER) * 1000)
    async with redis.pipeline(transaction=False) as pipe:
        for kind in KINDS:
            pipe.zcount(_key(kind), since, "+inf")
        found = await pipe.execute()
    return dict(zip(KINDS, (int(n) for n in found), strict=True))

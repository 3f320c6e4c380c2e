"""The job streams: one Redis stream per platform, read through one consumer group.

A job stays pending (in the group's PEL) until the worker that ran it
acknowledges it; a worker that dies leaves it there, and another worker claims
it once it has been idle for longer than any live worker lets its jobs idle
(live workers touch their running jobs on every lease heartbeat).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from gateway.store import GROUP, Keys

_COMPLETE = """
local acked = redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if acked == 1 then
  redis.call('XDEL', KEYS[1], ARGV[2])
  redis.call('HINCRBY', KEYS[2], 'owed', -1)
  redis.call('ZREM', KEYS[3], ARGV[2])
end
return acked
"""


@dataclass(frozen=True, slots=True)
class Job:
    """One unit of work: a main turn, a side question, or a command reply."""

    stream: str
    id: str
    kind: str
    session_key: str
    payload: dict[str, Any] = field(default_factory=dict)

    # Enqueued while its reader was already waiting (not read from a backlog).
    fresh: bool = False

    @classmethod
    def from_fields(
        cls, stream: str, job_id: str, fields: dict[str, str], fresh: bool = False
    ) -> Job:
        payload = json.loads(fields["payload"]) if fields.get("payload") else {}
        session = fields.get("session", "")
        return cls(stream, job_id, fields.get("kind", ""), session, payload, fresh)


def _millis(job_id: str) -> int:
    head = job_id.partition("-")[0]
    return int(head) if head.isdigit() else 0


def consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class JobQueue:
    """Reading, reclaiming and completing jobs for one worker (one consumer)."""

    def __init__(self, redis: Redis, platforms: Sequence[str], consumer: str | None = None,
                 streams: Mapping[str, str] | None = None) -> None:
        self.redis = redis
        routes = streams or {}
        self.streams = [routes.get(p) or Keys.jobs(p) for p in platforms]
        self.consumer = consumer or consumer_name()
        self._complete = redis.register_script(_COMPLETE)
        self.clock_offset = 0.0  # the Redis server's clock minus this machine's, in seconds

    async def ensure_groups(self) -> None:
        await self.measure_clock()
        for stream in self.streams:
            try:
                await self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def measure_clock(self) -> None:
        """How far the Redis server's clock (which stamps job ids) is from this one's."""
        before = time.time()
        seconds, micros = await self.redis.time()
        after = time.time()
        self.clock_offset = seconds + micros / 1e6 - (before + after) / 2

    async def read(self, count: int, block_ms: int) -> list[Job]:
        """New jobs for this consumer, waiting up to `block_ms` for the first.

        A job whose id (the Redis server's clock, in ms) is not older than the
        read is `fresh`: it arrived while this consumer waited for it.
        """
        if count <= 0:
            return []
        since = int((time.time() + self.clock_offset) * 1000) - 1
        response: Any = await self.redis.xreadgroup(
            GROUP, self.consumer, {s: ">" for s in self.streams}, count=count, block=block_ms
        )
        return [
            Job.from_fields(stream, job_id, fields, fresh=_millis(job_id) >= since)
            for stream, entries in response or []
            for job_id, fields in entries
            if fields
        ]

    async def reclaim(self, min_idle: float, count: int = 20) -> list[Job]:
        """Jobs left pending by a worker that stopped touching them (crashed or hung)."""
        await self.measure_clock()  # clocks drift: measured again on every round
        jobs: list[Job] = []
        for stream in self.streams:
            result = await self.redis.xautoclaim(
                stream, GROUP, self.consumer, int(min_idle * 1000), "0-0", count=count
            )
            for job_id, fields in result[1]:
                if fields:
                    jobs.append(Job.from_fields(stream, job_id, fields))
                else:  # trimmed away: nothing left to run
                    await self.redis.xack(stream, GROUP, job_id)
        return jobs

    async def touch(self, job: Job) -> None:
        """Reset the job's idle time so no other worker reclaims it while it runs."""
        await self.redis.xclaim(job.stream, GROUP, self.consumer, 0, [job.id], justid=True)

    async def complete(self, job: Job) -> bool:
        keys = [job.stream, Keys.meta(job.session_key), Keys.side_in_flight(job.session_key)]
        return bool(await self._complete(keys=keys, args=[GROUP, job.id]))

    async def depth(self) -> dict[str, int]:
        """Jobs waiting or running, by stream (for /metrics)."""
        depths: dict[str, int] = {}
        for stream in self.streams:
            depths[stream] = (
                int(await self.redis.xlen(stream)) if await self.redis.exists(stream) else 0
            )
        return depths

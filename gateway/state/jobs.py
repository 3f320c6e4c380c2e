"""The job streams and a job's whole life: read, run while touched, complete or leave pending.

One Redis stream per platform, read through one consumer group. A job is owed
(counted in its session's `owed`) from enqueue until it completes, and it has
one owner from the read on:

    read / reclaim ──> running (touched every interval) ──> complete
                                   │ any exception, cancellation, lost lease, lost Redis
                                   └──> left pending ──> reclaimed once idle ──> running …

A job completes only after its effect is recorded (the body returned), so a
worker that dies or fails leaves it for another. A live worker touches every
job it runs, whatever its kind, so no reclaim takes it back while it runs. A
job delivered more than `MAX_DELIVERIES` times is given up on (the worker says
so once) rather than retried forever.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from gateway.state.keys import GROUP, Keys
from gateway.state.lease import every
from gateway.state.scripts import load

log = logging.getLogger(__name__)

MAX_DELIVERIES = 5
START = "0-0"


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
    # How many times it was handed to a worker (1 on its first read).
    deliveries: int = 1

    @classmethod
    def from_fields(
        cls,
        stream: str,
        job_id: str,
        fields: dict[str, str],
        fresh: bool = False,
        deliveries: int = 1,
    ) -> Job:
        payload = json.loads(fields["payload"]) if fields.get("payload") else {}
        session = fields.get("session", "")
        kind = fields.get("kind", "")
        return cls(stream, job_id, kind, session, payload, fresh, deliveries)

    @property
    def exhausted(self) -> bool:
        return self.deliveries > MAX_DELIVERIES


def _millis(job_id: str) -> int:
    head = job_id.partition("-")[0]
    return int(head) if head.isdigit() else 0


def consumer_name() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


class JobQueue:
    """Reading, reclaiming, touching and completing jobs for one worker (one consumer)."""

    def __init__(
        self,
        redis: Redis,
        platforms: Sequence[str],
        consumer: str | None = None,
        streams: Mapping[str, str] | None = None,
    ) -> None:
        self.redis = redis
        routes = streams or {}
        self.streams = [routes.get(p) or Keys.jobs(p) for p in platforms]
        self.consumer = consumer or consumer_name()
        self._complete = load("complete").bind(redis)
        self.clock_offset = 0.0  # the Redis server's clock minus this machine's, in seconds
        self.clock_error = 0.0  # how far off that measure may be: half its round trip
        # Where each stream's reclaim scan goes on from: XAUTOCLAIM looks at a bounded
        # slice of the pending list per call, so starting over at 0-0 every round
        # would never reach the jobs behind the first slice.
        self._cursors = dict.fromkeys(self.streams, START)

    async def ensure_groups(self) -> None:
        await self.measure_clock()
        for stream in self.streams:
            try:
                await self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def measure_clock(self, samples: int = 3) -> None:
        """How far the Redis server's clock (which stamps job ids) is from this one's.

        The server's answer was stamped somewhere within the round trip: the
        quickest of a few is kept, and half of it is the measure's error.
        """
        measures = []
        for _ in range(samples):
            before = time.time()
            seconds, micros = await self.redis.time()
            after = time.time()
            measures.append((after - before, seconds + micros / 1e6 - (before + after) / 2))
        trip, self.clock_offset = min(measures)
        self.clock_error = trip / 2

    async def read(self, count: int, block_ms: int) -> list[Job]:
        """New jobs for this consumer, waiting up to `block_ms` for the first.

        A job whose id (the Redis server's clock, in ms) is not older than the
        read is `fresh`: it arrived while this consumer waited for it. The clock's
        measuring error counts for freshness: a job taken for fresh by mistake only
        starts an early call that its claim then checks.
        """
        if count <= 0:
            return []
        since = int((time.time() + self.clock_offset - self.clock_error) * 1000) - 1
        response: Any = await self.redis.xreadgroup(
            GROUP, self.consumer, {s: ">" for s in self.streams}, count=count, block=block_ms
        )
        return [
            Job.from_fields(stream, job_id, fields, fresh=_millis(job_id) >= since)
            for stream, entries in response or []
            for job_id, fields in entries
            if fields
        ]

    async def unstarted(self, running: Collection[str], count: int) -> list[Job]:
        """Jobs already delivered to this consumer that it is not running.

        A read whose answer never reached this process (a dropped connection, a
        retried command) leaves its jobs pending under this consumer's name;
        they are picked up here, not after a reclaim's idle time. Only those are
        claimed again (one more delivery each): the running ones are listed, not
        read, so their delivery counts do not grow with every idle check.
        """
        if count <= 0:
            return []
        jobs: list[Job] = []
        for stream in self.streams:
            if len(jobs) >= count:
                break
            rows: Any = await self.redis.xpending_range(
                stream,
                GROUP,
                min="-",
                max="+",
                count=count + len(running),
                consumername=self.consumer,
            )
            wanted = {
                str(row["message_id"]): int(row["times_delivered"])
                for row in rows
                if str(row["message_id"]) not in running
            }
            ids: list[Any] = list(wanted)[: count - len(jobs)]
            if not ids:
                continue
            claimed: Any = await self.redis.xclaim(stream, GROUP, self.consumer, 0, ids)
            found = {str(job_id): fields for job_id, fields in claimed or [] if job_id}
            for job_id in ids:
                fields = found.get(job_id)
                if not fields:  # deleted after delivery: nothing left to run
                    await self.redis.xack(stream, GROUP, job_id)
                else:
                    jobs.append(
                        Job.from_fields(stream, job_id, fields, deliveries=wanted[job_id] + 1)
                    )
        return jobs

    async def reclaim(self, min_idle: float, count: int) -> list[Job]:
        """Up to `count` jobs left pending by a worker that stopped touching them."""
        await self.measure_clock()  # clocks drift: measured again on every round
        jobs: list[Job] = []
        for stream in self.streams:
            if len(jobs) >= count:
                break
            jobs += await self._reclaim_stream(stream, min_idle, count - len(jobs))
        return jobs

    async def _reclaim_stream(self, stream: str, min_idle: float, count: int) -> list[Job]:
        result = await self.redis.xautoclaim(
            stream, GROUP, self.consumer, int(min_idle * 1000), self._cursors[stream], count=count
        )
        self._cursors[stream] = str(result[0])  # 0-0 again once the scan went round
        jobs: list[Job] = []
        for job_id, fields in result[1]:
            if fields:
                jobs.append(
                    Job.from_fields(
                        stream, job_id, fields, deliveries=await self._deliveries(stream, job_id)
                    )
                )
            else:  # trimmed away: nothing left to run
                await self.redis.xack(stream, GROUP, job_id)
        return jobs

    async def _deliveries(self, stream: str, job_id: str) -> int:
        rows = await self.redis.xpending_range(stream, GROUP, min=job_id, max=job_id, count=1)
        return int(rows[0]["times_delivered"]) if rows else 1

    async def touch(self, job: Job) -> None:
        """Reset the job's idle time so no other worker reclaims it while it runs."""
        await self.redis.xclaim(job.stream, GROUP, self.consumer, 0, [job.id], justid=True)

    async def complete(self, job: Job) -> bool:
        """The job's effect is recorded: acknowledge it and stop owing it (once)."""
        keys = {
            "stream": job.stream,
            "meta": Keys.meta(job.session_key),
            "side_in_flight": Keys.side_in_flight(job.session_key),
        }
        return bool(await self._complete(keys=keys, args={"group": GROUP, "job": job.id}))

    @contextlib.asynccontextmanager
    async def owned(self, job: Job, touch_every: float) -> AsyncIterator[Job]:
        """Own `job` while the body runs: touched every `touch_every` seconds, completed
        when the body returns, left pending (for a re-run) when it raises."""

        async def touch() -> None:
            try:
                await self.touch(job)
            except RedisError as exc:  # tried again next time; reclaim waits 1.5 TTL
                log.warning("touching %s job %s failed: %s", job.kind, job.id, exc)

        async with every(touch_every, touch):
            yield job
        await self.complete(job)

"""The job streams and a job's whole life: read, run while touched, complete or leave pending.

Each platform has one Redis stream per shard (`gateway/state/shards.py`), all read
through one consumer group. A worker does not block on the streams (a blocking
read names one slot's keys on a Redis Cluster: it would need a connection per
stream): each script that adds a job rings the doorbell (`Keys.JOBS_CHANNEL`)
with its stream's name, and the worker's one subscription marks that stream to
read; reads then go to the marked streams in turn, without blocking, each until
it is drained. Whatever was added while the worker was not listening is found by
reading every stream once each time it (re)subscribes, and the sweep of each
reclaim round reads a few streams more (`SWEEP_STREAMS`), in turn, for a ring
that was lost on its way (a primary that died just after its script ran). So an
idle worker sends nothing but that round's commands, however many shards there
are.

A job is owed
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

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from gateway.state.keys import GROUP, Keys, on_cluster
from gateway.state.lease import every
from gateway.state.pubsub import keep_subscribed
from gateway.state.scripts import load

log = logging.getLogger(__name__)

MAX_DELIVERIES = 5
START = "0-0"
# Streams each reclaim round reclaims from and sweeps, in turn: the round's cost,
# whatever the number of shards (a full pass takes ceil(streams / this) rounds).
SWEEP_STREAMS = 8


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
    def key(self) -> str:
        """The job among every stream's (an id is unique only within its stream)."""
        return f"{self.stream} {self.id}"

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
        self.streams = [
            stream
            for platform in platforms
            for stream in ([routes[platform]] if platform in routes else Keys.job_streams(platform))
        ]
        self.consumer = consumer or consumer_name()
        self._complete = load("complete").bind(redis)
        self.clock_offset = 0.0  # the Redis server's clock minus this machine's, in seconds
        self.clock_error = 0.0  # how far off that measure may be: half its round trip
        # Where each stream's reclaim scan goes on from: XAUTOCLAIM looks at a bounded
        # slice of the pending list per call, so starting over at 0-0 every round
        # would never reach the jobs behind the first slice.
        self._cursors = dict.fromkeys(self.streams, START)
        self._marked: dict[str, None] = dict.fromkeys(self.streams)  # to read (in order)
        self._rung = asyncio.Event()  # set when a stream is marked
        self._waiting_since = dict.fromkeys(self.streams, 0)  # ms: when each was drained
        self._turn = 0  # where the next read of the marked streams starts
        self._turn_of_rounds = 0  # where the next reclaim round starts
        # Streams where a job of this consumer may be pending unstarted: read since
        # (a read's answer can be lost, or the read retried), or a job of it ended.
        self._to_check: set[str] = set()
        self.listening = asyncio.Event()  # set while the doorbell's subscription holds

    async def ensure_groups(self) -> None:
        await self.measure_clock()
        now = self._server_ms()
        for stream in self.streams:
            self._waiting_since[stream] = now
            await self._create_group(stream)

    async def _create_group(self, stream: str) -> None:
        try:
            await self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _grouped(
        self, stream: str, command: Callable[..., Awaitable[Any]], *args: Any
    ) -> Any:
        """`command(*args)` on `stream`, its group made again when the server lost it (a
        restart without persistence, a flush): what was added since is read from the start."""
        try:
            return await command(*args)
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            log.warning("job stream %s had lost its group; made again", stream)
            await self._create_group(stream)
            return await command(*args)

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

    def _server_ms(self) -> int:
        return int((time.time() + self.clock_offset - self.clock_error) * 1000) - 1

    async def listen(self) -> None:
        """Mark each stream the doorbell names, until cancelled; every stream once at
        each (re)subscription, for what was added while nobody listened."""

        def subscribed() -> None:
            self.mark(self.streams)
            self.listening.set()

        await keep_subscribed(
            self.redis,
            Keys.JOBS_CHANNEL,
            lambda stream: self.mark([stream]),
            "job doorbell",
            on_subscribed=subscribed,
            on_lost=self.listening.clear,
        )

    def mark(self, streams: Sequence[str]) -> None:
        """These streams may have jobs to read (those this worker does not read are not
        marked)."""
        for stream in streams:
            if stream in self._waiting_since:
                self._marked[stream] = None
                self._rung.set()

    async def read(self, count: int, block_ms: int) -> list[Job]:
        """New jobs for this consumer, waiting up to `block_ms` for a stream to be marked.

        The marked streams are read in turn (a rotating start: each gets its share),
        each as far as `count` goes. A job whose id (the Redis server's clock, in ms)
        is not older than its stream's last drained read is `fresh`: it arrived
        while this worker waited for it. The clock's measuring error counts for
        freshness: a job taken for fresh by mistake only starts an early call that
        its claim then checks. A stream whose read fails (its node is down, on a
        cluster) stays marked and the others are read; the error is raised only
        when nothing was read.
        """
        if count <= 0:
            return []
        if not self._marked:
            self._rung.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(block_ms / 1000):
                    await self._rung.wait()
        jobs: list[Job] = []
        failed: RedisError | OSError | None = None
        for stream in self._in_turn(list(self._marked)):
            if len(jobs) >= count:
                break
            try:
                jobs += await self._read_stream(stream, count - len(jobs))
            except (RedisError, OSError) as exc:  # its node is down: the others go on
                failed = exc
        if failed is not None and not jobs:
            raise failed
        return jobs

    def _in_turn(self, streams: list[str]) -> list[str]:
        """`streams` from a start that moves on by one at every call."""
        if not streams:
            return []
        self._turn = (self._turn + 1) % len(streams)
        return streams[self._turn :] + streams[: self._turn]

    async def _read_stream(self, stream: str, count: int) -> list[Job]:
        """Up to `count` new jobs of one stream; it stays marked unless this drained it
        (a ring that comes meanwhile marks it again)."""
        self._marked.pop(stream, None)
        self._to_check.add(stream)
        since = self._server_ms()
        try:
            response = await self._grouped(stream, self._xreadgroup, stream, count)
        except (RedisError, OSError):
            self._marked[stream] = None
            raise
        entries = [entry for _, found in response or [] for entry in found]
        if len(entries) >= count:
            self._marked[stream] = None
        fresh_from = self._waiting_since[stream]
        if len(entries) < count:
            self._waiting_since[stream] = since
        return [
            Job.from_fields(stream, job_id, fields, fresh=_millis(job_id) >= fresh_from)
            for job_id, fields in entries
            if fields
        ]

    async def _xreadgroup(self, stream: str, count: int) -> Any:
        if not on_cluster(self.redis):
            return await self.redis.xreadgroup(GROUP, self.consumer, {stream: ">"}, count=count)
        # XREADGROUP's key moves with its arguments: unless told the node (its slot map
        # knows it), redis-py asks the server where the key is (COMMAND GETKEYS) on every
        # read, on a server that lists no key specs (before Redis 7).
        node = self.redis.get_node_from_key(stream)  # type: ignore[attr-defined]
        pieces = ("GROUP", GROUP, self.consumer, "COUNT", count, "STREAMS", stream, ">")
        return await self.redis.execute_command(  # type: ignore[no-untyped-call]
            "XREADGROUP", *pieces, target_nodes=node
        )

    async def unstarted(self, running: Collection[str], count: int) -> list[Job]:
        """Jobs already delivered to this consumer that it is not running (`running`: the
        `Job.key`s of those it is).

        A read whose answer never reached this process (a dropped connection, a
        retried command) leaves its jobs pending under this consumer's name;
        they are picked up here, not after a reclaim's idle time. Only the
        streams read since, or where a job ended, are looked at (an idle worker
        looks at none), and only those jobs are claimed again (one more delivery
        each): the running ones are listed, not read, so their delivery counts do
        not grow with every idle check.
        """
        if count <= 0:
            return []
        jobs: list[Job] = []
        for stream in sorted(self._to_check):
            if len(jobs) >= count:
                break
            found = await self._unstarted_in(stream, running, count - len(jobs))
            if not found:
                self._to_check.discard(stream)
            jobs += found
        return jobs

    async def _unstarted_in(self, stream: str, running: Collection[str], count: int) -> list[Job]:
        wanted_rows = count + len(running)
        pending = self.redis.xpending_range
        rows: Any = await self._grouped(
            stream, pending, stream, GROUP, "-", "+", wanted_rows, self.consumer
        )
        wanted = {
            str(row["message_id"]): int(row["times_delivered"])
            for row in rows
            if f"{stream} {row['message_id']}" not in running
        }
        ids: list[Any] = list(wanted)[:count]
        if not ids:
            return []
        claimed: Any = await self.redis.xclaim(stream, GROUP, self.consumer, 0, ids)
        found = {str(job_id): fields for job_id, fields in claimed or [] if job_id}
        jobs: list[Job] = []
        for job_id in ids:
            fields = found.get(job_id)
            if not fields:  # deleted after delivery: nothing left to run
                await self.redis.xack(stream, GROUP, job_id)
            else:
                jobs.append(Job.from_fields(stream, job_id, fields, deliveries=wanted[job_id] + 1))
        return jobs

    async def reclaim(self, min_idle: float, count: int) -> list[Job]:
        """Up to `count` jobs left pending by a worker that stopped touching them, from
        this round's streams (`SWEEP_STREAMS` of them, in turn); those streams are
        marked to read as well, for a ring that never came."""
        await self.measure_clock()  # clocks drift: measured again on every round
        jobs: list[Job] = []
        for stream in self.round_streams():
            if len(jobs) < count:
                jobs += await self._reclaim_stream(stream, min_idle, count - len(jobs))
            self.mark([stream])
        return jobs

    def round_streams(self) -> list[str]:
        """The streams of the next reclaim round."""
        size = min(SWEEP_STREAMS, len(self.streams))
        start = self._turn_of_rounds
        self._turn_of_rounds = (start + size) % len(self.streams)
        return [self.streams[(start + i) % len(self.streams)] for i in range(size)]

    async def _reclaim_stream(self, stream: str, min_idle: float, count: int) -> list[Job]:
        idle_ms, cursor = int(min_idle * 1000), self._cursors[stream]
        claim = self.redis.xautoclaim
        result = await self._grouped(
            stream, claim, stream, GROUP, self.consumer, idle_ms, cursor, count
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

        try:
            async with every(touch_every, touch):
                yield job
            await self.complete(job)
        finally:
            self._to_check.add(job.stream)  # left pending, or not known to be completed

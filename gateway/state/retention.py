"""Retention: sessions idle for longer than GATEWAY_SESSION_RETENTION_DAYS are removed.

Each shard's session index (`Keys.sessions`) is scored by each session's last activity:
a message (ingest), a recorded turn (finish) and a job (enqueue) all set the
score in the script that does the work. Idle sessions are therefore the
index's lowest scores, read in batches, never a SCAN of the keyspace; and a
session written before retention existed is in the index already, scored by
its last message.

Each candidate is removed by `prune.lua`, which checks again, in the same
step as the delete, that the session is still idle and has nothing running,
queued or owed: a message that arrives between finding a session and
removing it keeps the session whole.

    Retention(redis, older_than=days * DAY).prune()   # `gateway sessions prune`
    retention.keep_pruning()                           # a worker's loop

Workers prune about once an interval (PRUNE_EVERY): the one that takes
`Keys.PRUNE_LOCK` prunes, and the lock outlives the run by one interval, so
the other workers skip until the next one is due.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.state.keys import Keys
from gateway.state.lease import Lease
from gateway.state.scripts import Arg, load

log = logging.getLogger(__name__)

DAY = 86400.0
BATCH = 200  # candidates read, and channel names looked up, per round trip
PRUNE_EVERY = 3600.0  # seconds between two prune runs across all workers
CHECKS_PER_INTERVAL = 4  # how often a worker looks whether a run is due


@dataclass(frozen=True, slots=True)
class PruneResult:
    """What one run did: sessions removed, and idle ones kept (busy, or active again)."""

    removed: int
    kept: int


class Retention:
    """Finds and removes the sessions idle for longer than `older_than` seconds."""

    def __init__(self, redis: Redis, older_than: float, *, every: float = PRUNE_EVERY) -> None:
        self.redis = redis
        self.older_than = older_than
        self.every = every
        self._prune = load("prune").bind(redis)

    async def prune(self) -> PruneResult:
        """Remove every session idle for longer than `older_than`, batch by batch.

        One script call at a time: a run shares Redis with the turns in flight.
        """
        cutoff = time.time() - self.older_than
        started = time.monotonic()
        removed = kept = 0
        for index in Keys.session_indexes():
            gone, left = await self._prune_index(index, cutoff)
            removed, kept = removed + gone, kept + left
        log.info(
            "pruning idle sessions: %d removed, %d kept (busy or active again) in %.2fs",
            removed,
            kept,
            time.monotonic() - started,
        )
        return PruneResult(removed, kept)

    async def _prune_index(self, index: str, cutoff: float) -> tuple[int, int]:
        """One shard's idle sessions removed: how many went, how many were kept."""
        removed = kept = 0
        while True:
            # The kept ones stay in the range, ahead of the ones not looked at yet (one
            # that came alive meanwhile has left it: what that skips, the next run sees).
            batch = await self.idle_sessions(cutoff, offset=kept, count=BATCH, index=index)
            if not batch:
                return removed, kept
            for session_key, channel_key in await self._channels(batch):
                if await self.prune_session(session_key, cutoff, channel_key):
                    removed += 1
                else:
                    kept += 1

    async def idle_sessions(
        self, cutoff: float, *, offset: int = 0, count: int = BATCH, index: str | None = None
    ) -> list[str]:
        """Sessions of one shard's index (every shard's, without one) whose last activity
        is at or before `cutoff`, the oldest first."""
        found: list[str] = []
        for key in [index] if index else Keys.session_indexes():
            rows = await self.redis.zrangebyscore(key, "-inf", cutoff, start=offset, num=count)
            found += [str(row) for row in rows]
        return found

    async def prune_session(
        self, session_key: str, cutoff: float, channel_key: str | None = None
    ) -> bool:
        """Remove one session if it is still idle since `cutoff` and nothing is owed."""
        channel = channel_key or channel_of(session_key)
        keys = {
            **Keys.parts(session_key),
            "sessions": Keys.session_index(session_key),
            "channel": Keys.channel_sessions(channel),
            "side": Keys.side_in_flight(session_key),
            "lease": Keys.lease(session_key),
            "queued": Keys.queued(session_key),
        }
        args: dict[str, Arg] = {"session": session_key, "cutoff": cutoff}
        return bool(await self._prune(keys=keys, args=args))

    async def _channels(self, session_keys: list[str]) -> list[tuple[str, str]]:
        """Each session with the channel set it is in (as ingest recorded it)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in session_keys:
                pipe.hget(Keys.meta(key), "channel")
            recorded = await pipe.execute()
        return [
            (key, str(channel or channel_of(key)))
            for key, channel in zip(session_keys, recorded, strict=True)
        ]

    async def prune_if_due(self) -> PruneResult | None:
        """Prune when no worker has in this interval; None when another one has (or does)."""
        turn = Lease(self.redis, Keys.PRUNE_LOCK, self.every)
        if not await turn.acquire():
            return None
        # Renewed while the run lasts and left to expire after it: the next run is
        # due one interval after this one ends, whichever worker takes it.
        async with turn.kept(release=False):
            return await self.prune()

    async def keep_pruning(self) -> None:
        """A worker's loop: look whether a run is due a few times an interval, until cancelled."""
        while True:
            try:
                await self.prune_if_due()
            except RedisError as exc:
                log.warning("pruning idle sessions failed (%s); trying again later", exc)
            await asyncio.sleep(self.every / CHECKS_PER_INTERVAL)


def channel_of(session_key: str) -> str:
    """The channel key of a session (`platform:workspace:channel`), from its key."""
    return ":".join(session_key.split(":")[:3])

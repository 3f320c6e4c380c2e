"""Acknowledging an event only once replicas have it (GATEWAY_REDIS_WAIT_REPLICAS).

Redis replicates asynchronously: a primary that fails over can take with it writes
it had already answered. With `replicas` set, ingest's last step for an event asks
the primary to wait until that many replicas have everything it wrote so far (WAIT,
or WAITAOF, which waits until the replicas have also written it to their
append-only files). A shortfall when the timeout ends raises `NotReplicated`, a
Redis error: the platform is answered 503 and delivers the event again, and ingest,
finding it stored already, waits again before acknowledging it.

WAIT counts the writes of the connection it is sent on, so it travels with a small
write of its own (`Keys.acked`) in one pipeline on one connection: whatever the
event wrote before, on any connection, comes earlier in the primary's replication
stream. On a Cluster that connection is to the node holding the key given, the one
the event's atomic step wrote.

WAIT speaks for the primary it is sent to. A failover between the event's write
and the WAIT (the old primary killed with the write unreplicated, the WAIT repeated
on a connection to the new primary, whose replica answers it) would acknowledge an
event no primary holds: so the same pipeline asks whether a key the event wrote
(`present`: its dedupe mark) is there, and a primary without it is a shortfall.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from gateway.state.keys import Keys

log = logging.getLogger(__name__)

MARK_TTL_MS = 5000


class NotReplicated(RedisError):
    """Fewer replicas than asked acknowledged an event's writes within the timeout."""


@dataclass(frozen=True)
class WaitOptions:
    """GATEWAY_REDIS_WAIT_REPLICAS and its timeout and AOF choice, and how long a turn
    asks again before it gives its delivery up (GATEWAY_REDIS_RETRY_SECONDS)."""

    replicas: int = 0
    timeout: float = 1.0
    aof: bool = False
    within: float = 10.0


class ReplicaWait:
    """Waits, after an event is written, until `replicas` replicas have it."""

    def __init__(
        self,
        redis: Redis,
        replicas: int,
        timeout: float,
        aof: bool = False,
        within: float = WaitOptions.within,
    ) -> None:
        self.redis = redis
        self.replicas = replicas
        self.timeout_ms = max(1, int(timeout * 1000))
        self.aof = aof
        self.within = within

    @classmethod
    def of(cls, redis: Redis, options: WaitOptions) -> ReplicaWait:
        return cls(redis, options.replicas, options.timeout, options.aof, options.within)

    @property
    def active(self) -> bool:
        return self.replicas > 0

    async def confirm(self, written_key: str, present: str | None = None) -> None:
        """Return once the replicas have everything written so far on the node of
        `written_key`, and that node holds `present` (a key the event wrote, in the same
        slot); raise NotReplicated when they do not within the timeout, or it does not."""
        if not self.active:
            return
        acked = await self._acked(written_key, present)
        if acked < 0:
            log.warning("the primary does not hold the event's writes: lost in a failover")
            raise NotReplicated(f"{present} is not on the primary the replicas answered for")
        if acked < self.replicas:
            log.warning("%d of %d replicas have the event's writes", acked, self.replicas)
            raise self._short(acked)

    async def settled(self, written_key: str) -> None:
        """`confirm`, asked again for up to `within` seconds: a turn about to post waits
        out a failover (the new primary has no replica until the old one has synced
        from it) instead of giving its delivery up. Raises NotReplicated at the end."""
        if not self.active:
            return
        within = self.within
        deadline, delay, waited = time.monotonic() + within, 0.05, False
        while (acked := await self._acked(written_key)) < self.replicas:
            if time.monotonic() + delay > deadline:
                log.warning("%d of %d replicas after %.0f s", acked, self.replicas, within)
                raise self._short(acked)
            if not waited:
                log.info("waiting for %d replicas before posting", self.replicas)
                waited = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _acked(self, written_key: str, present: str | None = None) -> int:
        """How many replicas have everything written so far on `written_key`'s node;
        -1 when that node does not hold `present`."""
        commands = [("SET", Keys.acked(written_key), "1", "PX", MARK_TTL_MS), self._wait()]
        if present is not None:
            commands.append(("EXISTS", present))
        if isinstance(self.redis, RedisCluster):
            replies = await _on_node_of(self.redis, written_key, commands)
        else:
            replies = await _pipelined(self.redis, commands)
        if present is not None and not int(replies[2]):
            return -1
        waited = replies[1]
        return int(waited[1] if self.aof else waited)

    def _short(self, acked: int) -> NotReplicated:
        return NotReplicated(
            f"{acked} of {self.replicas} replicas have the writes after "
            f"{self.timeout_ms} ms (GATEWAY_REDIS_WAIT_REPLICAS)"
        )

    def _wait(self) -> tuple[Any, ...]:
        if self.aof:
            return ("WAITAOF", 0, self.replicas, self.timeout_ms)
        return ("WAIT", self.replicas, self.timeout_ms)


async def _pipelined(redis: Redis, commands: list[tuple[Any, ...]]) -> list[Any]:
    async with redis.pipeline(transaction=False) as pipe:
        for command in commands:
            pipe.execute_command(*command)
        return list(await pipe.execute())


async def _on_node_of(
    cluster: RedisCluster, key: str, commands: list[tuple[Any, ...]]
) -> list[Any]:
    """The commands on one connection to the primary of `key`'s slot (a cluster pipeline
    would send WAIT, which names no key, to a node of its own choosing)."""
    node = cluster.get_node_from_key(key)
    if node is None:
        raise NotReplicated(f"no primary holds the slot of {key} yet")
    connection = node.acquire_connection()
    try:
        await connection.send_packed_command(connection.pack_commands(commands))
        return [await connection.read_response() for _ in commands]
    finally:
        node.release(connection)

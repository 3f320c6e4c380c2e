"""Leases: a Redis key held by one owner's token for a TTL, renewed while the owner works.

A session's lease makes one turn at a time run in it; a compression lock makes
one compression at a time rewrite its segments. Both are held the same way:

    lease = Lease(redis, key, ttl)
    if await lease.acquire():            # or taken by a script (a turn's claim)
        async with lease.kept():         # renewed every ttl/3 until the body ends
            ...                          # `lease.lost` is set if another owner took it
                                         # released (if still ours) on the way out

The heartbeat is the only writer of the TTL, so a holder that dies or hangs
loses the key within one TTL, and a live one never does while its loop runs.
A turn's lease has a fence (its claim's epoch and `answered` mark): when its
loop stalled past the TTL and nobody took the key meanwhile, the heartbeat takes
it again rather than leave the turn to a re-run (`retake.lua` says when).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.state.scripts import Arg, load

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Fence:
    """What must not have moved for an expired turn lease to be taken again: the
    session's meta key, and the claim's epoch and `answered` mark."""

    meta: str
    epoch: str
    answered: int


class Lease:
    """One holder's claim on one key."""

    def __init__(self, redis: Redis, key: str, ttl: float, token: str | None = None) -> None:
        self.redis = redis
        self.key = key
        self.ttl = ttl
        self.token = token or secrets.token_hex(8)
        self.lost = asyncio.Event()
        self.released = False  # given up (or by a turn's finish): nothing left to renew
        self.fence: Fence | None = None  # set by a turn's claim
        self._renew = load("renew").bind(redis)
        self._retake = load("retake").bind(redis)
        self._release = load("release").bind(redis)

    @property
    def ttl_ms(self) -> int:
        return int(self.ttl * 1000)

    async def acquire(self) -> bool:
        """Take the key if nobody holds it."""
        return bool(await self.redis.set(self.key, self.token, nx=True, px=self.ttl_ms))

    async def renew(self) -> bool:
        """Extend the TTL; False (and `lost` set) when another owner holds the key or it
        expired (a turn's lease that expired untaken is taken again: True)."""
        args: dict[str, Arg] = {"token": self.token, "ttl_ms": self.ttl_ms}
        held = bool(await self._renew(keys={"lease": self.key}, args=args))
        if not held and self.released:
            return False  # let go meanwhile (a turn's finish): nothing was lost
        if not held and self.fence is not None:
            fence = self.fence
            retake = {**args, "epoch": fence.epoch, "answered": fence.answered}
            held = bool(
                await self._retake(keys={"lease": self.key, "meta": fence.meta}, args=retake)
            )
            if held:
                log.info("lease %s expired with nobody taking it: taken again", self.key)
        if not held:
            self.lost.set()
        return held

    async def release(self) -> None:
        """Give the key up, if it is still ours; it is not renewed (nor taken again) after."""
        self.released = True
        await self._release(keys={"lease": self.key}, args={"token": self.token})

    @contextlib.asynccontextmanager
    async def kept(self, *, release: bool = True) -> AsyncIterator[Lease]:
        """Renew the lease while the body runs; release it at the end (unless told not to:
        a turn's finishing script releases it in the same step as it records)."""
        async with every(self.ttl / 3, self._beat):
            yield self
        if release:
            with contextlib.suppress(RedisError):
                await self.release()

    async def _beat(self) -> None:
        if self.lost.is_set() or self.released:
            return
        try:
            if not await self.renew() and self.lost.is_set():
                log.warning("lease %s lost", self.key)
        except RedisError as exc:
            # The next beat tries again; a lease that expires meanwhile is
            # found lost then, and the holder's writes are fenced anyway.
            log.warning("renewing lease %s failed: %s", self.key, exc)


@contextlib.asynccontextmanager
async def every(seconds: float, step: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
    """Run `step` every `seconds` while the body runs.

    The loop is told to stop, never cancelled: a Redis call cut off halfway can
    leave its connection waiting for an answer that never comes, and the body's
    exit would wait on it for good.
    """
    stop = asyncio.Event()

    async def loop() -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), seconds)
            if stop.is_set():
                return
            await step()

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        stop.set()
        await task

"""The per-chat send pacing: when a platform call into a chat may go out.

The platform's own "wait" (RateLimited, its retry-after) holds every later call into
that chat; a platform that bans per chat (`Limits.chat_interval`) also gets a pace
shared by every worker through Redis (`pace_acquire.lua`, `pace_ban.lua`), so two
workers cannot together exceed it. An intermediate edit that would have to wait is
skipped; a final text waits, up to `FINAL_ATTEMPTS` waits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from redis.asyncio import Redis

from gateway.delivery.splitting import split_markdown
from gateway.errors import PlatformError, RateLimited
from gateway.messages import Address
from gateway.ports import Limits, Sender
from gateway.state.keys import Keys
from gateway.state.scripts import load

log = logging.getLogger(__name__)
T = TypeVar("T")
FINAL_ATTEMPTS = 30
MAX_WAIT = 900.0  # seconds: the longest one wait, whatever a platform asks


class SendPacing:
    """Per-chat pacing shared by every worker: one Redis key per chat, its next free time."""

    def __init__(self, redis: Redis) -> None:
        self._acquire = load("pace_acquire").bind(redis)
        self._ban = load("pace_ban").bind(redis)

    async def acquire(self, chat_key: str, interval: float) -> float:
        """Take a send slot: 0 when granted, else the seconds to wait before asking again."""
        wait_ms = await self._acquire(
            keys={"pacing": Keys.pacing(chat_key)}, args={"interval_ms": int(interval * 1000)}
        )
        return int(wait_ms) / 1000.0

    async def ban(self, chat_key: str, seconds: float) -> None:
        """Nothing goes to this chat, from any worker, for `seconds`."""
        await self._ban(
            keys={"pacing": Keys.pacing(chat_key)}, args={"wait_ms": int(seconds * 1000) + 1}
        )


@dataclass(frozen=True, slots=True)
class SendAttempt(Generic[T]):
    """The outcome of a paced call: whether it went out, and what it returned."""

    ok: bool
    value: T | None = None


class PacedChat:
    """One address on one platform, with its limits and pacing."""

    def __init__(self, sender: Sender, address: Address, pacing: SendPacing | None) -> None:
        self.sender = sender
        self.address = address
        self.limits: Limits = sender.limits(address)
        self.pacing = pacing if self.limits.chat_interval is not None else None
        self.not_before = 0.0

    def split(self, text: str) -> list[str]:
        return split_markdown(text, self.limits.max_length, self.sender.measure)

    async def wait_turn(self, *, final: bool) -> bool:
        """Wait (final) or decline (intermediate) while the platform or pacing says wait."""
        while True:
            delay = self.not_before - time.monotonic()
            if delay <= 0 and self.pacing is not None:
                assert self.limits.chat_interval is not None
                delay = await self.pacing.acquire(self.address.chat_key, self.limits.chat_interval)
            if delay <= 0:
                return True
            if not final:
                return False
            await asyncio.sleep(min(delay, MAX_WAIT))

    async def call(self, operation: Callable[[], Awaitable[T]], *, final: bool) -> SendAttempt[T]:
        """Run one platform call within the pacing; `ok` is False when it was skipped."""
        for _ in range(FINAL_ATTEMPTS if final else 1):
            if not await self.wait_turn(final=final):
                return SendAttempt(False)
            try:
                return SendAttempt(True, await operation())
            except RateLimited as exc:
                await self.rate_limited(exc.retry_after)
                if not final:
                    return SendAttempt(False)
        raise PlatformError(f"gave up on {self.address.chat_key} after {FINAL_ATTEMPTS} waits")

    async def rate_limited(self, retry_after: float) -> None:
        log.warning("rate limited in %s: waiting %.1fs", self.address.chat_key, retry_after)
        self.not_before = time.monotonic() + retry_after
        if self.pacing is not None:
            await self.pacing.ban(self.address.chat_key, retry_after)

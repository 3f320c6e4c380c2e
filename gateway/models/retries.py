"""A model call's attempts before anything is shown: retried with backoff, within one deadline.

A user waits on every attempt, so they all count against one time: the
call's timeout (`ModelCall.timeout`), from the first request. Each attempt
is given the deadline and bounds its own waits by what is left of it; a
retry whose backoff would end past it is not made, and the last failure is
the call's. Without the deadline, a provider that never answers would hold
the caller for the timeout once per attempt.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from gateway.errors import ModelError, ModelRateLimited, ModelTimeout, ModelUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")
# What another attempt may cure: a timeout or a silence, a 429, a 5xx or a refused connection.
RETRIED = (ModelTimeout, ModelRateLimited, ModelUnavailable)


@dataclass(frozen=True, slots=True)
class Deadline:
    """The event loop's time by which a call must have shown something (or given up)."""

    at: float

    @classmethod
    def within(cls, seconds: float) -> Deadline:
        return cls(asyncio.get_running_loop().time() + seconds)

    def left(self) -> float:
        """Seconds until the deadline, never below zero."""
        return max(0.0, self.at - asyncio.get_running_loop().time())

    def bound(self, seconds: float) -> float:
        """`seconds`, or less when the deadline comes first."""
        return min(seconds, self.left())


async def with_retries(
    attempt: Callable[[Deadline], Awaitable[T]], retries: int, within: float
) -> T:
    """`attempt(deadline)`, made again after a failure worth retrying: at most `retries`
    more times, all within `within` seconds of the first."""
    deadline = Deadline.within(within)
    for number in range(retries + 1):
        try:
            return await attempt(deadline)
        except RETRIED as exc:
            delay = backoff(number, exc)
            if number == retries or delay >= deadline.left():
                raise
            log.warning("model call failed (%s), retry %d in %.1fs", exc, number + 1, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")


def backoff(number: int, exc: ModelError) -> float:
    """The wait before retry `number + 1`: exponential with jitter, or a 429's own ask."""
    delay = min(8.0, 0.5 * 2.0**number) * (0.5 + random.random())
    if isinstance(exc, ModelRateLimited):
        delay = max(delay, exc.retry_after or 0.0)
    return delay

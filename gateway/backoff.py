"""Waiting between attempts to connect again: capped exponential backoff, with jitter
where many processes could retry at once.

Every long-lived connection the gateway holds (a tool server, Slack's Socket Mode,
Telegram's long polling) waits `Backoff.delay(n)` before its attempt `n` after a
failure (0-based, started over once a connection came up): `first`·2ⁿ seconds, never
more than `limit`. With `jitter`, up to that share of each delay is taken off at
random, so processes cut off together do not all come back in the same instant.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays between attempts: `first`, doubling, never above `limit`; `jitter` the
    share of each that may be taken off at random (0: none)."""

    first: float = 1.0
    limit: float = 30.0
    jitter: float = 0.0

    def delay(self, attempt: int) -> float:
        """The wait before attempt `attempt` (0-based) of a run of failures."""
        ceiling = min(self.limit, self.first * 2.0 ** min(attempt, 30))
        if not self.jitter:
            return ceiling
        return ceiling * random.uniform(1.0 - self.jitter, 1.0)

    def delays(self) -> Iterator[float]:
        """The waits of one run of failures, attempt 0 first."""
        return (self.delay(attempt) for attempt in itertools.count())

"""Rate limits: messages per user and per conversation, with a burst.

Each limit is a token bucket in Redis on the server's clock
(`gateway/state/scripts/rate_limit.lua`), so every process that takes messages in counts
against the same buckets. Ingest asks
before a message is written anywhere, so nothing over the limit reaches a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from redis.asyncio import Redis

from gateway.messages import Inbound
from gateway.settings.values import Rate
from gateway.state.keys import Keys
from gateway.state.scripts import Arg, load


@dataclass(frozen=True, slots=True)
class Refusal:
    """A message over a limit: the text to tell its sender, and whether to tell now."""

    text: str
    tell: bool


class RateLimiter:
    """Takes a token for a message from its user's and its conversation's buckets."""

    def __init__(self, redis: Redis, user: Rate | None, conversation: Rate | None) -> None:
        self.user, self.conversation = user, conversation
        self._take = load("rate_limit").bind(redis)

    @property
    def active(self) -> bool:
        return self.user is not None or self.conversation is not None

    async def take(self, inbound: Inbound) -> Refusal | None:
        """None when the message may go on (always, with no limit set)."""
        if not self.active:
            return None
        keys = {
            "user": Keys.user_rate(inbound.user_key, inbound.session_key),
            "user_told": Keys.rate_told(Keys.user_rate(inbound.user_key, inbound.session_key)),
            "conversation": Keys.rate(inbound.session_key),
            "conversation_told": Keys.rate_told(Keys.rate(inbound.session_key)),
        }
        args = _bucket_args("user", self.user) | _bucket_args("conversation", self.conversation)
        allowed, *refused = await self._take(keys=keys, args=args)
        if allowed:
            return None
        bucket, wait_ms, tell = (int(value) for value in refused)
        return Refusal(self._text(bucket, wait_ms), bool(tell))

    def _text(self, bucket: int, wait_ms: int) -> str:
        rate = self.user if bucket == 1 else self.conversation
        assert rate is not None
        who = "You're sending" if bucket == 1 else "This conversation is getting"
        seconds = max(1, math.ceil(wait_ms / 1000))
        return (
            f"{who} messages faster than this bot answers: {rate.describe()}. "
            f"Try again in {seconds} s."
        )


def _bucket_args(name: str, rate: Rate | None) -> dict[str, Arg]:
    if rate is None:
        return {f"{name}_interval_ms": 0, f"{name}_burst": 0, f"{name}_window_ms": 0}
    return {
        f"{name}_interval_ms": rate.interval_ms,
        f"{name}_burst": rate.burst,
        f"{name}_window_ms": math.ceil(rate.period * 1000),
    }

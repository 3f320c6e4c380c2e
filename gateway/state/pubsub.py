"""A subscription kept: made again after Redis is lost, said once when lost and once back."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.logs import Outage

log = logging.getLogger(__name__)

AGAIN_EVERY = 0.5  # seconds between attempts to subscribe again


async def keep_subscribed(
    redis: Redis,
    channel: str,
    on_message: Callable[[str], None],
    what: str,
    on_subscribed: Callable[[], None] | None = None,
    on_lost: Callable[[], None] | None = None,
) -> None:
    """Hand each message's data on `channel` to `on_message`, until cancelled.

    A lost subscription is made again every AGAIN_EVERY seconds: the loss is one
    warning and the return one line, however long Redis is away (a worker would
    otherwise log twice a second through a failover). `on_subscribed` runs each time
    the subscription holds, `on_lost` each time it is lost.
    """
    outage = Outage(
        log,
        what,
        failing="lost Redis",
        retrying="subscribing again",
        still="still no Redis",
        back="subscribed again after",
    )
    while True:
        try:
            async with redis.pubsub() as pubsub:
                await pubsub.subscribe(channel)
                outage.worked()
                if on_subscribed is not None:
                    on_subscribed()
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        on_message(str(message["data"]))
        except (RedisError, OSError) as exc:
            outage.failed(exc)
        if on_lost is not None:
            on_lost()
        await asyncio.sleep(AGAIN_EVERY)

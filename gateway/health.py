"""Connection health of long-lived platform connections, shared through Redis.

A process that holds a connection (Socket Mode, polling, the Discord gateway)
reports its state here; `/healthz` on `gateway web` shows every report. A
report expires when its process stops renewing it, so a dead process reads as
"down", not as the last thing it said.
"""

from __future__ import annotations

import json
import time

from redis.asyncio import Redis

from gateway.store import PREFIX, Keys

REPORT_TTL = 30.0


class Health:
    """One component's health reporter (`slack-socket`, `telegram-polling`, ...)."""

    def __init__(self, redis: Redis, component: str) -> None:
        self.redis = redis
        self.component = component
        self.up = False
        self.detail = "starting"

    async def report(self, up: bool, detail: str = "") -> None:
        self.up, self.detail = up, detail
        body = json.dumps({"up": up, "detail": detail, "at": time.time()})
        await self.redis.set(Keys.health(self.component), body, px=int(REPORT_TTL * 1000))


async def read_all(redis: Redis) -> dict[str, dict[str, object]]:
    """Every live report, by component."""
    reports: dict[str, dict[str, object]] = {}
    async for key in redis.scan_iter(match=f"{PREFIX}:health:*", count=100):
        raw = await redis.get(key)
        if raw:
            reports[key.rsplit(":", 1)[-1]] = json.loads(raw)
    return reports

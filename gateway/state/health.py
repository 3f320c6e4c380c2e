"""Connection health of long-lived platform connections, shared through Redis.

A process that holds a connection (Socket Mode, polling, the Discord gateway)
reports its state here; `/healthz` on `gateway web` shows every report. All
reports live in one hash, so `/healthz` reads them in one round trip however
many other keys Redis holds. A report carries the time it was made, and one
its process stopped renewing for `REPORT_TTL` is left out, so a dead process
is not shown as the last thing it said.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.state.keys import Keys

log = logging.getLogger(__name__)

# Reporters renew well within this. The clocks of reporter and reader are compared,
# so machines whose clocks differ by a sizeable part of it misreport.
REPORT_TTL = 30.0
# A reporter is a connection's supervisor: it must not wait out the client's ~9 s of
# retries, nor fail, because Redis is away.
REPORT_TIMEOUT = 2.0


class Health:
    """One component's health reporter (`slack`, `telegram`, `discord-shards-0_1`, ...)."""

    def __init__(self, redis: Redis, component: str) -> None:
        self.redis = redis
        self.component = component

    async def report(self, up: bool, detail: str = "") -> None:
        """Best effort: with Redis away there is nowhere to report to, and the last report
        ages out of `/healthz` (which answers 503 meanwhile anyway)."""
        body = json.dumps({"up": up, "detail": detail, "at": time.time()})
        try:
            async with asyncio.timeout(REPORT_TIMEOUT):
                await self.redis.hset(Keys.HEALTH, self.component, body)
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning(
                "health of %s not reported: Redis does not answer (%s)",
                self.component,
                type(exc).__name__,
            )


async def read_all(redis: Redis, now: float | None = None) -> dict[str, dict[str, Any]]:
    """Every report renewed within `REPORT_TTL` of `now`, by component (one HGETALL)."""
    raw = cast(dict[str, str], await redis.hgetall(Keys.HEALTH))
    now = time.time() if now is None else now
    reports: dict[str, dict[str, Any]] = {}
    for component, body in raw.items():
        report = _parse(component, body)
        if report is not None and now - float(report.get("at", 0)) <= REPORT_TTL:
            reports[component] = report
    return reports


def _parse(component: str, body: str) -> dict[str, Any] | None:
    try:
        report = json.loads(body)
    except ValueError:
        report = None
    if not isinstance(report, dict) or not isinstance(report.get("at"), (int, float)):
        log.warning("health report of %s is unreadable; left out", component)
        return None
    return report

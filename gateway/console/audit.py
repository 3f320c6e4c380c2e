"""The audit log: every change made through the console (who, what, when, from where).

One capped list in Redis (`Keys.ADMIN_AUDIT`), newest first, shared by every
`gateway web`; the sign-ins and refused sign-ins are in it too.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import cast

from redis.asyncio import Redis

from gateway.state.keys import Keys

KEPT = 10_000  # entries; the oldest are dropped past this


@dataclass(frozen=True, slots=True)
class AuditEntry:
    at: float
    who: str
    action: str  # "sign-in", "reset", "stop", "setting", "pairing approve", ...
    target: str  # what it acted on: a session key, a scope, a user
    detail: str
    address: str  # where the request came from


class AuditLog:
    def __init__(self, redis: Redis, kept: int = KEPT) -> None:
        self.redis, self.kept = redis, kept

    async def record(
        self, who: str, action: str, target: str, address: str, detail: str = ""
    ) -> None:
        entry = AuditEntry(time.time(), who, action, target, detail, address)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.lpush(Keys.ADMIN_AUDIT, json.dumps(asdict(entry), ensure_ascii=False))
            pipe.ltrim(Keys.ADMIN_AUDIT, 0, self.kept - 1)
            await pipe.execute()

    async def recent(self, limit: int = 200) -> list[AuditEntry]:
        raw = cast(list[str], await self.redis.lrange(Keys.ADMIN_AUDIT, 0, limit - 1))
        return [AuditEntry(**json.loads(item)) for item in raw]

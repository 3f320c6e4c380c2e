"""Pairing on open networks: a stranger gets a one-time code, the operator approves it.

With GATEWAY_PAIRING=1 a stranger on Telegram or Discord is answered with a code
instead of a bare refusal; `gateway users approve CODE` lets them in beside
GATEWAY_ALLOWED_USERS. Codes are 8 characters from an alphabet without look-alikes
(no 0/O, 1/I), live an hour, and at most three wait per platform; wrong codes lock
approval for a while, so a code cannot be guessed by trying.
"""

from __future__ import annotations

import secrets
from typing import cast

from redis.asyncio import Redis

from gateway.state.keys import Keys
from gateway.state.scripts import Arg, load

PLATFORMS = frozenset({"telegram", "discord"})
ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
CODE_TTL = 3600.0
MAX_PENDING = 3  # per platform
MAX_FAILURES = 5  # wrong codes before approval locks
FAILURE_WINDOW = 900.0


def new_code() -> str:
    return "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))


def normalise(code: str) -> str:
    """What a person types, as stored: case, spaces and dashes do not matter."""
    return code.upper().replace("-", "").replace(" ", "")


class Pairing:
    """Pairing codes and paired users, in Redis."""

    def __init__(self, redis: Redis, code_ttl: float = CODE_TTL) -> None:
        self.redis = redis
        self.code_ttl = code_ttl
        self._request = load("pairing_request").bind(redis)
        self._approve = load("pairing_approve").bind(redis)

    async def request(self, user_key: str) -> str | None:
        """The user's pending code (a new one if none); None while the platform's
        pending codes are at the cap."""
        keys = {"codes": Keys.PAIRING_CODES, "pending": Keys.PAIRING_PENDING}
        args: dict[str, Arg] = {
            "user": user_key,
            "code": new_code(),
            "ttl_ms": int(self.code_ttl * 1000),
            "max_pending": MAX_PENDING,
        }
        code = await self._request(keys=keys, args=args)
        return str(code) if code else None

    async def approve(self, code: str) -> tuple[str, str]:
        """("approved", user key), ("unknown", "") or ("locked", seconds left)."""
        keys = {
            "codes": Keys.PAIRING_CODES,
            "pending": Keys.PAIRING_PENDING,
            "paired": Keys.PAIRED,
            "failures": Keys.PAIRING_FAILURES,
        }
        args: dict[str, Arg] = {
            "code": normalise(code),
            "max_failures": MAX_FAILURES,
            "window_ms": int(FAILURE_WINDOW * 1000),
        }
        status, *rest = await self._approve(keys=keys, args=args)
        if status == "locked":
            return "locked", str(max(1, int(rest[0]) // 1000))
        return str(status), str(rest[0]) if rest else ""

    async def is_paired(self, user_key: str) -> bool:
        return bool(await self.redis.hexists(Keys.PAIRED, user_key))

    async def revoke(self, user_key: str) -> bool:
        return bool(await self.redis.hdel(Keys.PAIRED, user_key))

    async def paired(self) -> list[str]:
        return sorted(cast(dict[str, str], await self.redis.hgetall(Keys.PAIRED)))

    async def pending(self) -> dict[str, str]:
        """Pending codes -> their user (expired ones may linger until the next request)."""
        return cast(dict[str, str], await self.redis.hgetall(Keys.PAIRING_CODES))

"""Who may use the console: the token sign-in, its lock, and the sign-ins kept in Redis.

A sign-in is a random cookie; Redis keeps only its SHA-256 (`Keys.admin_session`),
with who signed in, from where, and the CSRF token every change must carry. Kept in
Redis, a sign-in works on every `gateway web` behind a load balancer, and so does
the lock: each attempt counts against its address before the token is compared, so
parallel guesses cannot outrun it, and wrong ones also count toward a lock for
every address at once.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import cast

from redis.asyncio import Redis

from gateway.state.keys import Keys

SESSION_TTL = 12 * 3600  # a sign-in lasts a working day
LOCK_WINDOW = 900  # seconds the attempts of one window are counted for
ADDRESS_ATTEMPTS = 5  # attempts from one address in a window, before it is locked
ANYWHERE_FAILURES = 50  # wrong tokens from all addresses in a window, before all are locked
NAME_CHARS = 64
STATE_TTL = 600  # seconds a platform sign-in may take


@dataclass(frozen=True, slots=True)
class Admin:
    """A signed-in operator: who they said they are, from where, and their CSRF token."""

    who: str
    address: str
    csrf: str
    since: float


@dataclass(frozen=True, slots=True)
class SignIn:
    """A sign-in's outcome: the cookie on success, else why not (and for how long)."""

    cookie: str | None = None
    locked_for: int = 0  # seconds; 0 when not locked


def _digest(cookie: str) -> str:
    return hashlib.sha256(cookie.encode()).hexdigest()


def clean_name(text: str) -> str | None:
    """The name an operator signs in under, for the audit log: printable, at most
    NAME_CHARS; None when it is not."""
    name = " ".join(text.split())
    if not name:
        return "admin"
    if len(name) > NAME_CHARS or not name.isprintable():
        return None
    return name


class Access:
    """Sign-in with the console's token, the lock, and sign-ins by cookie."""

    def __init__(self, redis: Redis, token: str) -> None:
        self.redis = redis
        self._token = token.strip().encode()

    async def sign_in(self, token: str, who: str, address: str) -> SignIn:
        """A cookie for the right token; the lock's wait when the address (or everyone)
        has tried too often; neither when the token is wrong."""
        locked = await self._attempt(address)
        if locked:
            return SignIn(locked_for=locked)
        if not hmac.compare_digest(token.strip().encode(), self._token):
            await self._failed()
            return SignIn()
        await self.redis.delete(Keys.admin_failures(address))
        return SignIn(cookie=await self.start(who, address))

    async def start(self, who: str, address: str) -> str:
        """A new sign-in for `who` (the token's, or a platform's): its cookie."""
        cookie = secrets.token_urlsafe(32)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                Keys.admin_session(_digest(cookie)),
                mapping={
                    "who": who,
                    "address": address,
                    "csrf": secrets.token_urlsafe(32),
                    "since": time.time(),
                },
            )
            pipe.expire(Keys.admin_session(_digest(cookie)), SESSION_TTL)
            await pipe.execute()
        return cookie

    async def _attempt(self, address: str) -> int:
        """Counts the attempt; the seconds left of a lock that applies, else 0."""
        mine, anywhere = Keys.admin_failures(address), Keys.admin_failures("*")
        # Each key in a transaction of its own (one slot each, on a Cluster too): the
        # window's expiry is set with its first attempt, so no count outlives it.
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(mine, 0, ex=LOCK_WINDOW, nx=True)
            pipe.incr(mine)
            pipe.ttl(mine)
            _, tries, mine_left = await pipe.execute()
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(anywhere)
            pipe.ttl(anywhere)
            failures, anywhere_left = await pipe.execute()
        if int(failures or 0) >= ANYWHERE_FAILURES:
            return max(int(anywhere_left), 1)
        if int(tries) > ADDRESS_ATTEMPTS:
            return max(int(mine_left), 1)
        return 0

    async def _failed(self) -> None:
        anywhere = Keys.admin_failures("*")
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(anywhere, 0, ex=LOCK_WINDOW, nx=True)
            pipe.incr(anywhere)
            await pipe.execute()

    async def admin(self, cookie: str | None) -> Admin | None:
        """The sign-in a cookie stands for; None for no cookie, an unknown or expired one."""
        if not cookie or len(cookie) > 100:
            return None
        found = cast(dict[str, str], await self.redis.hgetall(Keys.admin_session(_digest(cookie))))
        if not found.get("csrf"):
            return None
        return Admin(found["who"], found["address"], found["csrf"], float(found["since"]))

    async def new_state(self, nonce: str) -> str:
        """A platform sign-in's one-time state, holding its nonce until it comes back."""
        state = secrets.token_urlsafe(24)
        await self.redis.set(Keys.admin_sign_in_state(state), nonce, ex=STATE_TTL)
        return state

    async def take_state(self, state: str) -> str | None:
        """The nonce of a state this console handed out, once; None for any other."""
        if not state or len(state) > 100:
            return None
        return cast(str | None, await self.redis.getdel(Keys.admin_sign_in_state(state)))

    async def sign_out(self, cookie: str) -> None:
        await self.redis.delete(Keys.admin_session(_digest(cookie)))


def csrf_matches(admin: Admin, given: str | None) -> bool:
    """Whether a change carries its sign-in's CSRF token (compared in constant time)."""
    return given is not None and hmac.compare_digest(given.encode(), admin.csrf.encode())

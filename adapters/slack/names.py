"""Speakers' display names from users.info, cached in Redis so each web process asks rarely.

A file of its own because Slack events carry only a user id (Telegram and Discord
send the name with each message): the lookup, its two caches and their lifetimes
are a concern no other Slack file has, used by the bolt listeners in `platform.py`.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import aiohttp
from redis.asyncio import Redis
from redis.exceptions import RedisError
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from gateway.state.keys import Keys

log = logging.getLogger(__name__)

NAME_TTL = 24 * 3600
# A user the API cannot resolve is retried after a short while, not a day.
UNKNOWN_TTL = 300
# In front of Redis, each process keeps recent names briefly: a busy thread then costs
# no Redis round trip per message, and a renamed user shows within minutes.
LOCAL_TTL = 300.0
LOCAL_SIZE = 10_000


def display_name(user: Mapping[str, Any]) -> str | None:
    """Slack's own preference: the profile display name, then the real name, then the handle."""
    profile = user.get("profile") or {}
    for candidate in (
        profile.get("display_name"),
        profile.get("real_name"),
        user.get("real_name"),
        user.get("name"),
    ):
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip()
    return None


class UserNames:
    """`await names.get(user_id)` -> a display name (the user id when Slack will not say)."""

    def __init__(self, redis: Redis, client: AsyncWebClient) -> None:
        self.redis = redis
        self.client = client
        self._local: OrderedDict[str, tuple[float, str]] = OrderedDict()

    async def get(self, user_id: str, client: AsyncWebClient | None = None) -> str:
        """`client` asks users.info with the token of the event's workspace (the app
        installed in many); the one given at construction otherwise."""
        local = self._local.get(user_id)
        if local is not None and local[0] > time.monotonic():
            return local[1]
        name = await self._shared(user_id, client or self.client)
        self._remember(user_id, name)
        return name

    async def _shared(self, user_id: str, client: AsyncWebClient) -> str:
        key = Keys.user_name("slack", user_id)
        try:
            cached = await self.redis.get(key)
        except RedisError:
            cached = None
        if cached:
            return str(cached)
        name, ttl = await self._lookup(user_id, client)
        try:
            await self.redis.set(key, name, ex=ttl)
        except RedisError:
            log.warning("could not cache the name of %s", user_id)
        return name

    def _remember(self, user_id: str, name: str) -> None:
        self._local[user_id] = (time.monotonic() + LOCAL_TTL, name)
        self._local.move_to_end(user_id)
        while len(self._local) > LOCAL_SIZE:
            self._local.popitem(last=False)

    async def _lookup(self, user_id: str, client: AsyncWebClient) -> tuple[str, int]:
        try:
            response = await client.users_info(user=user_id)
        except (SlackApiError, SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("users.info for %s failed: %s", user_id, type(exc).__name__)
            return user_id, UNKNOWN_TTL
        user = response.get("user") or {}
        name = display_name(user) if isinstance(user, Mapping) else None
        return (name, NAME_TTL) if name else (user_id, UNKNOWN_TTL)

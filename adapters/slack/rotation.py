"""Expiring bot tokens (token rotation) refreshed before they expire, once for all processes.

An app with token rotation on gets, at each install, a bot token that expires
after 12 hours and a refresh token, which oauth.v2.access exchanges (once: Slack
revokes it as it answers) for a new pair. `RotatingInstallationStore` hands
bolt's authorize and the workers' `Workspaces` alike a bot token that is not
within `Rotation.margin` of its expiry: when the stored one is, the owner's
refresh runs under a Redis lock (`Keys.token_refresh`, SET NX PX), so of all the
processes that see it expiring one calls Slack (slack-sdk's AsyncTokenRotator)
and saves the new tokens, sealed, into the store; the others wait for the lock
and read them back. Each caller re-reads the record under the lock first, so
the refresh token used is always the stored one.

A refresh that fails is logged once (the error code, never a token), and the
lock stays as `failed:<error>` for `Rotation.pause`, so that nobody asks Slack
again meanwhile; a token that has not yet expired is still used, an expired one
raises `TokenRefreshFailed`. The app asks for no user scopes, so only bot tokens
are refreshed here (a user token rotates as bolt rotates it).
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from dataclasses import dataclass

import aiohttp
from redis.asyncio import Redis
from slack_sdk.errors import SlackApiError, SlackClientError, SlackTokenRotationError
from slack_sdk.oauth.installation_store import Bot, Installation
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.installations import (
    PLATFORM,
    ROTATED_FIELDS,
    RedisInstallationStore,
    owner_id,
)
from gateway.errors import PlatformError
from gateway.state.cipher import TokenCipher
from gateway.state.keys import Keys
from gateway.state.scripts import load

log = logging.getLogger(__name__)

FAILED = "failed:"  # the lock's value after a failed refresh, with Slack's error


@dataclass(frozen=True)
class Rotation:
    """When a token is refreshed, and how long a refresh may hold the lock.

    `margin`: a token this close to its expiry is refreshed (bolt's default, two
    hours of Slack's twelve). `lock_ttl`: past slack-sdk's 30 s call timeout, so
    a holder's lock outlives its call. `pause`: after a failure, nobody tries
    again for this long. `poll`: how often a waiter looks at the lock."""

    margin: float = 7200.0
    lock_ttl: float = 60.0
    pause: float = 60.0
    poll: float = 0.05


class TokenRefreshFailed(PlatformError):
    """An owner's bot token expired, and Slack would not refresh it."""


class RotatingInstallationStore(RedisInstallationStore):
    """The installation store whose bots come back with a token that is not expiring."""

    def __init__(
        self,
        redis: Redis,
        cipher: TokenCipher,
        rotator: AsyncTokenRotator,
        rotation: Rotation | None = None,
    ) -> None:
        super().__init__(redis, cipher)
        self.rotator = rotator
        self.rotation = rotation or Rotation()
        self._release = load("release").bind(redis)

    async def async_find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        return await self.fresh_bot(owner_id(enterprise_id, team_id, is_enterprise_install))

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        """The installation with the owner's current bot token: an installer's record
        keeps the tokens of its own install, which a refresh since has replaced."""
        found = await super().async_find_installation(
            enterprise_id=enterprise_id,
            team_id=team_id,
            user_id=user_id,
            is_enterprise_install=is_enterprise_install,
        )
        if found is None or found.bot_refresh_token is None or not self._expiring(found.to_bot()):
            return found
        bot = await self.fresh_bot(owner_id(enterprise_id, team_id, is_enterprise_install))
        if bot is None:
            return found
        fields = found.to_dict_for_copying()
        fields.update({name: bot.to_dict_for_copying()[name] for name in ROTATED_FIELDS})
        return Installation(**fields)

    async def fresh_bot(self, owner: str) -> Bot | None:
        """The owner's bot, its token refreshed first when it is expiring."""
        bot = await self.bot_of(owner)
        if bot is None or bot.bot_refresh_token is None or not self._expiring(bot):
            return bot
        return await self._refresh(owner, bot)

    def refresh_due(self, bot: Bot) -> float | None:
        expires = bot.bot_token_expires_at
        return None if expires is None else expires - self.rotation.margin

    def _expiring(self, bot: Bot) -> bool:
        due = self.refresh_due(bot)
        return due is not None and due <= time.time()

    async def _refresh(self, owner: str, seen: Bot) -> Bot | None:
        """Refresh under the lock, or wait for whoever holds it and read what it saved;
        taken over when a holder went without refreshing (it died)."""
        lock = Keys.token_refresh(PLATFORM, owner)
        deadline = time.monotonic() + 2 * self.rotation.lock_ttl
        while True:
            holder = secrets.token_hex(8)
            if await self.redis.set(lock, holder, nx=True, px=_ms(self.rotation.lock_ttl)):
                # Shielded: once Slack has taken the refresh token, only the saved answer
                # keeps the workspace working, whatever happens to the caller.
                return await asyncio.shield(self._refresh_held(owner, lock, holder))
            failure = await self._wait(lock, deadline)
            bot = await self.bot_of(owner)
            if bot is None or bot.bot_token != seen.bot_token or not self._expiring(bot):
                return bot  # refreshed meanwhile (or removed)
            if failure is not None or time.monotonic() > deadline:
                return self._usable(owner, bot, failure or "another process is refreshing it")

    async def _wait(self, lock: str, deadline: float) -> str | None:
        """Until the lock is let go (None) or marks a failure (its error)."""
        while time.monotonic() < deadline:
            value = await self.redis.get(lock)
            if value is None:
                return None
            if str(value).startswith(FAILED):
                return str(value).removeprefix(FAILED)
            await asyncio.sleep(self.rotation.poll)
        return None

    async def _refresh_held(self, owner: str, lock: str, holder: str) -> Bot | None:
        """With the lock: the stored record read again, refreshed if still expiring."""
        failed = False
        try:
            bot = await self.bot_of(owner)
            if bot is None or bot.bot_refresh_token is None or not self._expiring(bot):
                return bot
            try:
                refreshed = await self._call_slack(bot)
            except _Refusal as refusal:
                failed = True
                return await self._failed(owner, lock, bot, refusal.error)
            if not await self.save_refreshed(owner, bot.bot_refresh_token, refreshed):
                return await self.bot_of(owner)  # installed again or removed meanwhile
            log.info("slack: the bot token of %s refreshed", owner)
            return refreshed
        finally:
            if not failed:
                await self._release(keys={"lease": lock}, args={"token": holder})

    async def _call_slack(self, bot: Bot) -> Bot:
        """oauth.v2.access with the refresh token, through slack-sdk's rotator."""
        minutes = math.ceil(self.rotation.margin / 60) + 1  # the rotator's own test passes
        try:
            refreshed = await self.rotator.perform_bot_token_rotation(
                bot=bot, minutes_before_expiration=minutes
            )
        except SlackTokenRotationError as exc:
            raise _Refusal(_error_code(exc.api_error)) from None
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise _Refusal(type(exc).__name__) from None
        if refreshed is None or not refreshed.bot_token:
            raise _Refusal("no bot token in the answer")
        return refreshed

    async def _failed(self, owner: str, lock: str, bot: Bot, error: str) -> Bot:
        """One line, the lock kept as the failure's mark for the pause; the token as it
        is while it still works."""
        await self.redis.set(lock, FAILED + error, px=_ms(self.rotation.pause))
        log.warning("slack: the bot token of %s could not be refreshed (%s)", owner, error)
        return self._usable(owner, bot, error)

    def _usable(self, owner: str, bot: Bot, error: str) -> Bot:
        """`bot` while its token has not expired; TokenRefreshFailed once it has."""
        expires = bot.bot_token_expires_at
        if expires is not None and expires <= time.time():
            raise TokenRefreshFailed(
                f"Slack: the bot token of {owner} expired and could not be refreshed ({error})"
            )
        return bot


class StoreRotates(AsyncTokenRotator):
    """bolt's rotator beside `RotatingInstallationStore`: the installation bolt read is
    not expiring (the store refreshed it under its lock), so bolt's own refresh of the
    bot token, which takes no lock, never runs; a user token rotates as bolt does."""

    async def perform_bot_token_rotation(
        self, *, bot: Bot, minutes_before_expiration: int = 120
    ) -> Bot | None:
        return None


def rotating_store(
    redis: Redis,
    cipher: TokenCipher,
    client: AsyncWebClient,
    client_id: str,
    client_secret: str,
    rotation: Rotation | None = None,
) -> RotatingInstallationStore:
    """The store, refreshing through `client` (on SLACK_API_URL) with the app's credentials."""
    rotator = AsyncTokenRotator(client_id=client_id, client_secret=client_secret, client=client)
    return RotatingInstallationStore(redis, cipher, rotator, rotation)


class _Refusal(Exception):
    """A refresh Slack refused or that did not reach it: the error to report."""

    def __init__(self, error: str) -> None:
        super().__init__(error)
        self.error = error


def _error_code(exc: SlackApiError) -> str:
    data = exc.response.data if exc.response is not None else None
    if isinstance(data, dict) and data.get("error"):
        return str(data["error"])
    return str(exc.response.status_code) if exc.response is not None else "unknown_error"


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))

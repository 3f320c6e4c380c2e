"""Slack installations in Redis, for slack-bolt's OAuth flow and its per-request authorize.

One record per owner (`team:<T…>` for a workspace's install, Enterprise Grid
ones included, since team ids are unique across Slack; `org:<E…>` for an
org-wide install), as slack-sdk's own stores keep them: the latest
installation, each installer's, and the bot, whose token replies are sent
with. Tokens (bot, user, and their refresh tokens) are encrypted one by one
with GATEWAY_SECRET_KEY; the ids and names around them stay readable. A record
sealed with an older key is sealed again with the newest when it is read.

`app_uninstalled` and `tokens_revoked` reach `async_delete_all`,
`async_delete_installation` and `async_delete_bot` through bolt's own listeners.
Each installation record carries the bot's token too, and bolt's authorize reads
the installation first: removing the bot takes its fields out of every record of
the owner, and removing a user's installation takes that user's token out of the
latest record, so what was revoked is found nowhere and nothing else is lost.
A bot token that expires (token rotation) is refreshed by `rotation.py`, which
writes the new tokens back here with `save_refreshed`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from datetime import datetime
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import WatchError
from slack_sdk.oauth.installation_store import Bot, Installation
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore

from gateway.state.cipher import TokenCipher
from gateway.state.keys import Keys

log = logging.getLogger(__name__)

PLATFORM = "slack"
SEALED_FIELDS = ("bot_token", "bot_refresh_token", "user_token", "user_refresh_token")
# What a record says of the bot, and of its installer's user token (slack-sdk's names).
BOT_FIELDS = (
    "bot_token",
    "bot_refresh_token",
    "bot_token_expires_at",
    "bot_id",
    "bot_user_id",
    "bot_scopes",
)
USER_FIELDS = ("user_token", "user_refresh_token", "user_token_expires_at", "user_scopes")
ROTATED_FIELDS = ("bot_token", "bot_refresh_token", "bot_token_expires_at")
SAVE_ATTEMPTS = 5  # a refreshed token's write, tried again when a record is sealed anew meanwhile


def owner_id(
    enterprise_id: str | None, team_id: str | None, is_enterprise_install: bool | None = False
) -> str:
    """The owner of an installation: an org-wide install belongs to the org alone, any
    other to its workspace (whichever org that workspace is in)."""
    if is_enterprise_install or not team_id:
        return f"org:{enterprise_id or ''}"
    return f"team:{team_id}"


class RedisInstallationStore(AsyncInstallationStore):
    """bolt's async installation store on Redis, tokens encrypted at rest."""

    def __init__(self, redis: Redis, cipher: TokenCipher) -> None:
        self.redis = redis
        self.cipher = cipher

    @property
    def logger(self) -> logging.Logger:
        return log

    async def async_save(self, installation: Installation) -> None:
        owner = owner_id(
            installation.enterprise_id, installation.team_id, installation.is_enterprise_install
        )
        record = self._seal(installation.to_dict_for_copying())
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(Keys.installation(PLATFORM, owner), record)
            pipe.set(Keys.installation(PLATFORM, owner, installation.user_id), record)
            await pipe.execute()
        await self.async_save_bot(installation.to_bot())
        log.info("slack: installed in %s", owner)

    async def async_save_bot(self, bot: Bot) -> None:
        """The bot, then its owner in the set of owners: two steps (another slot on a
        cluster), each safe to repeat; between them the bot already answers, and only
        `doctor`'s count and the key check at start miss it (an install retried adds it)."""
        owner = owner_id(bot.enterprise_id, bot.team_id, bot.is_enterprise_install)
        await self.redis.set(
            Keys.installed_bot(PLATFORM, owner), self._seal(bot.to_dict_for_copying())
        )
        await self.redis.sadd(Keys.installed(PLATFORM), owner)

    async def async_find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        return await self.bot_of(owner_id(enterprise_id, team_id, is_enterprise_install))

    async def bot_of(self, owner: str) -> Bot | None:
        """The owner's bot, as stored."""
        fields = await self._open(Keys.installed_bot(PLATFORM, owner))
        return None if fields is None else Bot(**fields)

    def refresh_due(self, bot: Bot) -> float | None:
        """When the bot's token is due to be replaced (epoch seconds; None: never). This
        store refreshes nothing, so when it expires; `rotation.py` refreshes earlier."""
        return bot.bot_token_expires_at

    async def save_refreshed(self, owner: str, used: str, bot: Bot) -> bool:
        """The bot's refreshed tokens written into its record and the owner's latest
        installation (and that installer's), in one transaction. False, and nothing
        written, when the stored refresh token is no longer `used`: the owner was
        removed or installed again meanwhile, whose tokens are the newer ones."""
        for _ in range(SAVE_ATTEMPTS):
            try:
                return await self._save_refreshed(owner, used, bot)
            except WatchError:
                continue  # a record changed while read (sealed anew): read it again
        return False

    async def _save_refreshed(self, owner: str, used: str, bot: Bot) -> bool:
        bot_key, latest_key = (
            Keys.installed_bot(PLATFORM, owner),
            Keys.installation(PLATFORM, owner),
        )
        async with self.redis.pipeline(transaction=True) as pipe:
            await pipe.watch(bot_key, latest_key)
            stored_bot, stored_latest = await pipe.get(bot_key), await pipe.get(latest_key)
            if stored_bot is None or self._decode(stored_bot).get("bot_refresh_token") != used:
                return False
            rotated = {name: bot.to_dict_for_copying()[name] for name in ROTATED_FIELDS}
            pipe.multi()  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
            pipe.set(bot_key, self._seal(bot.to_dict_for_copying()))
            if stored_latest is not None:
                latest = {**self._decode(stored_latest), **rotated}
                pipe.set(latest_key, self._seal(latest))
                if latest.get("user_id"):
                    mine = Keys.installation(PLATFORM, owner, str(latest["user_id"]))
                    pipe.set(mine, self._seal(latest), xx=True)
            await pipe.execute()
        return True

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        owner = owner_id(enterprise_id, team_id, is_enterprise_install)
        fields = await self._open(Keys.installation(PLATFORM, owner, user_id))
        return None if fields is None else Installation(**fields)

    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        owner = owner_id(enterprise_id, team_id)
        # The bot first: from then on nothing is sent with its token; the set of owners
        # after (another slot on a cluster), which only counts them.
        await self.redis.delete(Keys.installed_bot(PLATFORM, owner))
        await self.redis.srem(Keys.installed(PLATFORM), owner)
        for key in await self._records(owner):
            await self._strip(key, BOT_FIELDS)
        log.info("slack: the bot of %s removed", owner)

    async def async_delete_installation(
        self, *, enterprise_id: str | None, team_id: str | None, user_id: str | None = None
    ) -> None:
        owner = owner_id(enterprise_id, team_id)
        latest = Keys.installation(PLATFORM, owner)
        if user_id is None:
            await self.redis.delete(*await self._records(owner))
            return
        await self.redis.delete(Keys.installation(PLATFORM, owner, user_id))
        await self._strip(latest, USER_FIELDS, installer=user_id)
        log.info("slack: the user token of %s in %s removed", user_id, owner)

    async def _records(self, owner: str) -> list[str]:
        """The keys of the owner's latest installation and of each installer's."""
        latest = Keys.installation(PLATFORM, owner)
        return [latest, *[key async for key in self.redis.scan_iter(f"{latest}:user:*")]]

    async def _strip(self, key: str, fields: tuple[str, ...], installer: str | None = None) -> None:
        """Take `fields` out of the record at `key` (only if `installer` installed it,
        when given). A save between the read and the write (the app installed again at
        that moment) is newer than the removal, and is kept."""
        with contextlib.suppress(WatchError):
            await self._strip_watched(key, fields, installer)

    async def _strip_watched(
        self, key: str, fields: tuple[str, ...], installer: str | None
    ) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            await pipe.watch(key)
            stored = await pipe.get(key)
            if stored is None:
                return
            record: dict[str, Any] = json.loads(stored)
            if installer is not None and record.get("user_id") != installer:
                return
            if all(record.get(name) is None for name in fields):
                return
            for name in fields:
                record[name] = None
            pipe.multi()  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
            pipe.set(key, json.dumps(record), xx=True)
            await pipe.execute()

    async def owners(self) -> list[str]:
        """Every owner with a bot installed."""
        return sorted(str(owner) for owner in await self.redis.smembers(Keys.installed(PLATFORM)))

    async def check_key(self) -> int:
        """How many bots are installed; WrongSecretKey when a record of theirs does not
        decrypt. Every record is read, so each one sealed with an older key is sealed
        again with the newest."""
        owners = await self.owners()
        for owner in owners:
            latest = Keys.installation(PLATFORM, owner)
            installers = [key async for key in self.redis.scan_iter(f"{latest}:user:*")]
            for key in (Keys.installed_bot(PLATFORM, owner), latest, *installers):
                await self._open(key)
        return len(owners)

    def _seal(self, fields: dict[str, Any]) -> str:
        record = {name: _plain(value) for name, value in fields.items()}
        for name in SEALED_FIELDS:
            if record.get(name) is not None:
                record[name] = self.cipher.seal(str(record[name]))
        return json.dumps(record)

    async def _open(self, key: str) -> dict[str, Any] | None:
        """The record at `key` with its tokens decrypted (None when there is none); sealed
        again with the newest key when an older one opened it."""
        stored = await self.redis.get(key)
        if stored is None:
            return None
        record = self._decode(stored)
        if not all(self.cipher.is_current(value) for value in _sealed(json.loads(stored))):
            await self.redis.set(key, self._seal(record), xx=True)
            log.info("slack: %s sealed again with the newest GATEWAY_SECRET_KEY", key)
        return record

    def _decode(self, stored: str | bytes) -> dict[str, Any]:
        """A stored record with its tokens decrypted."""
        record: dict[str, Any] = json.loads(stored)
        for name in SEALED_FIELDS:
            if record.get(name) is not None:
                record[name] = self.cipher.open(record[name])
        return record


def _sealed(record: dict[str, Any]) -> list[str]:
    """The encrypted values of a stored record."""
    return [record[name] for name in SEALED_FIELDS if record.get(name) is not None]


def _plain(value: Any) -> Any:
    """JSON's form of a record's value: slack-sdk gives times as datetimes, and reads
    them back from ISO text (an expiry must come back whole, a float is refused)."""
    return value.isoformat() if isinstance(value, datetime) else value

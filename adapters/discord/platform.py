"""The Discord Platform: settings checks, the worker's Sender, the gateway connection, doctor."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

import aiohttp
import discord

from adapters.discord import endpoints
from adapters.discord.errors import core_error
from adapters.discord.sender import DiscordSender
from adapters.health import RENEW_INTERVAL
from gateway.errors import ConfigError, GatewayError, PlatformError
from gateway.platform import Mode, Platform
from gateway.state.health import Health

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from adapters.discord.connection import GatewayClient
    from gateway.inbound.ingest import Ingest
    from gateway.settings.env import Settings

log = logging.getLogger(__name__)

INTENT_REFUSED = (
    "Discord refused the Message Content intent: enable it for this bot in the developer "
    "portal (Applications > your app > Bot > Privileged Gateway Intents > Message Content "
    "Intent) and start again"
)


class DiscordPlatform(Platform):
    """Discord over its gateway (receiving) and REST API (sending)."""

    name = "discord"

    def __init__(self, settings: Settings, redis: Redis) -> None:
        super().__init__(settings, redis)
        self._sender: DiscordSender | None = None

    def validate(self, mode: Mode) -> None:
        if mode == "http":
            return  # Discord sends nothing over HTTP to the gateway
        if self.settings.discord_bot_token is None:
            raise ConfigError(f"DISCORD_BOT_TOKEN is required to {_purpose(mode)}")
        endpoints.apply(self.settings.discord_api_url, self.settings.discord_gateway_url)
        if mode == "connect":
            shard_plan(self.settings.discord_shard_count, self.settings.discord_shard_ids)
            command_guilds(self.settings.discord_command_guilds)

    def sender(self) -> DiscordSender:
        if self._sender is None:
            self._sender = DiscordSender(
                self._token(), edit_interval=self.settings.discord_edit_interval
            )
        return self._sender

    async def shutdown(self) -> None:
        if self._sender is not None:
            await self._sender.aclose()
            self._sender = None

    async def connect(self, ingest: Ingest, health: Health) -> None:
        """Hold the gateway until cancelled; a refused intent or token ends it with ConfigError."""
        from adapters.discord.connection import GatewayClient  # the gateway side only

        self.validate("connect")
        count, ids = shard_plan(self.settings.discord_shard_count, self.settings.discord_shard_ids)
        if ids is not None:  # several processes share the bot: one report each
            health = Health(health.redis, f"{health.component}-shards-{'_'.join(map(str, ids))}")
        client: GatewayClient

        async def report() -> None:
            up, detail = client.state()
            await health.report(up, detail)

        client = GatewayClient(
            ingest,
            auto_thread=self.settings.discord_auto_thread,
            command_guilds=command_guilds(self.settings.discord_command_guilds),
            shard_count=count,
            shard_ids=ids,
            pin_gateway=self.settings.discord_gateway_url is not None,
            on_state=report,
        )
        renewing = asyncio.create_task(_renew(report))
        try:
            await health.report(False, "connecting")
            with _fatal_errors():
                await client.start(self._token())
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing
            await client.close()
            await health.report(False, "disconnected")

    async def doctor(self) -> str:
        """Log in over REST and ask for the gateway: token, application, shard count."""
        self.validate("send")
        sender = DiscordSender(self._token(), edit_interval=self.settings.discord_edit_interval)
        try:
            http = await sender.client()
            application_id = await sender.application_id()
            try:
                shards, _, _ = await http.get_bot_gateway()
            except discord.GatewayNotFound as exc:
                cause = exc.__cause__
                if isinstance(cause, discord.HTTPException):
                    raise core_error(cause) from None
                raise PlatformError("Discord did not name a gateway") from None
            name = sender.bot_user.get("username", "?")
            return f"bot {name}, application {application_id}, {shards} shard(s) recommended"
        finally:
            await sender.aclose()

    def _token(self) -> str:
        token = self.settings.discord_bot_token
        if token is None:
            raise ConfigError("DISCORD_BOT_TOKEN is required")
        return token.get_secret_value()


@contextlib.contextmanager
def _fatal_errors() -> Iterator[None]:
    """The errors that end discord.py's connection, as the gateway's (it retries the rest)."""
    try:
        yield
    except discord.PrivilegedIntentsRequired:
        raise ConfigError(INTENT_REFUSED) from None
    except discord.LoginFailure:
        raise ConfigError("DISCORD_BOT_TOKEN was refused by Discord (401)") from None
    except discord.HTTPException as exc:  # logging in failed
        raise core_error(exc) from None
    except (aiohttp.ClientError, OSError) as exc:
        raise PlatformError(f"Discord could not be reached: {type(exc).__name__}") from None


async def _renew(report: Callable[[], Awaitable[None]]) -> None:
    while True:
        await asyncio.sleep(RENEW_INTERVAL)
        try:
            await report()
        except GatewayError as exc:  # Redis away: the report expires and reads as down
            log.warning("could not renew the Discord health report: %s", exc)


def shard_plan(count: int | None, ids: str | None) -> tuple[int | None, list[int] | None]:
    """DISCORD_SHARD_COUNT / DISCORD_SHARD_IDS ("0,1" or "0-3"): (count, ids this process runs)."""
    if not ids:
        return count, None
    if count is None:
        raise ConfigError("DISCORD_SHARD_IDS needs DISCORD_SHARD_COUNT")
    try:
        chosen = sorted({n for part in ids.split(",") if part.strip() for n in _span(part)})
    except ValueError:
        raise ConfigError("DISCORD_SHARD_IDS must be shard numbers like 0,1 or 0-3") from None
    if not chosen or chosen[-1] >= count or chosen[0] < 0:
        raise ConfigError(
            f"DISCORD_SHARD_IDS must lie between 0 and {count - 1} (DISCORD_SHARD_COUNT - 1)"
        )
    return count, chosen


def _span(part: str) -> range:
    low, _, high = part.strip().partition("-")
    return range(int(low), int(high or low) + 1)


def command_guilds(raw: str | None) -> list[int]:
    """DISCORD_COMMAND_GUILDS: comma-separated guild ids where the commands are registered at
    once (instead of globally, which user installs need)."""
    try:
        return [int(g) for g in (raw or "").split(",") if g.strip()]
    except ValueError:
        raise ConfigError("DISCORD_COMMAND_GUILDS must be comma-separated guild ids") from None


def _purpose(mode: Mode) -> str:
    return "connect to the Discord gateway" if mode == "connect" else "reply on Discord"

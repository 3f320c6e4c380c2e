"""Telegram as the core sees it: settings checks, the Sender, the webhook route, polling."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

from telegram import BotCommand
from telegram.error import InvalidToken, TelegramError

from adapters.telegram.clicks import Clicks
from adapters.telegram.client import BotClient, prepare_process
from adapters.telegram.connection import Poller
from adapters.telegram.files import TelegramFileSource
from adapters.telegram.http import Convert, webhook_route
from adapters.telegram.inbound import to_inbound
from adapters.telegram.sender import TelegramSender
from gateway.errors import ConfigError, PlatformError
from gateway.inbound import commands
from gateway.platform import Mode, Platform
from gateway.settings.env import Settings, require

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from starlette.routing import BaseRoute
    from telegram import User

    from gateway.inbound.ingest import Ingest
    from gateway.state.health import Health

log = logging.getLogger(__name__)

# The command menu Telegram shows; the names are the core's.
MENU = tuple(BotCommand(name, description) for name, description in commands.MENU)


class TelegramPlatform(Platform):
    """Telegram for the CLI: validate, sender, webhook route, polling, doctor."""

    name = "telegram"

    def __init__(self, settings: Settings, redis: Redis) -> None:
        super().__init__(settings, redis)
        prepare_process()
        self._client: BotClient | None = None
        self._sending: BotClient | None = None  # the sender's, shared by the file source
        self._convert: Convert | None = None
        self._bot_id: int | None = None

    def validate(self, mode: Mode) -> None:
        require(self.settings, "telegram_bot_token", because="for Telegram")
        if mode == "http":
            require(
                self.settings,
                "telegram_webhook_secret",
                because="for the Telegram webhook (or run `gateway telegram` to poll)",
            )

    def uses_http(self) -> bool:
        return (
            self.settings.telegram_bot_token is not None
            and self.settings.telegram_webhook_secret is not None
        )

    def sender(self) -> TelegramSender:
        """The Sender; it closes its client, which the file source shares, when closed."""
        return TelegramSender(
            self._sender_client(),
            edit_interval=self.settings.telegram_edit_interval,
            group_edit_interval=self.settings.telegram_group_edit_interval,
        )

    def file_source(self) -> TelegramFileSource:
        return TelegramFileSource(self._sender_client().bot)

    def _sender_client(self) -> BotClient:
        self._sending = self._sending or self._build()
        return self._sending

    def routes(self, ingest: Ingest) -> Sequence[BaseRoute]:
        secret = self.settings.telegram_webhook_secret
        if secret is None:
            return ()
        return (
            webhook_route(
                secret.get_secret_value(),
                ingest,
                lambda: self._convert,
                lambda: self._clicks(ingest),
            ),
        )

    def _clicks(self, ingest: Ingest) -> Clicks | None:
        if self._client is None or self._bot_id is None:
            return None  # not started yet
        return Clicks(self._client.bot, ingest, self._bot_id)

    async def startup(self) -> None:
        """Learn the bot's id and username (to see mentions) and register the commands."""
        self._client = self._client or self._build()
        me = await _get_me(self._client)
        self._convert = partial(
            to_inbound,
            bot_id=me.id,
            bot_username=me.username or "",
            file_limit=self.settings.media_file_bytes,
        )
        self._bot_id = me.id
        try:
            await self._client.bot.set_my_commands(MENU)
        except TelegramError as exc:
            log.warning(
                "telegram: setMyCommands failed (%s); the command menu may be stale", exc.message
            )
        log.info("telegram: bot @%s (id %s) ready", me.username, me.id)

    async def shutdown(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def connect(self, ingest: Ingest, health: Health) -> None:
        if self._client is None or self._convert is None:
            await self.startup()
        assert self._client is not None and self._convert is not None
        clicks = self._clicks(ingest)
        assert clicks is not None
        await Poller(self._client.bot, ingest, health, self._convert, clicks).run()

    async def doctor(self) -> str:
        client = self._build()
        try:
            me = await _get_me(client)
        finally:
            await client.aclose()
        return f"bot @{me.username} (id {me.id})"

    def _build(self) -> BotClient:
        token = self.settings.telegram_bot_token
        if token is None:
            raise ConfigError("TELEGRAM_BOT_TOKEN is required for Telegram")
        return BotClient.build(token.get_secret_value(), self.settings.telegram_api_url)


async def _get_me(client: BotClient) -> User:
    try:
        return await client.bot.get_me()
    except InvalidToken:
        raise ConfigError("TELEGRAM_BOT_TOKEN was refused by Telegram") from None
    except TelegramError as exc:
        raise PlatformError(f"Telegram getMe failed: {exc.message}") from None

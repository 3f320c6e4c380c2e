"""The python-telegram-bot client the adapter uses, built one way for every process, and
what such a process sets once at start (`prepare_process`)."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from telegram import Bot
from telegram.request import HTTPXRequest

from adapters.sdk_logs import quiet_loggers


def prepare_process() -> None:
    """What a process that talks to Telegram sets once, at start (`TelegramPlatform` when
    it is made): the whole process is affected, so it is done on purpose, never on import.

    httpx logs every request URL at INFO, and a Bot API URL contains the bot token: its
    logger is kept at WARNING. python-telegram-bot 22 warns on every RetryAfter it builds
    unless the process opts in to durations as `timedelta` (the type of its next major
    version; the adapter reads both): PTB_TIMEDELTA is set unless the operator set it.
    """
    quiet_loggers(("httpx",), logging.WARNING)
    os.environ.setdefault("PTB_TIMEDELTA", "true")


@dataclass(frozen=True, slots=True)
class BotClient:
    """A plain `telegram.Bot` and the two HTTP clients under it (sends, and getUpdates).

    Plain `Bot`, not `ExtBot`: no rate limiter and no retries inside
    python-telegram-bot, so a 429 reaches the core at once and the core's
    coalescing decides what is sent after the wait. httpx does not retry either.
    """

    bot: Bot
    requests: tuple[HTTPXRequest, HTTPXRequest]

    @classmethod
    def build(cls, token: str, base_url: str) -> BotClient:
        request = HTTPXRequest(
            connection_pool_size=64,
            read_timeout=15.0,
            write_timeout=15.0,
            connect_timeout=5.0,
            pool_timeout=5.0,
        )
        # getUpdates adds its long-poll timeout to this read timeout by itself.
        updates = HTTPXRequest(
            connection_pool_size=2, read_timeout=10.0, connect_timeout=5.0, pool_timeout=5.0
        )
        bot = Bot(
            token,
            base_url=base_url,
            base_file_url=file_base_url(base_url),
            request=request,
            get_updates_request=updates,
        )
        return cls(bot, (request, updates))

    async def aclose(self) -> None:
        # Bot.shutdown() skips requests it did not initialize itself, so close them here.
        for request in self.requests:
            await request.shutdown()


def file_base_url(base_url: str) -> str:
    """The Bot API's file URL beside its method URL (TELEGRAM_API_URL): the server
    serves `/bot<token>/<method>` and `/file/bot<token>/<file_path>`."""
    parts = urlsplit(base_url)
    head, found, tail = parts.path.rpartition("/bot")
    path = f"{head}/file/bot{tail}" if found else f"{parts.path.rstrip('/')}/file/bot"
    return urlunsplit(parts._replace(path=path))

"""Where a Telegram file is fetched from: getFile, then the Bot API's file URL.

A message names its files by `file_id` only. getFile answers with the file's
path, which python-telegram-bot joins to the file base URL (beside
TELEGRAM_API_URL, `adapters.telegram.client.file_base_url`):
`<server>/file/bot<token>/<file_path>`. That URL holds the bot token, so it goes
only into the `Download` the worker fetches (whose repr leaves it out): never
into a log line, an error or what the user is told. The Bot API lets bots
download files of up to 20 MB; getFile refuses a larger one ("file is too
big"), and that, like any other refusal, becomes a short `DownloadFailed`.
"""

from __future__ import annotations

import logging

from telegram import Bot
from telegram.error import BadRequest, Forbidden, InvalidToken, TelegramError, TimedOut

from gateway.errors import DownloadFailed, DownloadTimeout, MediaError
from gateway.messages import Attachment
from gateway.ports import Download

log = logging.getLogger(__name__)

BOT_API_DOWNLOAD_LIMIT = "20 MB"  # what getFile serves to bots on Telegram's own servers


class TelegramFileSource:
    """Finds a Telegram attachment's download URL through getFile (over the sender's Bot)."""

    def __init__(self, bot: Bot) -> None:
        self.bot = bot

    def __repr__(self) -> str:
        return "TelegramFileSource()"  # the Bot's repr would name its token

    async def locate(self, attachment: Attachment) -> Download:
        if not attachment.file_id:
            raise DownloadFailed("Telegram gave no file id for it")
        try:
            found = await self.bot.get_file(attachment.file_id)
        except TelegramError as exc:
            log.info("telegram: getFile failed (%s)", type(exc).__name__)
            raise refusal(exc) from None
        path = found.file_path or ""
        if not path.startswith(("https://", "http://")):
            # A local Bot API server in --local mode answers with a path on its own disk.
            raise DownloadFailed("Telegram gave no address to download it from")
        return Download(path)


def refusal(exc: TelegramError) -> MediaError:
    """The short reason the user reads for a getFile that failed (never the URL)."""
    if isinstance(exc, TimedOut):
        return DownloadTimeout("Telegram did not say in time where it is")
    if isinstance(exc, BadRequest) and "too big" in exc.message.lower():
        return DownloadFailed(f"over the {BOT_API_DOWNLOAD_LIMIT} Telegram lets bots download")
    if isinstance(exc, BadRequest):
        return DownloadFailed("Telegram could not find it (it may have expired)")
    if isinstance(exc, Forbidden | InvalidToken):
        return DownloadFailed("Telegram refused access to it")
    return DownloadFailed("Telegram could not be reached to fetch it")

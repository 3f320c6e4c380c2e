"""`gateway telegram`: long polling with getUpdates, for machines without a public URL.

A plain loop over `Bot.get_updates` rather than python-telegram-bot's
`Updater`: the Updater confirms an update (moves the offset past it) as soon
as it has fetched it, before anyone handled it, so an update fetched just
before a crash or a Redis outage is lost. Here the offset moves past an
update only once ingest has stored it; an update fetched again after a
failure is answered once, because ingest dedupes on `update_id`.

Telegram refuses getUpdates while a webhook is set, so the poller deletes the
webhook first (pending updates are kept) and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from redis.exceptions import RedisError
from telegram import Bot, Update
from telegram.error import Conflict, InvalidToken, NetworkError, RetryAfter, TelegramError

from adapters.telegram.clicks import Clicks
from adapters.telegram.errors import retry_after_seconds
from gateway.backoff import Backoff
from gateway.errors import GatewayError, PlatformError
from gateway.messages import Inbound

if TYPE_CHECKING:
    from gateway.inbound.ingest import Ingest
    from gateway.state.health import Health

log = logging.getLogger(__name__)

POLL_TIMEOUT = 20  # seconds Telegram holds a getUpdates open; below the health report TTL
ALLOWED_UPDATES = ("message", "callback_query")  # edits, reactions, ... are ignored anyway
BACKOFF = Backoff(first=0.5, limit=30.0)


class Poller:
    """Fetches updates, hands each to ingest, and confirms it only after that."""

    def __init__(
        self,
        bot: Bot,
        ingest: Ingest,
        health: Health,
        convert: Callable[[Update], Inbound | None],
        clicks: Clicks,
        poll_timeout: int = POLL_TIMEOUT,
    ) -> None:
        self.bot, self.ingest, self.health, self.convert = bot, ingest, health, convert
        self.clicks = clicks
        self.poll_timeout = poll_timeout
        self.offset: int | None = None
        self._failures = 0

    async def run(self) -> None:
        """Poll until cancelled; raises PlatformError when Telegram refuses the token."""
        await self._delete_webhook()
        try:
            while True:
                updates = await self._fetch()
                if updates:
                    await self._deliver(updates)
        finally:
            await self._confirm()

    async def _delete_webhook(self) -> None:
        while True:
            try:
                await self.bot.delete_webhook(drop_pending_updates=False)
                break
            except InvalidToken:
                raise PlatformError("Telegram refused TELEGRAM_BOT_TOKEN") from None
            except RetryAfter as exc:
                await self._wait(retry_after_seconds(exc), "Telegram asked to wait")
            except TelegramError as exc:
                await self._wait(self._backoff(), f"deleteWebhook: {exc.message}")
        self._failures = 0
        await self._report(True, "polling")
        log.info(
            "telegram: deleted any webhook so that long polling can receive updates "
            "(pending updates are kept); set the webhook again to go back to `gateway web`"
        )

    async def _fetch(self) -> Sequence[Update]:
        try:
            updates = await self.bot.get_updates(
                offset=self.offset, timeout=self.poll_timeout, allowed_updates=ALLOWED_UPDATES
            )
        except InvalidToken:
            raise PlatformError("Telegram refused TELEGRAM_BOT_TOKEN") from None
        except RetryAfter as exc:
            await self._wait(retry_after_seconds(exc), "Telegram asked to wait")
            return ()
        except Conflict as exc:
            # Another poller on this token, or someone set a webhook: do not fight over it.
            await self._wait(self._backoff(), f"conflict: {exc.message}")
            return ()
        except NetworkError as exc:
            await self._wait(self._backoff(), f"network: {exc.message}")
            return ()
        except TelegramError as exc:
            await self._wait(self._backoff(), f"{type(exc).__name__}: {exc.message}")
            return ()
        self._failures = 0
        await self._report(True, "polling")
        return updates

    async def _deliver(self, updates: Sequence[Update]) -> None:
        for update in updates:
            try:
                await self._take(update)
            except (GatewayError, RedisError) as exc:
                # Not confirmed: the next getUpdates returns it again.
                await self._wait(self._backoff(), f"ingest failed: {exc}")
                return
            self.offset = update.update_id + 1

    async def _take(self, update: Update) -> None:
        if update.callback_query is not None:
            await self.clicks.handle(update)
            return
        inbound = self.convert(update)
        if inbound is not None:
            await self.ingest.receive(inbound)

    async def _confirm(self) -> None:
        """Tell Telegram which updates are done, so a restart does not fetch them again."""
        if self.offset is None:
            return
        try:
            await asyncio.wait_for(self.bot.get_updates(offset=self.offset, timeout=0), 3.0)
        except (TelegramError, TimeoutError):
            log.info("telegram: could not confirm the last updates; they are deduped on restart")

    def _backoff(self) -> float:
        delay = BACKOFF.delay(self._failures)
        self._failures += 1
        return delay

    async def _wait(self, seconds: float, reason: str) -> None:
        log.warning("telegram polling: %s; retrying in %.1fs", reason, seconds)
        await self._report(False, reason[:200])
        await asyncio.sleep(seconds)

    async def _report(self, up: bool, detail: str) -> None:
        # With Redis down there is nowhere to report to; the last report expires and reads "down".
        with contextlib.suppress(RedisError):
            await self.health.report(up, detail)

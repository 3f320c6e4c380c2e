"""Clicks on our buttons (callback queries): taken by the core, then answered.

Every callback query is answered, refused or not: until it is, the clicker's
app shows a spinner on the button. An approval click that does not count (someone
else's, or on a request no longer open) is answered with the refusal as its `text`,
which Telegram shows to the clicker alone; a feedback click with a short thanks, or
why it did not count. Used by both ways updates arrive: the webhook (`http.py`) and
long polling (`connection.py`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from telegram import Bot, Update
from telegram.error import TelegramError

from adapters.buttons import refusal_text
from adapters.telegram.inbound import is_feedback, to_decision, to_feedback

if TYPE_CHECKING:
    from gateway.inbound.ingest import Ingest

log = logging.getLogger(__name__)


class Clicks:
    """Hands a callback query's Decision or FeedbackClick to the core and answers it."""

    def __init__(self, bot: Bot, ingest: Ingest, bot_id: int) -> None:
        self.bot, self.ingest, self.bot_id = bot, ingest, bot_id

    async def handle(self, update: Update) -> None:
        """Raises what `Ingest.decide` and `Ingest.feedback` raise (the update is then
        delivered again)."""
        query = update.callback_query
        if query is None:
            return
        text = await (self._feedback(update) if is_feedback(update) else self._decide(update))
        if isinstance(query.id, str):
            await self._answer(query.id, text)

    async def _decide(self, update: Update) -> str | None:
        decision = to_decision(update, self.bot_id)
        return refusal_text(await self.ingest.decide(decision)) if decision else None

    async def _feedback(self, update: Update) -> str | None:
        click = to_feedback(update, self.bot_id)
        return (await self.ingest.feedback(click)).text if click else None

    async def _answer(self, query_id: str, text: str | None) -> None:
        try:
            await self.bot.answer_callback_query(query_id, text=text)
        except TelegramError as exc:
            # The decision stands; the button's spinner times out by itself.
            log.warning("telegram: answerCallbackQuery failed: %s", exc.message)

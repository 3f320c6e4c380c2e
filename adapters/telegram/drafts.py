"""A reply streamed as a Telegram draft (sendMessageDraft): the `LiveMessage` of private chats.

A draft is no message: the client shows it under the chat as the reply being written,
animating the changes of one `draft_id`, and forgets it about 30 s after its last
update. Each `show` sends the whole text so far, with the tool steps as short lines
under it (a draft has no timeline of its own); `close` sends the real message
(sendMessage, as `TelegramSender.send` does, with the feedback buttons when asked),
which takes the draft's place.

Telegram refuses drafts where it does not allow them ("TEXTDRAFT_PEER_INVALID": a group,
a channel, a chat its client cannot show them in) and a Bot API server older than the
method answers 404 "method not found": both are `StreamRefused` for the chat, and the
core carries the reply on edited in place. A 429 is `RateLimited`, any other refusal
what `TelegramSender` makes of it.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from html import escape

from telegram import Bot
from telegram.error import BadRequest, InvalidToken, TelegramError

from adapters.telegram.errors import core_error
from adapters.telegram.formatting import MAX_LENGTH, with_fallback
from adapters.telegram.render import utf16_length, visible_length
from gateway.errors import PlatformError, StreamRefused
from gateway.messages import Address
from gateway.ports import Sender, Step

# Telegram's refusals of drafts: what its error text holds, and the code they are counted by.
REFUSALS = {
    "textdraft_peer_invalid": "TEXTDRAFT_PEER_INVALID",
    "method not found": "METHOD_NOT_FOUND",  # a Bot API server older than the method
}
STEP_WORDS = {
    "pending": ("⏳", "waiting"),
    "in_progress": ("⚙️", "running"),
    "complete": ("✅", "done"),
    "error": ("⚠️", "failed"),
}
DRAFT_PACE = 2.0  # a draft's shows, in the chat's edit intervals (its changes are animated)
DRAFT_ID_LIMIT = 2**31 - 1  # a positive 32-bit id: every client library takes it


def new_draft_id() -> int:
    """A non-zero id for one draft: changes under the same id are animated, a new id is a
    new draft (the next piece of a reply past the length limit)."""
    return secrets.randbelow(DRAFT_ID_LIMIT) + 1


def step_lines(steps: Sequence[Step]) -> str:
    """The tool steps as short lines (`⚙️ search — running`), in plain text."""
    lines = []
    for step in steps:
        icon, word = STEP_WORDS.get(step.state, ("•", step.state))
        lines.append(f"{icon} {step.title} — {word}")
    return "\n".join(lines)


def with_steps(text: str, steps: Sequence[Step], *, html: bool) -> str:
    """A draft's text (Telegram HTML when `html`, else plain) with the step lines under
    it, when both fit Telegram's limit (the core split the text to fit alone); the text
    alone otherwise."""
    lines = step_lines(steps)
    if not lines:
        return text
    if html:
        lines = escape(lines, quote=False)
    if not text.strip():
        return lines
    joined = f"{text}\n\n{lines}"
    measured = visible_length(joined) if html else utf16_length(joined)
    return joined if measured <= MAX_LENGTH else text


def draft_error(exc: TelegramError) -> PlatformError:
    """The core's error for a failed sendMessageDraft: a refusal of drafts is
    StreamRefused for the chat, the rest as for every other call (`core_error`)."""
    if isinstance(exc, BadRequest | InvalidToken):
        for text, code in REFUSALS.items():
            if text in exc.message.lower():
                return StreamRefused(code, for_channel=True)
    return core_error(exc)


class TelegramDraft:
    """One draft of a reply in a private chat, and the message that ends it (`sender`'s,
    as every other message of the reply).

    `interval` is DRAFT_PACE times the private chat's pacing (`Limits.chat_interval`,
    which the core grants every call into the chat at most once per, through Redis):
    the client animates a draft's text from one show to the next, so it flows at half
    the edits' rate where an edited message would jump; Telegram documents no separate
    limit for drafts.
    `refresh` is kept well inside a draft's 30 s life, so that a long tool step
    (no new text) does not let the draft lapse.
    """

    message_id: str | None = None  # a draft is no message

    def __init__(
        self, bot: Bot, sender: Sender, address: Address, *, interval: float, refresh: float
    ) -> None:
        self.bot, self.sender, self.address = bot, sender, address
        self.interval = interval
        self.refresh: float | None = refresh
        self.draft_id = new_draft_id()

    async def show(self, markdown: str, steps: Sequence[Step]) -> None:
        async def draft(text: str, parse_mode: str | None) -> None:
            await self.bot.send_message_draft(
                chat_id=int(self.address.channel),
                draft_id=self.draft_id,
                text=with_steps(text, steps, html=parse_mode is not None),
                parse_mode=parse_mode,
            )

        await with_fallback(markdown, draft, errors=draft_error, empty="")

    async def close(self, markdown: str, steps: Sequence[Step], *, feedback: bool) -> str:
        # The steps end with the draft: the message shows exactly the reply's text.
        return await self.sender.send(self.address, markdown, final=True, feedback=feedback)

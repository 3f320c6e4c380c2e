"""Replies on Telegram: one Bot API call per Sender method, errors mapped by errors.py.

A reply in a private chat streams as a draft (sendMessageDraft, `drafts.py`) and ends
as one real message; in groups and forum topics, where Telegram has no drafts, it is
posted and edited in place.

The core paces and coalesces edits (it knows the whole stream); this sender
must not second-guess it, so it uses the plain `telegram.Bot` (not `ExtBot`,
no rate limiter) over an `HTTPXRequest` without retries: a 429 reaches the
core at once as `RateLimited(retry_after)` and the core decides what to send
after the wait.
"""

from __future__ import annotations

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, LinkPreviewOptions, ReplyParameters
from telegram.constants import ChatAction
from telegram.error import TelegramError

from adapters.buttons import (
    APPROVE_LABEL,
    DECLINE_LABEL,
    FEEDBACK_DOWN,
    FEEDBACK_DOWN_LABEL,
    FEEDBACK_UP,
    FEEDBACK_UP_LABEL,
    approval_payload,
    feedback_payload,
)
from adapters.telegram.client import BotClient
from adapters.telegram.drafts import DRAFT_PACE, TelegramDraft
from adapters.telegram.errors import core_error
from adapters.telegram.formatting import MAX_LENGTH, with_fallback
from adapters.telegram.render import render, visible_length
from gateway.errors import MessageRejected
from gateway.messages import Address
from gateway.ports import Limits, LiveMessage

TYPING_INTERVAL = 4.5  # a chat action shows for 5 s
DRAFT = "draft"  # the mechanism's name: sendMessageDraft
DRAFT_REFRESH = 20.0  # seconds: a draft lapses about 30 s after its last update
ADMIN_STATUSES = frozenset({"administrator", "creator"})  # getChatMember's, for /config
_NO_PREVIEW = LinkPreviewOptions(is_disabled=True)  # a preview would jump around while streaming


def is_group(address: Address) -> bool:
    """Telegram gives groups, supergroups and channels negative chat ids, people positive ones."""
    return address.channel.startswith("-")


def is_topic(address: Address) -> bool:
    """A forum topic (of a supergroup, or of a private chat with topics): its thread."""
    return bool(address.thread)


class TelegramSender:
    """The Sender for Telegram, on python-telegram-bot's `Bot`, with drafts in private
    chats (`NativeStreams`); `draft_refresh` is how long a draft may go unchanged before
    it is shown again to stay."""

    platform = "telegram"

    def __init__(
        self,
        client: BotClient,
        *,
        edit_interval: float,
        group_edit_interval: float,
        draft_refresh: float = DRAFT_REFRESH,
    ) -> None:
        self.client = client
        self.bot = client.bot
        self.draft_refresh = draft_refresh
        self._private = Limits(
            max_length=MAX_LENGTH,
            edit_interval=edit_interval,
            chat_interval=edit_interval,
            typing_interval=TYPING_INTERVAL,
        )
        # Telegram allows about 20 messages a minute into one group: slower edits there.
        self._group = Limits(
            max_length=MAX_LENGTH,
            edit_interval=group_edit_interval,
            chat_interval=group_edit_interval,
            typing_interval=TYPING_INTERVAL,
        )

    def limits(self, address: Address) -> Limits:
        return self._group if is_group(address) else self._private

    def measure(self, markdown: str) -> int:
        return visible_length(render(markdown))

    async def send(
        self,
        address: Address,
        markdown: str,
        *,
        final: bool,
        key: str | None = None,
        feedback: bool = False,
        keyboard: InlineKeyboardMarkup | None = None,
    ) -> str:
        """`key` is not used: the Bot API has no idempotent send (nor a way to list the
        bot's messages), so a post whose answer was lost cannot be found again."""
        if feedback:
            keyboard = feedback_keyboard()
        reply = (
            ReplyParameters(message_id=int(address.reply_to), allow_sending_without_reply=True)
            if address.reply_to
            else None
        )
        thread = int(address.thread) if address.thread else None

        async def post(text: str, parse_mode: str | None) -> str:
            message = await self.bot.send_message(
                chat_id=int(address.channel),
                text=text,
                parse_mode=parse_mode,
                message_thread_id=thread,
                reply_parameters=reply,
                link_preview_options=_NO_PREVIEW,
                reply_markup=keyboard,
            )
            return str(message.message_id)

        return await with_fallback(markdown, post)

    async def edit(
        self,
        address: Address,
        message_id: str,
        markdown: str,
        *,
        final: bool,
        feedback: bool = False,
    ) -> None:
        async def change(text: str, parse_mode: str | None) -> None:
            await self.bot.edit_message_text(
                text=text,
                chat_id=int(address.channel),
                message_id=int(message_id),
                parse_mode=parse_mode,
                link_preview_options=_NO_PREVIEW,
                reply_markup=feedback_keyboard() if feedback else None,
            )

        try:
            await with_fallback(markdown, change)
        except MessageRejected as exc:
            if "message is not modified" not in str(exc).lower():
                raise

    def native_mechanism(self, address: Address) -> str | None:
        """Drafts in private chats; groups, channels and forum topics are edited in place."""
        return None if is_group(address) or is_topic(address) else DRAFT

    def open_live(self, address: Address, *, recipient: str, key: str | None = None) -> LiveMessage:
        """A draft; `key` is not used: a draft is no message, and the Bot API keeps no key."""
        return TelegramDraft(
            self.bot,
            self,
            address,
            interval=DRAFT_PACE * self._private.edit_interval,
            refresh=self.draft_refresh,
        )

    async def close_live(self, address: Address, message_id: str) -> None:
        """Nothing to close: a draft is no message, and lapses by itself."""

    async def ask_approval(self, address: Address, markdown: str, approval_id: str) -> str:
        return await self.send(
            address, markdown, final=True, keyboard=approval_keyboard(approval_id)
        )

    async def settle_approval(self, address: Address, message_id: str, markdown: str) -> None:
        # An edit without reply_markup takes the inline keyboard away.
        await self.edit(address, message_id, markdown, final=True)

    async def thinking(self, address: Address, on: bool) -> None:
        # Typing ends by itself after 5 s or when the bot sends: there is nothing to clear.
        if not on:
            return
        thread = int(address.thread) if address.thread else None
        try:
            await self.bot.send_chat_action(
                chat_id=int(address.channel), action=ChatAction.TYPING, message_thread_id=thread
            )
        except TelegramError as exc:
            raise core_error(exc) from None

    async def is_admin(self, address: Address, user_id: str, *, dm: bool) -> bool:
        """A group's administrator or creator (getChatMember); a private chat's user
        administers their own."""
        if dm:
            return True
        try:
            member = await self.bot.get_chat_member(
                chat_id=int(address.channel), user_id=int(user_id)
            )
        except TelegramError as exc:
            raise core_error(exc) from None
        return member.status in ADMIN_STATUSES

    async def aclose(self) -> None:
        await self.client.aclose()


def approval_keyboard(approval_id: str) -> InlineKeyboardMarkup:
    """Approve and Decline side by side; their callback_data fits the 64 bytes allowed."""
    buttons = [
        InlineKeyboardButton(APPROVE_LABEL, callback_data=approval_payload(approval_id, True)),
        InlineKeyboardButton(DECLINE_LABEL, callback_data=approval_payload(approval_id, False)),
    ]
    return InlineKeyboardMarkup([buttons])


def feedback_keyboard() -> InlineKeyboardMarkup:
    """👍 and 👎 side by side, under a reply's last message."""
    buttons = [
        InlineKeyboardButton(FEEDBACK_UP_LABEL, callback_data=feedback_payload(FEEDBACK_UP)),
        InlineKeyboardButton(FEEDBACK_DOWN_LABEL, callback_data=feedback_payload(FEEDBACK_DOWN)),
    ]
    return InlineKeyboardMarkup([buttons])

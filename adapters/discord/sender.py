"""Posting to Discord over its REST API only: no gateway connection is needed to reply.

Channel messages and typing go through discord.py's `HTTPClient` (logged in
with the bot token, nothing else); interaction follow-ups through a partial
`discord.Webhook`, as discord.py itself sends them (webhook calls carry the
interaction token, not the bot's).

Rate limits: discord.py tracks Discord's buckets, waits pre-emptively when a
bucket is spent, and retries a 429 itself after `retry_after`, up to five
tries. That wait is kept: it honours Discord's own per-route buckets, which
the core cannot see, and the core's delivery simply awaits the slower call
(the next edit then carries the newest text, so nothing is lost). Waits longer
than `MAX_LIBRARY_WAIT` are not slept inside the library: discord.py raises,
and the core gets `RateLimited(retry_after)`, as it does for a 429 discord.py
will not retry (no `Via` header) or once its retries run out.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import Any

import aiohttp
import discord
from discord.http import HTTPClient, handle_message_parameters

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
from adapters.discord.errors import core_error
from adapters.discord.render import render
from adapters.sdk_logs import quiet_loggers
from gateway.errors import PlatformError
from gateway.messages import Address
from gateway.ports import Limits

log = logging.getLogger(__name__)

MAX_LENGTH = 2000
TYPING_INTERVAL = 8.0  # Discord shows "is typing" for about 10 s after each call
MAX_LIBRARY_WAIT = 30.0  # discord.py's smallest allowed max_ratelimit_timeout
ADMINISTRATOR, MANAGE_GUILD = 1 << 3, 1 << 5  # permission bits that may change settings
# At DEBUG these discord.py loggers print request URLs and gateway payloads, which hold
# interaction tokens and message text; the gateway keeps them at INFO or above.
_CHATTY_LOGGERS = ("discord.http", "discord.webhook.async_", "discord.gateway")


def quiet_library_logs() -> None:
    """Keep discord.py's payload-dumping loggers at INFO, even under GATEWAY_LOG_LEVEL=DEBUG
    (a level set on them on purpose is left alone)."""
    quiet_loggers(_CHATTY_LOGGERS, logging.INFO)


class DiscordSender:
    """The worker's Sender for Discord; logs in lazily on the first call."""

    platform = "discord"

    def __init__(self, token: str, *, edit_interval: float) -> None:
        quiet_library_logs()
        self._token = token
        self._edit_interval = edit_interval
        self._http: HTTPClient | None = None
        self._webhooks: aiohttp.ClientSession | None = None
        self._application_id: int | None = None
        self.bot_user: dict[str, Any] = {}
        self._login_lock = asyncio.Lock()

    def limits(self, address: Address) -> Limits:
        return Limits(
            max_length=MAX_LENGTH,
            edit_interval=self._edit_interval,
            typing_interval=TYPING_INTERVAL,
        )

    def measure(self, markdown: str) -> int:
        return len(render(markdown))

    async def send(
        self,
        address: Address,
        markdown: str,
        *,
        final: bool,
        key: str | None = None,
        feedback: bool = False,
    ) -> str:
        """Post a message (or the interaction's follow-up); returns its id.

        A channel message with a `key` carries a nonce made from it, which Discord
        enforces: a second post with the same nonce within a few minutes (discord.py's
        own retry of a 5xx, or the run that took the turn over) gets the first message
        back, not a copy. An interaction's follow-up (a webhook) has no nonce.
        """
        content = render(markdown)
        view = feedback_view() if feedback else discord.utils.MISSING
        if address.token:
            webhook = await self._webhook(address.token)
            sent = await _call(
                webhook.send(content, wait=True, allowed_mentions=_mentions(False), view=view)
            )
            return str(sent.id)
        http = await self.client()
        params = handle_message_parameters(
            content=content,
            allowed_mentions=_mentions(address.reply_to is not None),
            message_reference=_reference(address),
            nonce=nonce(key) if key is not None else None,
            view=view,
        )
        message: dict[str, Any] = await _call(http.send_message(address.channel, params=params))
        return str(message["id"])

    async def edit(
        self,
        address: Address,
        message_id: str,
        markdown: str,
        *,
        final: bool,
        feedback: bool = False,
    ) -> None:
        """Replace a message's text; `feedback` adds the feedback buttons (else its
        components are left as they are)."""
        content = render(markdown)
        view = feedback_view() if feedback else discord.utils.MISSING
        if address.token:
            webhook = await self._webhook(address.token)
            await _call(
                webhook.edit_message(
                    int(message_id), content=content, allowed_mentions=_mentions(False), view=view
                )
            )
            return
        http = await self.client()
        params = handle_message_parameters(
            content=content, allowed_mentions=_mentions(address.reply_to is not None), view=view
        )
        await _call(http.edit_message(address.channel, message_id, params=params))

    async def ask_approval(self, address: Address, markdown: str, approval_id: str) -> str:
        """Posted in the channel with the bot's token even where the turn answers an
        interaction: a follow-up through the interaction's webhook cannot carry buttons
        whose clicks come back to the bot."""
        http = await self.client()
        params = handle_message_parameters(
            content=render(markdown),
            allowed_mentions=_mentions(False),
            view=approval_view(approval_id),
        )
        message: dict[str, Any] = await _call(http.send_message(address.channel, params=params))
        return str(message["id"])

    async def settle_approval(self, address: Address, message_id: str, markdown: str) -> None:
        http = await self.client()
        params = handle_message_parameters(
            content=render(markdown), allowed_mentions=_mentions(False), view=None
        )
        await _call(http.edit_message(address.channel, message_id, params=params))

    async def thinking(self, address: Address, on: bool) -> None:
        """Typing in the channel. An interaction's deferral already shows "thinking", and
        Discord has no call to stop typing: it ends with the next message or after 10 s."""
        if not on or address.token:
            return
        http = await self.client()
        await _call(http.send_typing(address.channel))

    async def client(self) -> HTTPClient:
        """The logged-in HTTP client (one `GET /users/@me` the first time)."""
        async with self._login_lock:
            if self._http is None:
                http = HTTPClient(
                    asyncio.get_running_loop(), max_ratelimit_timeout=MAX_LIBRARY_WAIT
                )
                try:
                    self.bot_user = dict(await _call(http.static_login(self._token)))
                except PlatformError:
                    await http.close()
                    raise
                self._http = http
            return self._http

    async def application_id(self) -> int:
        """The bot's application id, which names the webhook of its interactions."""
        if self._application_id is None:
            http = await self.client()
            info = await _call(http.application_info())
            self._application_id = int(info["id"])
        return self._application_id

    async def _webhook(self, token: str) -> discord.Webhook:
        application_id = await self.application_id()
        if self._webhooks is None:
            self._webhooks = aiohttp.ClientSession()
        return discord.Webhook.partial(application_id, token, session=self._webhooks)

    async def is_admin(self, address: Address, user_id: str, *, dm: bool) -> bool:
        """A guild member with Manage Server (or Administrator, or its owner), from the
        guild's roles and the member's (REST: a worker holds no gateway cache); a DM's
        user administers their own."""
        if dm:
            return True
        http = await self.client()
        guild = await _call(http.get_guild(address.workspace, with_counts=False))
        member = await _call(http.get_member(address.workspace, user_id))
        return manages_server(guild, member, user_id)

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self._webhooks is not None:
            await self._webhooks.close()
            self._webhooks = None


def approval_view(approval_id: str) -> discord.ui.View:
    """Approve and Decline buttons; their custom_id fits the 100 characters allowed. The
    view is only serialised here: clicks arrive as interactions at the gateway client."""
    view = discord.ui.View(timeout=None)
    for label, style, approve in (
        (APPROVE_LABEL, discord.ButtonStyle.success, True),
        (DECLINE_LABEL, discord.ButtonStyle.danger, False),
    ):
        custom_id = approval_payload(approval_id, approve)
        view.add_item(discord.ui.Button(label=label, style=style, custom_id=custom_id))
    return view


class RenderedView(discord.ui.View):
    """A view this process only serialises: its clicks arrive as interactions at the
    gateway client, never here. Saying so lets discord.py put its buttons on an
    interaction's follow-up, which it refuses for a view it would have to dispatch."""

    def is_dispatchable(self) -> bool:
        return False


def feedback_view() -> discord.ui.View:
    """👍 and 👎 under a reply's last message (custom_id `f:up` / `f:down`)."""
    view = RenderedView(timeout=None)
    for label, value in ((FEEDBACK_UP_LABEL, FEEDBACK_UP), (FEEDBACK_DOWN_LABEL, FEEDBACK_DOWN)):
        view.add_item(
            discord.ui.Button(
                label=label, style=discord.ButtonStyle.secondary, custom_id=feedback_payload(value)
            )
        )
    return view


def nonce(key: str) -> str:
    """A message's nonce from its key: Discord takes up to 25 characters."""
    return hashlib.blake2b(key.encode(), digest_size=12).hexdigest()


def _mentions(reply: bool) -> discord.AllowedMentions:
    """Model output never pings anyone; a reply may notify the person it answers."""
    return discord.AllowedMentions(everyone=False, users=False, roles=False, replied_user=reply)


def _reference(address: Address) -> Any:
    if address.reply_to is None:
        return discord.utils.MISSING
    # fail_if_not_exists=False: a question deleted meanwhile still gets its answer.
    return {
        "message_id": address.reply_to,
        "channel_id": address.channel,
        "fail_if_not_exists": False,
    }


def manages_server(guild: Any, member: Any, user_id: str) -> bool:
    """Whether a member's roles (with the guild's @everyone, whose id is the guild's)
    grant Manage Server or Administrator, or the member owns the guild."""
    if str(guild.get("owner_id")) == user_id:
        return True
    held = {str(guild["id"]), *(str(role) for role in member.get("roles") or ())}
    granted = 0
    for role in guild.get("roles") or ():
        if str(role.get("id")) in held:
            granted |= int(role.get("permissions") or 0)
    return bool(granted & (ADMINISTRATOR | MANAGE_GUILD))


async def _call(awaitable: Any) -> Any:
    """Await one discord.py call, turning its errors into the gateway's tree."""
    try:
        return await awaitable
    except (discord.RateLimited, discord.LoginFailure, discord.HTTPException) as exc:
        raise core_error(exc) from None
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise PlatformError(f"Discord could not be reached: {type(exc).__name__}") from None

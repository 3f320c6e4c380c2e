"""Replies to Slack: one Web API call per Sender method, through slack-sdk's AsyncWebClient.

The core does the pacing (edit interval, coalescing on 429, splitting), so no
slack-sdk retry handler for rate limits is installed here: a 429 becomes
`RateLimited(retry_after)` at once and the core decides what to send next.

A reply in a thread streams through Slack's own streaming methods instead
(`NativeStreams`, the live message in adapters/slack/streaming.py); elsewhere, and where
Slack refuses to stream, it is posted and edited. A reply's last message carries the
feedback buttons (adapters/slack/blocks.py) when the core asks for them.

Installed in many workspaces, each call goes out with the token of the
address's workspace (adapters/slack/workspaces.py); a token Slack calls dead
is forgotten, so the next call reads the installation store again.

Every call of a sender goes through one aiohttp session (`SharedSession`), closed by
`aclose`: slack-sdk opens a session, and so a new TCP connection, per request of a
client without one.

Long because: `SlackSender` holds every Sender method (posts, edits, the look-up of a
re-run's post, live messages, thinking signals and assistant status, approvals,
admins), each a few lines over the one call that maps Slack's refusals to the core's.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.blocks import approval_blocks, reply_blocks
from adapters.slack.client import SharedSession
from adapters.slack.errors import BlocksRefused, core_error, post_error, stream_error
from adapters.slack.render import to_mrkdwn
from adapters.slack.streaming import STREAM_MECHANISM, SlackStream
from adapters.slack.workspaces import Workspaces
from gateway.errors import PlatformError, RateLimited, StreamRefused
from gateway.messages import Address
from gateway.ports import Limits, LiveMessage

log = logging.getLogger(__name__)

# Slack accepts 40,000 characters but renders long messages badly past about
# 4,000 (and truncates blocks there); the core splits below this.
MAX_LENGTH = 3900
THINKING_REACTION = "eyes"
REPLY_EVENT = "gateway_reply"  # the metadata event type a reply's posts carry, with their key
# Messages a re-run reads for its predecessor's post, from the message it answers on
# (Slack caps a page at 15 for apps outside its Marketplace, whatever is asked).
LOOK_BACK = 200
# At the top level of a channel (pages newest first) the look-up reads only the messages
# within this many seconds after the one answered (a run posts its reply seconds after it),
# following the pages back to that message, at most LOOK_PAGES of them.
LOOK_WINDOW = 300.0
LOOK_PAGES = 10
THINKING_STATUS = "is thinking…"
# A stream's least time between two calls, in edit intervals: Slack animates what a stream
# appends, so half as many calls read as smoothly (and chat.appendStream's Tier 4 budget
# is shared by every reply streaming in the workspace).
STREAM_PACE = 2.0
# What chat.stopStream answers for a message that is no longer streaming (or never did):
# the state a close wants.
_NOT_STREAMING = frozenset({"message_not_in_streaming_state", "stopped_by_user"})
REMEMBERED_STREAMS = 1000  # closed streams whose edits carry their text in blocks
# setStatus errors that mean the app lacks the assistant feature (not just this thread).
_NO_ASSISTANT = frozenset(
    {
        "missing_scope",
        "not_allowed_token_type",
        "no_permission",
        "access_denied",
        "method_deprecated",
        "unknown_method",
        "feature_not_enabled",
        "team_not_allowed",
    }
)


def _reply_metadata(key: str) -> dict[str, Any]:
    return {"event_type": REPLY_EVENT, "event_payload": {"key": key}}


def is_assistant_thread(address: Address) -> bool:
    """A thread in a DM with the app: where Slack's assistant threads live (bolt's
    `is_user_message_event_in_assistant_thread` reads an event the same way: an IM
    message with a thread_ts)."""
    return bool(address.thread) and address.channel.startswith("D")


class SlackSender:
    """The Sender workers use for Slack."""

    platform = "slack"

    def __init__(
        self,
        client: AsyncWebClient,
        edit_interval: float,
        *,
        workspaces: Workspaces | None = None,
    ) -> None:
        """`client` holds the one bot token; with `workspaces`, each call takes its
        workspace's client instead."""
        self.client = client
        self.workspaces = workspaces
        self.edit_interval = edit_interval
        self.assistant_status = True  # until Slack says the app has no assistant feature
        self._status_set: set[tuple[str, str]] = set()
        self._status_failures: set[str] = set()  # each reason is logged once
        # Messages close_live ended: Slack keeps a message's blocks when chat.update sends
        # none, and a stream's text is in its blocks, so their edits send the text in blocks.
        self._closed_streams: dict[str, None] = {}
        self.connections = SharedSession()

    def limits(self, address: Address) -> Limits:
        return Limits(max_length=MAX_LENGTH, edit_interval=self.edit_interval)

    def measure(self, markdown: str) -> int:
        return len(to_mrkdwn(markdown))

    async def send(
        self,
        address: Address,
        markdown: str,
        *,
        final: bool,
        key: str | None = None,
        feedback: bool = False,
    ) -> str:
        """chat.postMessage has no idempotency key: `key` goes with the message as its
        metadata instead, where `find_post` looks for it."""
        post = functools.partial(
            self._call,
            "chat.postMessage",
            address,
            refusal=post_error,
            channel=address.channel,
            thread_ts=address.thread,
            text=to_mrkdwn(markdown) or " ",
            unfurl_links=False,
            metadata=None if key is None else _reply_metadata(key),
        )
        try:
            result = await post(
                blocks=reply_blocks(to_mrkdwn(markdown), feedback) if feedback else None
            )
        except BlocksRefused as exc:
            if not feedback:
                raise
            log.warning(
                "%s: %s; the reply goes without its feedback buttons", address.chat_key, exc
            )
            result = await post()
        return str(result["ts"])

    async def find_post(self, address: Address, key: str) -> str | None:
        """The bot's message posted under `key` after the one it answers (`reply_to`: posted
        before the reply): in a thread, among its first messages after that one (pages
        oldest first, one call); at the top level, among the channel's messages in the
        LOOK_WINDOW after it, however many others the channel got since."""
        if address.thread:
            found = await self._call(
                "conversations.replies",
                address,
                channel=address.channel,
                ts=address.thread,
                limit=LOOK_BACK,
                include_all_metadata=True,
                oldest=address.reply_to,
            )
            return _posted_under(found.get("messages"), key)
        return await self._find_at_top_level(address, key)

    async def _find_at_top_level(self, address: Address, key: str) -> str | None:
        """conversations.history pages newest first: bounded by `latest` too, the pages
        from the window's end back to the answered message hold the post."""
        latest = None if address.reply_to is None else _seconds_after(address.reply_to)
        cursor = None
        for _ in range(LOOK_PAGES):
            found = await self._call(
                "conversations.history",
                address,
                channel=address.channel,
                limit=LOOK_BACK,
                include_all_metadata=True,
                oldest=address.reply_to,
                latest=latest,
                cursor=cursor,
            )
            if (ts := _posted_under(found.get("messages"), key)) is not None:
                return ts
            cursor = (found.get("response_metadata") or {}).get("next_cursor")
            if not found.get("has_more") or not cursor:
                return None
        return None

    async def edit(
        self,
        address: Address,
        message_id: str,
        markdown: str,
        *,
        final: bool,
        feedback: bool = False,
    ) -> None:
        """chat.update; with blocks where the message has the feedback buttons, or was a
        stream (whose text is in blocks that a text alone would leave showing)."""
        update = functools.partial(self._update, address, message_id, markdown)
        try:
            await update(feedback)
        except StreamRefused:
            # A stream a run that died left open (found by its key): closed, then edited.
            await self.close_live(address, message_id)
            await update(feedback)

    async def _update(
        self, address: Address, message_id: str, markdown: str, feedback: bool
    ) -> None:
        """chat.update; where Slack refuses the feedback buttons, again without them."""
        blocks = feedback or message_id in self._closed_streams
        update = functools.partial(
            self._call,
            "chat.update",
            address,
            refusal=post_error,
            channel=address.channel,
            ts=message_id,
            text=to_mrkdwn(markdown) or " ",
        )
        try:
            await update(blocks=reply_blocks(to_mrkdwn(markdown), feedback) if blocks else None)
        except BlocksRefused as exc:
            if not feedback:
                raise
            log.warning(
                "%s: %s; the reply goes without its feedback buttons", address.chat_key, exc
            )
            closed = message_id in self._closed_streams
            await update(blocks=reply_blocks(to_mrkdwn(markdown), False) if closed else None)

    def native_mechanism(self, address: Address) -> str | None:
        """Slack streams a reply in a thread (a DM's, an assistant thread, a channel's),
        never at the top level of a conversation (chat.startStream needs a thread_ts),
        nor a side reply."""
        return STREAM_MECHANISM if address.thread and not address.side else None

    def open_live(self, address: Address, *, recipient: str, key: str | None = None) -> LiveMessage:
        return SlackStream(
            self.stream_call,
            address,
            recipient,
            interval=STREAM_PACE * self.edit_interval,
            metadata=None if key is None else _reply_metadata(key),
        )

    async def close_live(self, address: Address, message_id: str) -> None:
        """chat.stopStream, nothing added; a message that no longer streams is closed."""
        self._closed_streams[message_id] = None
        while len(self._closed_streams) > REMEMBERED_STREAMS:
            del self._closed_streams[next(iter(self._closed_streams))]
        try:
            await self.stream_call(
                "chat.stopStream", address, channel=address.channel, ts=message_id
            )
        except StreamRefused as exc:
            if exc.code not in _NOT_STREAMING:
                raise

    async def stream_call(self, api_method: str, address: Address, **kwargs: Any) -> Any:
        """A call of a stream (`SlackStream`): its refusals of the surface StreamRefused."""
        return await self._call(api_method, address, refusal=stream_error, **kwargs)

    async def ask_approval(self, address: Address, markdown: str, approval_id: str) -> str:
        text = to_mrkdwn(markdown)
        result = await self._call(
            "chat.postMessage",
            address,
            channel=address.channel,
            thread_ts=address.thread,
            text=text or " ",  # what notifications and screen readers show
            blocks=approval_blocks(text, approval_id),
            unfurl_links=False,
        )
        return str(result["ts"])

    async def settle_approval(self, address: Address, message_id: str, markdown: str) -> None:
        text = to_mrkdwn(markdown)
        await self._call(
            "chat.update",
            address,
            channel=address.channel,
            ts=message_id,
            text=text or " ",
            blocks=approval_blocks(text, None),
        )

    async def thinking(self, address: Address, on: bool) -> None:
        """An assistant-thread status where the app has the feature, else an `eyes` reaction."""
        if self._may_set_status(address):
            try:
                if await self._set_status(address, THINKING_STATUS if on else ""):
                    return
            except RateLimited:
                return  # the status comes back with the next call; no reaction meanwhile
        if address.reply_to:
            await self._react(address, on)

    async def show_status(self, address: Address, status: str) -> None:
        """While tools run in an assistant thread, Slack's own status line says which;
        "" goes back to "is thinking…" (the answer's delivery clears it)."""
        if self._may_set_status(address):
            with contextlib.suppress(RateLimited):
                await self._set_status(address, status or THINKING_STATUS)

    async def aclose(self) -> None:
        """Close the calls' shared session (its connections)."""
        await self.connections.aclose()

    def _may_set_status(self, address: Address) -> bool:
        """An assistant thread (a thread of the app's DM), while the app has the feature,
        or one whose status this sender set and has yet to clear."""
        key = (address.channel, address.thread or "")
        return is_assistant_thread(address) and (self.assistant_status or key in self._status_set)

    async def _set_status(self, address: Address, status: str) -> bool:
        """True when Slack took the status; raises RateLimited, and logs every other
        failure once (at debug: the reaction or the reply's own status line stands in)."""
        key = (address.channel, address.thread or "")
        try:
            client = await self._client(address)
            await client.assistant_threads_setStatus(
                channel_id=address.channel, thread_ts=address.thread or "", status=status
            )
        except SlackApiError as exc:
            self._dead_token(address, exc)
            error = core_error(exc)
            if isinstance(error, RateLimited):
                raise error from None
            code = exc.response.get("error") if isinstance(exc.response.data, dict) else None
            self._status_failed(str(code or exc.response.status_code))
            return False
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            self._status_failed(type(exc).__name__)
            return False
        if status:
            self._status_set.add(key)
        else:
            self._status_set.discard(key)
        return True

    def _status_failed(self, reason: str) -> None:
        if reason in _NO_ASSISTANT:
            self.assistant_status = False  # the app has no assistant feature: not tried again
        if reason not in self._status_failures:
            self._status_failures.add(reason)
            log.debug("assistant.threads.setStatus failed (%s); not shown natively", reason)

    async def _react(self, address: Address, on: bool) -> None:
        api_method = "reactions.add" if on else "reactions.remove"
        try:
            await self._call(
                api_method,
                address,
                channel=address.channel,
                timestamp=address.reply_to,
                name=THINKING_REACTION,
            )
        except PlatformError as exc:
            # Already there / already gone is the state we wanted.
            if "already_reacted" not in str(exc) and "no_reaction" not in str(exc):
                raise

    async def is_admin(self, address: Address, user_id: str, *, dm: bool) -> bool:
        """A workspace admin or owner (users.info, with the workspace's token), wherever
        they ask: settings by scope are the workspace's, so a DM gives no one more say."""
        found = await self._call("users.info", address, user=user_id)
        user = found.get("user") or {}
        return bool(user.get("is_admin") or user.get("is_owner"))

    async def _client(self, address: Address) -> AsyncWebClient:
        """The address's client, on this sender's shared session."""
        workspaces = self.workspaces
        client = self.client if workspaces is None else await workspaces.client(address.workspace)
        self.connections.attach(client)
        return client

    def _dead_token(self, address: Address, exc: SlackApiError) -> None:
        if self.workspaces is not None and isinstance(exc.response.data, dict):
            self.workspaces.forget_if_dead(address.workspace, str(exc.response.get("error")))

    async def _call(
        self,
        api_method: str,
        address: Address,
        *,
        refusal: Callable[[SlackApiError], PlatformError] = core_error,
        **kwargs: Any,
    ) -> Any:
        """Slack's `api_method` with the address's token; None arguments left out. A
        refusal is raised as `refusal` makes it (the core's error, by default)."""
        client = await self._client(address)
        method = getattr(client, api_method.replace(".", "_"))  # chat.update -> chat_update
        try:
            return await method(**{k: v for k, v in kwargs.items() if v is not None})
        except SlackApiError as exc:
            self._dead_token(address, exc)
            raise refusal(exc) from None
        except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise PlatformError(f"Slack {api_method} failed: {type(exc).__name__}") from None


def _posted_under(messages: list[dict[str, Any]] | None, key: str) -> str | None:
    """The `ts` of the message among `messages` that carries a reply's metadata for `key`."""
    for message in messages or []:
        metadata = message.get("metadata") or {}
        payload = metadata.get("event_payload") or {}
        if metadata.get("event_type") == REPLY_EVENT and payload.get("key") == key:
            return str(message["ts"])
    return None


def _seconds_after(ts: str) -> str:
    """The Slack timestamp LOOK_WINDOW seconds after `ts` (a look-up's `latest`)."""
    return f"{float(ts) + LOOK_WINDOW:.6f}"

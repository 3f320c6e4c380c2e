"""Slack's assistant threads: the prompts a new thread suggests, and its title.

Someone opens a new assistant thread (the app's split view: `assistant_thread_started`):
the thread is offered the suggested prompts of its scope (the setting
`suggested_prompts`, gateway/settings/prompts.py), the scope being the channel the
person is looking at when the event names one (its `context`), else the DM thread
itself; and the thread is noted as untitled (`Keys.untitled`, a week). Moving to
another channel with the thread still untouched (`assistant_thread_context_changed`)
offers that channel's prompts. The first message in the thread deletes the note, and
only the delivery whose DEL removed it calls assistant.threads.setTitle with that
message (one line, without mentions, at most TITLE_CHARS): a re-delivered event, a
second web process and the thread's second message all find no note.

Slack's newer agent messaging experience (an app whose manifest has `agent_view`
instead of `assistant_view`, https://docs.slack.dev/ai/migrating-to-agent-messaging/)
sends no `assistant_thread_started`: someone opening the app's DM is an
`app_home_opened` event on its `messages` tab, and the prompts are set for the DM
itself, without a `thread_ts` (with one, Slack drops the call for an agent app). Those
are the DM's scope's prompts (`slack:<team>:<DM>`), offered at each opening; Slack
sends that event only to an app subscribed to it, which the agent experience asks for.

Every call here runs after the event is acknowledged, as a task of this process
bounded by CALL_TIMEOUT (Slack wants the acknowledgement within 3 s), and a failure
(Slack down, `missing_scope` for `assistant:write`, a 429) is one log line and
nothing else: no retry, the thread just has no prompts or keeps Slack's title.

bolt's `Assistant` middleware is not used. It is made for apps whose listeners
answer the thread's messages themselves, while here every message goes through the
one ingest (`app.py`), and, mounted, it would also answer
`assistant_thread_context_changed` by default with a conversations.replies and a
chat.update before the acknowledgement, and acknowledge a thread's other message
events (edits, deletions) before the app's own listeners see them. What it would
give, a matcher on the event's type and a wrapper of slack_sdk's
assistant_threads_setSuggestedPrompts, is a line each here.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
from redis.asyncio import Redis
from redis.exceptions import RedisError
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.fields import Field, invalid, is_mapping, optional
from adapters.slack.inbound import CHANNEL_ID, PLATFORM, TEAM_ID, TS
from gateway.messages import Inbound
from gateway.settings.scoped import ScopedSettings
from gateway.state.keys import Keys

if TYPE_CHECKING:  # listeners' annotations only: a worker never loads bolt
    from slack_bolt.async_app import AsyncBoltContext

log = logging.getLogger(__name__)

CALL_TIMEOUT = 5.0  # seconds one call may take; it never holds an acknowledgement
UNTITLED_TTL = 7 * 24 * 3600  # a thread opened and left a week is titled by nobody
TITLE_CHARS = 60  # a title fits the thread list on one line
PROMPTS_HEADING = "Try asking"
# Slack's markup in a message's text: <@U…>, <#C…|name>, <!here>, <url|label>, <url>.
_USER_OR_SPECIAL = re.compile(r"<[@!][^>]*>")
_CHANNEL = re.compile(r"<#[A-Z0-9]+\|([^>]*)>")
_LINK = re.compile(r"<([^>|]+)(?:\|([^>]*))?>")


class AssistantThreads:
    """What the app does with assistant threads: prompts when one opens, a title from
    its first message; every Slack call in a task of its own."""

    def __init__(self, redis: Redis, scoped: ScopedSettings) -> None:
        self.redis = redis
        self.scoped = scoped
        self._tasks: set[asyncio.Task[None]] = set()

    async def on_started(
        self, body: dict[str, Any], context: AsyncBoltContext, client: AsyncWebClient
    ) -> None:
        """`assistant_thread_started`: noted untitled, and offered its scope's prompts."""
        thread = _thread(body, context)
        if thread is not None:
            self._spawn(self._started(thread, client))

    async def on_context_changed(
        self, body: dict[str, Any], context: AsyncBoltContext, client: AsyncWebClient
    ) -> None:
        """`assistant_thread_context_changed`: the new channel's prompts, while the thread
        has had no message yet."""
        thread = _thread(body, context)
        if thread is not None:
            self._spawn(self._context_changed(thread, client))

    async def on_home_opened(
        self, body: dict[str, Any], context: AsyncBoltContext, client: AsyncWebClient
    ) -> None:
        """`app_home_opened` on the Messages tab (the agent experience): the DM's prompts."""
        dm = _messages_tab(body, context)
        if dm is not None:
            self._spawn(self._offer(dm, client))

    def first_message(self, inbound: Inbound, client: AsyncWebClient) -> None:
        """After a message is taken in: when it opens an untitled assistant thread, the
        thread is titled with it."""
        title = thread_title(inbound.text)
        if inbound.is_dm and inbound.thread and title:
            key = f"{PLATFORM}:{inbound.workspace}:{inbound.channel}:{inbound.thread}"
            self._spawn(self._title(key, inbound.channel, inbound.thread, title, client))

    async def settled(self) -> None:
        """Every call started so far has finished (its outcome logged)."""
        while self._tasks:
            await asyncio.gather(*self._tasks)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        # The task is held until it ends: the loop itself keeps only a weak reference.
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # Not one of the failures a call expects (those are logged where they happen).
            log.error("slack: an assistant thread call failed", exc_info=task.exception())

    async def _started(self, thread: Thread, client: AsyncWebClient) -> None:
        try:
            await self.redis.set(Keys.untitled(thread.key), "1", ex=UNTITLED_TTL)
        except RedisError as exc:
            log.warning("slack: assistant thread %s not noted untitled: %s", thread.key, exc)
        await self._offer(thread, client)

    async def _context_changed(self, thread: Thread, client: AsyncWebClient) -> None:
        try:
            untouched = bool(await self.redis.exists(Keys.untitled(thread.key)))
        except RedisError as exc:
            log.warning("slack: assistant thread %s: %s", thread.key, exc)
            return
        if untouched:
            await self._offer(thread, client)

    async def _offer(self, thread: Thread, client: AsyncWebClient) -> None:
        try:
            await self.scoped.fresh()
        except RedisError as exc:
            log.warning("slack: suggested prompts for %s not read: %s", thread.key, exc)
            return
        prompts = self.scoped.resolve(thread.scope).suggested_prompts
        if not prompts:
            return
        shown = [{"title": p.title, "message": p.message} for p in prompts]
        await _call(
            "assistant.threads.setSuggestedPrompts",
            client.assistant_threads_setSuggestedPrompts(
                channel_id=thread.channel,
                thread_ts=thread.ts,  # None (left out) for the agent experience's DM
                title=PROMPTS_HEADING,
                prompts=shown,
            ),
        )

    async def _title(
        self, key: str, channel: str, ts: str, title: str, client: AsyncWebClient
    ) -> None:
        try:
            first = bool(await self.redis.delete(Keys.untitled(key)))
        except RedisError as exc:
            log.warning("slack: assistant thread %s not titled: %s", key, exc)
            return
        if first:
            await _call(
                "assistant.threads.setTitle",
                client.assistant_threads_setTitle(channel_id=channel, thread_ts=ts, title=title),
            )


class Thread:
    """An assistant thread an event names: the DM `channel` and its `ts` (None: the DM
    itself, in the agent experience), its session key, and the scope its prompts come
    from."""

    __slots__ = ("channel", "key", "scope", "ts")

    def __init__(self, workspace: str, channel: str, ts: str | None, viewed: str | None) -> None:
        self.channel, self.ts = channel, ts
        self.key = ":".join([PLATFORM, workspace, channel, *([ts] if ts else [])])
        self.scope = f"{PLATFORM}:{workspace}:{viewed}" if viewed else self.key


def _thread(body: Mapping[str, Any], context: AsyncBoltContext) -> Thread | None:
    """The thread of an assistant thread event; None (one log line) when malformed."""
    event = body.get("event") or {}
    thread = event.get("assistant_thread") if is_mapping(event) else None
    if invalid(PLATFORM, [("event.assistant_thread", thread, is_mapping)]):
        return None
    assert isinstance(thread, Mapping)
    viewed = thread.get("context") or {}
    workspace = context.team_id or body.get("team_id")
    fields: list[Field] = [
        ("team_id", workspace, TEAM_ID),
        ("assistant_thread.channel_id", thread.get("channel_id"), CHANNEL_ID),
        ("assistant_thread.thread_ts", thread.get("thread_ts"), TS),
        ("assistant_thread.context", viewed, is_mapping),
        ("assistant_thread.context.channel_id", viewed.get("channel_id"), optional(CHANNEL_ID)),
    ]
    if invalid(PLATFORM, fields):
        return None
    return Thread(
        str(workspace),
        str(thread["channel_id"]),
        str(thread["thread_ts"]),
        viewed.get("channel_id"),
    )


def _messages_tab(body: Mapping[str, Any], context: AsyncBoltContext) -> Thread | None:
    """The DM of an `app_home_opened` on the Messages tab; None for another tab (or a
    malformed event, with one log line)."""
    event = body.get("event") or {}
    if not is_mapping(event) or event.get("tab") != "messages":
        return None
    workspace = context.team_id or body.get("team_id")
    fields: list[Field] = [
        ("team_id", workspace, TEAM_ID),
        ("event.channel", event.get("channel"), CHANNEL_ID),
    ]
    if invalid(PLATFORM, fields):
        return None
    return Thread(str(workspace), str(event["channel"]), None, None)


def thread_title(text: str) -> str:
    """A thread's title from its first message: Slack's markup read as text (mentions
    dropped, a channel by its name, a link by its label), on one line, at most
    TITLE_CHARS characters."""
    text = _USER_OR_SPECIAL.sub(" ", text)
    text = _CHANNEL.sub(lambda m: f"#{m[1]}", text)
    text = _LINK.sub(lambda m: m[2] or m[1], text)
    line = " ".join(text.split())
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


async def _call(method: str, call: Coroutine[Any, Any, Any]) -> None:
    """One Slack call, bounded by CALL_TIMEOUT; a failure is one log line."""
    try:
        async with asyncio.timeout(CALL_TIMEOUT):
            await call
    except SlackApiError as exc:
        data = exc.response.data
        error = data.get("error") if isinstance(data, dict) else None
        log.warning("slack: %s failed: %s", method, error or exc.response.status_code)
    except (SlackClientError, aiohttp.ClientError, OSError, TimeoutError) as exc:
        log.warning("slack: %s failed: %s", method, type(exc).__name__)

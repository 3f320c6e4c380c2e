"""Inbound traffic the way the platforms deliver it, and the accounting of what came back.

Telegram updates are POSTed to `gateway web`'s webhook with the secret header;
Slack events are signed (`v0:timestamp:body`, HMAC-SHA256) and re-delivered
with `X-Slack-Retry-Num`. Each user message carries a tag (`q<session>x<n>`)
that the fake model echoes, with a `done-<tag>` marker at the very end, so a
reply is attributed to its message and a half reply is told from a whole one.

Telegram messages go to group chats, where the gateway answers as a reply to
the user's message: a bot message counts for the user message it replies to,
so two posted messages for one user message are a duplicate, while edits of
the same message are not.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx
from drill_stack import (
    ALICE,
    CUT_OFF_TEXT,
    FAILURE_TEXT,
    TELEGRAM_SECRET,
    Stack,
    done_marker,
    poll,
)

from tests.fakes.slack_api import TEAM_ID
from tests.fakes.telegram_api import Message
from tests.support.slack_helpers import event_body, mention, signed_headers

_update_ids = itertools.count(10_000)
_message_ids = itertools.count(100)
_slack_ts = itertools.count(1)
CONNECTION_FAILED = -1
NOT_SENT = -3  # the client itself refused the request (a header it may not send)


@dataclass
class Sent:
    """One user message a drill delivered, and when the gateway acknowledged it."""

    session: str
    chat: str  # the Telegram chat id or the Slack channel
    ref: str  # the Telegram message id or the Slack event's ts (its reply thread)
    tag: str
    statuses: list[int] = field(default_factory=list)
    acked_at: float | None = None

    @property
    def acked(self) -> bool:
        return self.acked_at is not None


def tag(session: int, number: int) -> str:
    return f"q{session}x{number}"


async def post(http: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str]) -> int:
    """The HTTP status, or CONNECTION_FAILED when no answer came."""
    try:
        return (await http.post(url, content=body, headers=headers)).status_code
    except httpx.LocalProtocolError:
        return NOT_SENT
    except httpx.HTTPError:
        return CONNECTION_FAILED


class Telegram:
    """Delivers updates to the webhook and reads the bot's replies off the fake."""

    def __init__(self, stack: Stack) -> None:
        self.stack, self.fake = stack, stack.telegram

    def session_key(self, chat_id: int) -> str:
        return f"telegram:{self.fake.bot_id}:{chat_id}"

    def group_update(
        self, chat_id: int, text: str, *, command: bool = False, user_id: int = ALICE
    ) -> dict[str, Any]:
        """A message in a group that addresses the bot (a mention, or a command to it)."""
        head = f"/btw@{self.fake.username}" if command else f"@{self.fake.username}"
        body = f"{head} {text}"
        entity = {"type": "bot_command" if command else "mention", "offset": 0, "length": len(head)}
        message = {
            "message_id": next(_message_ids),
            "date": int(time.time()),
            "from": {"id": user_id, "is_bot": False, "first_name": "Alice"},
            "chat": {"id": chat_id, "type": "supergroup", "title": "Drill"},
            "text": body,
            "entities": [entity],
        }
        return {"update_id": next(_update_ids), "message": message}

    def update(self, chat_id: int, text: str, *, command: bool = False) -> dict[str, Any]:
        """The update a message to the bot in `chat_id` arrives as (here: a group's)."""
        return self.group_update(chat_id, text, command=command)

    @staticmethod
    def direct_update(user_id: int, text: str) -> dict[str, Any]:
        """A private message from `user_id` (its chat id is the user id)."""
        user = {"id": user_id, "is_bot": False, "first_name": f"User{user_id}"}
        message = {
            "message_id": next(_message_ids),
            "date": int(time.time()),
            "from": user,
            "chat": {"id": user_id, "type": "private", "first_name": user["first_name"]},
            "text": text,
        }
        return {"update_id": next(_update_ids), "message": message}

    async def deliver(
        self, http: httpx.AsyncClient, update: dict[str, Any], *, secret: str = TELEGRAM_SECRET
    ) -> int:
        headers = {"content-type": "application/json", "X-Telegram-Bot-Api-Secret-Token": secret}
        return await post(
            http, self.stack.url("/telegram/webhook"), json.dumps(update).encode(), headers
        )

    async def send(
        self,
        http: httpx.AsyncClient,
        chat_id: int,
        label: str,
        *,
        copies: int = 1,
        retry_for: float = 0.0,
        command: bool = False,
    ) -> Sent:
        """Deliver one message (`copies` times at once); retry like Telegram until a 200."""
        update = self.update(chat_id, f"{label} please answer", command=command)
        sent = Sent(
            self.session_key(chat_id), str(chat_id), str(update["message"]["message_id"]), label
        )
        deadline = time.monotonic() + retry_for
        while True:
            statuses = await asyncio.gather(*(self.deliver(http, update) for _ in range(copies)))
            sent.statuses.extend(statuses)
            if 200 in statuses:
                sent.acked_at = time.monotonic()
                return sent
            if time.monotonic() > deadline:
                return sent
            await asyncio.sleep(0.25)  # Telegram's own pause before re-delivering

    def replies(self, sent: Sent) -> list[Message]:
        return self.fake.replies_to(int(sent.chat), int(sent.ref))

    def finished_at(self, sent: Sent) -> float | None:
        """When a reply to `sent` first showed its whole answer, the failure notice or the
        note that it was cut off."""
        times = [
            self.fake.first_time(m.chat_id, m.message_id, needle)
            for m in self.replies(sent)
            for needle in (done_marker(sent.tag), FAILURE_TEXT, CUT_OFF_TEXT)
        ]
        found = [t for t in times if t is not None]
        return min(found) if found else None


class TelegramPrivate(Telegram):
    """Private chats, one a user (the chat id is the user id), whose replies stream as drafts
    and end as one message: every message the bot posted into the chat is a reply, and a
    reply is mid-stream while a draft shows."""

    def update(self, chat_id: int, text: str, *, command: bool = False) -> dict[str, Any]:
        return self.direct_update(chat_id, text)

    def replies(self, sent: Sent) -> list[Message]:
        return self.fake.messages_in(int(sent.chat))

    def streaming(self, sent: Sent) -> bool:
        """A draft shows, or a message does (a reply edited in place after a refusal)."""
        return bool(self.fake.drafts_in(int(sent.chat)) or self.replies(sent))


class Slack:
    """Delivers signed Events API requests and reads the bot's thread replies off the fake."""

    def __init__(self, stack: Stack) -> None:
        self.stack, self.fake = stack, stack.slack

    async def send(
        self,
        http: httpx.AsyncClient,
        label: str,
        *,
        copies: int = 3,
        channel: str = "C1",
        retry_for: float = 0.0,
    ) -> Sent:
        """A mention at the top of a channel (a thread of its own), delivered `copies` times
        at once: the first as Slack sends it, the rest as its retries; delivered again
        (as Slack's retries, sooner) until a 2xx or `retry_for` seconds."""
        ts = f"1720000000.{next(_slack_ts):06d}"
        body = json.dumps(
            event_body(mention(f"{label} please answer", channel=channel, ts=ts))
        ).encode()
        url = self.stack.url("/slack/events")
        sent = Sent(f"slack:{TEAM_ID}:{channel}:{ts}", channel, ts, label)
        deadline = time.monotonic() + retry_for
        attempts = 0
        while True:
            statuses = await asyncio.gather(
                *(
                    post(http, url, body, signed_headers(body, retry=attempts + n or None))
                    for n in range(copies)
                )
            )
            attempts += copies
            sent.statuses.extend(statuses)
            if any(200 <= s < 300 for s in statuses):
                sent.acked_at = time.monotonic()
                return sent
            if time.monotonic() > deadline:
                return sent
            await asyncio.sleep(0.25)

    def replies(self, sent: Sent) -> list[Any]:
        return self.fake.thread_messages(sent.chat, sent.ref)

    def reacted(self) -> set[tuple[str, str]]:
        """The (channel, message ts) pairs that still carry a reaction of the bot's."""
        return {(channel, ts) for channel, ts, _ in self.fake.reactions}

    def finished_at(self, sent: Sent) -> float | None:
        times = [
            self.fake.first_time(m.ts, needle)
            for m in self.replies(sent)
            for needle in (done_marker(sent.tag), FAILURE_TEXT, CUT_OFF_TEXT)
        ]
        found = [t for t in times if t is not None]
        return min(found) if found else None


Finished = Callable[[Sent], float | None]


@dataclass
class Tally:
    """Per message: answered once, more than once, or not at all; and how fast."""

    trials: int = 0
    lost: int = 0
    duplicated: int = 0
    latencies: list[float] = field(default_factory=list)
    stuck: int = 0
    evidence: list[str] = field(default_factory=list)  # what Redis showed for the failures

    @property
    def worst(self) -> float | None:
        return max(self.latencies) if self.latencies else None

    def add(self, other: Tally) -> None:
        self.trials += other.trials
        self.lost += other.lost
        self.duplicated += other.duplicated
        self.latencies += other.latencies
        self.stuck += other.stuck
        self.evidence += other.evidence


async def wait_finished(sents: Iterable[Sent], finished: Finished, within: float) -> bool:
    acked = [s for s in sents if s.acked]
    return await poll(lambda: all(finished(s) is not None for s in acked), within, 0.1)


async def wait_posted(tg: Telegram | Slack, sents: Iterable[Sent], within: float) -> bool:
    """Until every acknowledged message has its first reply message posted (mid-stream)."""
    acked = [s for s in sents if s.acked]
    return await poll(lambda: all(tg.replies(s) for s in acked), within, 0.05)


def tally(sents: Iterable[Sent], finished: Finished, replies: Callable[[Sent], list[Any]]) -> Tally:
    """Lost: acknowledged, never answered. Duplicated: more than one posted reply."""
    result = Tally()
    for sent in sents:
        if not sent.acked:
            continue
        result.trials += 1
        done = finished(sent)
        if done is None:
            result.lost += 1
        else:
            assert sent.acked_at is not None
            result.latencies.append(done - sent.acked_at)
        if len(replies(sent)) > 1:
            result.duplicated += 1
    return result


@dataclass
class Row:
    """One line of the drill table; None where a column does not apply."""

    drill: str
    trials: int
    lost: int | None
    duplicated: int | None
    stuck: int | None
    worst: float | None
    verdict: str
    notes: list[str] = field(default_factory=list)


def verdict(ok: bool, figure: str) -> str:
    return f"{'met' if ok else 'MISSED'}: {figure}"


def typing_after(stack: Stack, chats: Iterable[str], since: float) -> list[str]:
    """Telegram chats that still got a typing action after `since` (a typing loop left on)."""
    wanted = {int(c) for c in chats}
    return sorted(
        {
            str(c.params.get("chat_id"))
            for c in stack.telegram.calls_to("sendChatAction")
            if c.at > since and c.params.get("chat_id") in wanted
        }
    )


async def observe_typing(stack: Stack, chats: Iterable[str]) -> list[str]:
    """Watch for one typing period (4.5 s on Telegram) after the work ended, then report
    the chats whose typing indicator was still being renewed."""
    since = time.monotonic() + 1.0  # a last action racing the final edit is not a loop
    await asyncio.sleep(6.0)  # an observation window: what is measured is what it holds
    return typing_after(stack, chats, since)

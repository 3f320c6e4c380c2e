"""A Sender that records what it is asked to post, as a platform would show it.

It stands at the far end of the Sender seam (where a platform API would be),
and can be told to answer "rate limited" to exercise the core's pacing.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.errors import RateLimited, StreamRefused
from gateway.messages import Address
from gateway.ports import Limits, Step


@dataclass
class Call:
    op: str
    message_id: str
    text: str
    final: bool
    at: float
    address: Address | None = None
    key: str | None = None  # a post's idempotency key (Sender.send)


@dataclass
class RecordingSender:
    platform: str = "test"
    max_length: int = 4000
    edit_interval: float = 0.0
    chat_interval: float | None = None
    rate_limit_next: list[float] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    messages: dict[str, str] = field(default_factory=dict)
    thinking_calls: list[bool] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    # Approval requests apart from replies: approval id -> message id, message id -> text.
    asked: dict[str, str] = field(default_factory=dict)
    approval_texts: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._ids = itertools.count(1)

    def limits(self, address: Address) -> Limits:
        return Limits(self.max_length, self.edit_interval, self.chat_interval)

    def measure(self, markdown: str) -> int:
        return len(markdown)

    async def send(
        self,
        address: Address,
        markdown: str,
        *,
        final: bool,
        key: str | None = None,
        feedback: bool = False,
    ) -> str:
        self._maybe_limit()
        message_id = str(next(self._ids))
        self._record("send", message_id, markdown, final, address, key)
        return message_id

    async def edit(
        self,
        address: Address,
        message_id: str,
        markdown: str,
        *,
        final: bool,
        feedback: bool = False,
    ) -> None:
        self._maybe_limit()
        self._record("edit", message_id, markdown, final, address)

    async def thinking(self, address: Address, on: bool) -> None:
        self.thinking_calls.append(on)
        self.changed.set()

    async def ask_approval(self, address: Address, markdown: str, approval_id: str) -> str:
        message_id = str(next(self._ids))
        self.asked[approval_id] = message_id
        self.approval_texts[message_id] = markdown
        self.calls.append(Call("ask", message_id, markdown, True, time.monotonic(), address))
        self.changed.set()
        return message_id

    async def settle_approval(self, address: Address, message_id: str, markdown: str) -> None:
        self.approval_texts[message_id] = markdown
        self.calls.append(Call("settle", message_id, markdown, True, time.monotonic(), address))
        self.changed.set()

    async def aclose(self) -> None:
        return None

    def _maybe_limit(self) -> None:
        if self.rate_limit_next:
            self.calls.append(Call("429", "", "", False, time.monotonic()))
            raise RateLimited(self.rate_limit_next.pop(0))

    def _record(
        self,
        op: str,
        message_id: str,
        text: str,
        final: bool,
        address: Address,
        key: str | None = None,
    ) -> None:
        assert len(text) <= self.max_length, "the core sent more than the platform allows"
        self.calls.append(Call(op, message_id, text, final, time.monotonic(), address, key))
        self.messages[message_id] = text
        self.changed.set()

    async def wait_for(self, predicate: object, timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():  # type: ignore[operator]
                self.changed.clear()
                await self.changed.wait()


@dataclass
class LiveCall:
    op: str  # "show" or "close"
    live: int  # which live message (0, 1, ... in the order opened)
    text: str
    steps: tuple[Step, ...]
    at: float
    feedback: bool = False


class RecordingLive:
    """A LiveMessage of RecordingNativeSender: what it was shown, as the platform would show it."""

    def __init__(self, owner: RecordingNativeSender, number: int, recipient: str) -> None:
        self.owner, self.number, self.recipient = owner, number, recipient
        self.message_id: str | None = None
        self.interval, self.refresh = owner.live_interval, owner.live_refresh
        self.closed = False

    async def show(self, markdown: str, steps: Sequence[Step]) -> None:
        self.owner.before_live_call("show")
        assert not self.closed, "shown after it was closed"
        assert len(markdown) <= self.owner.max_length, "more than the platform allows"
        if self.owner.live_has_id:
            self.message_id = self.message_id or str(next(self.owner._ids))
            self.owner.messages[self.message_id] = markdown
        self.owner.live_calls.append(
            LiveCall("show", self.number, markdown, tuple(steps), time.monotonic())
        )
        self.owner.changed.set()

    async def close(self, markdown: str, steps: Sequence[Step], *, feedback: bool) -> str:
        self.owner.before_live_call("close")
        assert not self.closed, "closed twice"
        self.closed = True
        message_id = self.message_id or str(next(self.owner._ids))
        self.message_id = message_id
        self.owner.messages[message_id] = markdown
        self.owner.live_calls.append(
            LiveCall("close", self.number, markdown, tuple(steps), time.monotonic(), feedback)
        )
        self.owner.changed.set()
        return message_id


@dataclass
class RecordingNativeSender(RecordingSender):
    """A RecordingSender with a streaming surface of its own ("live"): like Slack's stream
    when `live_has_id` (the live message is a message from its first show), like Telegram's
    draft otherwise. `refuse_at` names the live calls (by their number, counted from 1
    across every live message) answered with StreamRefused."""

    live_has_id: bool = True
    live_interval: float = 0.0
    live_refresh: float | None = None
    refuse_at: set[int] = field(default_factory=set)
    refuse_for_channel: bool = True
    live_calls: list[LiveCall] = field(default_factory=list)
    lives: list[RecordingLive] = field(default_factory=list)
    closed_streams: list[str] = field(default_factory=list)
    _live_count: int = 0

    def native_mechanism(self, address: Address) -> str | None:
        return "live"

    def open_live(
        self, address: Address, *, recipient: str, key: str | None = None
    ) -> RecordingLive:
        live = RecordingLive(self, len(self.lives), recipient)
        self.lives.append(live)
        return live

    async def close_live(self, address: Address, message_id: str) -> None:
        self.closed_streams.append(message_id)
        for live in self.lives:
            if live.message_id == message_id:
                live.closed = True

    def before_live_call(self, op: str) -> None:
        self._maybe_limit()
        self._live_count += 1
        if self._live_count in self.refuse_at:
            self.calls.append(Call(f"refused {op}", "", "", False, time.monotonic()))
            raise StreamRefused("not_here", for_channel=self.refuse_for_channel)

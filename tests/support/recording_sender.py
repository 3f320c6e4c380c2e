"""A Sender that records what it is asked to post, as a platform would show it.

It stands at the far end of the Sender seam (where a platform API would be),
and can be told to answer "rate limited" to exercise the core's pacing.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from dataclasses import dataclass, field

from gateway.errors import RateLimited
from gateway.messages import Address
from gateway.ports import Limits


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

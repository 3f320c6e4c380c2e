"""Getting text onto a platform: streamed edits, splitting, and the per-chat send budget.

A reply streams as one message edited in place, no more often than the
platform allows, and continues in further messages past the platform's
length limit. When the platform says "wait" (RateLimited), intermediate edits
are dropped and the latest text goes out after the wait: the final text is
always delivered. Platforms that ban per chat get a budget shared by every
worker through Redis, so two workers cannot together exceed it.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.errors import LeaseLost, PlatformError, RateLimited
from gateway.model import Address
from gateway.ports import Limits, Sender
from gateway.scripts import load
from gateway.store import Keys

log = logging.getLogger(__name__)
T = TypeVar("T")
Measure = Callable[[str], int]

_FENCE = re.compile(r"^\s*(```+|~~~+)(.*)$")
_BREAKS = (re.compile("\n\n"), re.compile("\n"), re.compile(" "))  # the best first
FINAL_ATTEMPTS = 30
MAX_WAIT = 900.0


# --- splitting -------------------------------------------------------------------------------


def split_markdown(text: str, limit: int, measure: Measure = len) -> list[str]:
    """Split `text` into pieces whose measure is at most `limit`.

    Cuts at a paragraph break, else a line break, else a space, else anywhere,
    preferring a piece that measures at least half the limit. A code block that
    has to be cut is closed at the end of one piece and reopened (same info
    string) at the start of the next, so every piece renders on its own.

    A streamed reply is split on every flush, on the worker's event loop, and
    `measure` renders what it measures: the cut is found by measuring a few heads
    about a piece long (see `_Cutter`), never the whole rest of the text per try.
    """
    pieces: list[str] = []
    rest, ratio = text, 1.0
    while rest:
        cutter = _Cutter(rest, limit, measure, ratio)
        if cutter.whole_fits():
            pieces.append(rest)
            break
        head, rest = cutter.cut()
        ratio = cutter.ratio
        if head:
            pieces.append(head)
    return pieces or [""]


class _Cutter:
    """Where to cut one piece off the front of `text`, found with few measures.

    The search takes a longer head to measure no less than a shorter one (near
    enough true of every renderer): it guesses the cut from the heads measured so
    far (at first from `ratio`, the characters per unit of measure of the last
    piece), then measures the guess and its neighbour; bisection steps keep the
    worst case logarithmic. Each head is measured at most once, and the cut
    returned is one whose head was measured and fits.
    """

    def __init__(self, text: str, limit: int, measure: Measure, ratio: float) -> None:
        self.text, self.limit, self.measure = text, limit, measure
        self.ratio = ratio
        self.measured: dict[int, int] = {}
        # The shortest head known not to fit, and its measure (None: not measured).
        self.too_long = len(text) + 1
        self.too_long_measure: int | None = None
        self.fences: list[str | None] = []
        self.fenced_to = 0

    def whole_fits(self) -> bool:
        """Whether all of the text fits. Heads of growing length are measured first,
        so a long text is found too long without rendering all of it."""
        size = int(self.limit * self.ratio * 1.25) + 64
        while size < len(self.text):
            if not self.fits(size):
                return False
            size *= 2
        whole = self.measure(self.text)
        if whole <= self.limit:
            return True
        self.too_long, self.too_long_measure = len(self.text), whole
        return False

    def cut(self) -> tuple[str, str]:
        for pattern in _BREAKS:
            best = self.largest_fitting(self.breaks(pattern))
            if best is not None and self.measured[best] >= self.limit // 2:
                return self.finish(best)
        return self.finish(self.largest_fitting(range(1, self.too_long)) or 1)

    def breaks(self, pattern: re.Pattern[str]) -> list[int]:
        """Positions just after each `pattern` in the part of the text that may fit."""
        return [match.end() for match in pattern.finditer(self.text, 0, self.too_long)]

    def largest_fitting(self, positions: Sequence[int]) -> int | None:
        low, high = -1, len(positions)  # positions[low] fits; positions[high] does not
        step = 0
        while high - low > 1:
            guessing = step < 2 or step % 2 == 1
            middle = self.guess(positions, low, high) if guessing else (low + high) // 2
            if self.fits(positions[middle]):
                low = middle
            else:
                high = middle
            step += 1
        return positions[low] if low >= 0 else None

    def guess(self, positions: Sequence[int], low: int, high: int) -> int:
        """The index between `low` and `high` where the head should just fit, by
        interpolating between the nearest heads measured."""
        low_at, low_measure = 0, 0
        if low >= 0:
            low_at, low_measure = positions[low], self.measured[positions[low]]
        if high < len(positions):
            high_at, high_measure = positions[high], self.measured.get(positions[high])
        else:
            high_at, high_measure = self.too_long, self.too_long_measure
        if high_measure is not None and high_measure > low_measure:
            per_unit = (high_at - low_at) / (high_measure - low_measure)
        else:
            per_unit = self.ratio
        index = bisect.bisect_right(positions, low_at + (self.limit - low_measure) * per_unit) - 1
        return min(max(index, low + 1), high - 1)

    def fits(self, position: int) -> bool:
        if position >= self.too_long:
            return False
        if position not in self.measured:
            head = _head(self.text, position, self.fences_to(position))
            self.measured[position] = self.measure(head)
        if self.measured[position] <= self.limit:
            return True
        self.too_long, self.too_long_measure = position, self.measured[position]
        return False

    def finish(self, position: int) -> tuple[str, str]:
        fences = self.fences_to(position)
        head, tail = _head(self.text, position, fences), _tail(self.text, position, fences)
        if len(tail) >= len(self.text):  # a reopened fence longer than the cut: cut plainly
            head, tail = self.text[:position].rstrip(), self.text[position:]
        if position in self.measured:
            self.ratio = min(max(position / max(self.measured[position], 1), 0.05), 20.0)
        return (head if head.strip() else ""), tail

    def fences_to(self, position: int) -> list[str | None]:
        """Fence states of the lines up to `position` (a line's state depends only on
        the lines before it, so the text past `position` need not be read)."""
        if position > self.fenced_to:
            self.fenced_to = max(position, 2 * self.fenced_to)
            self.fences = _fence_states(self.text[: self.fenced_to])
        return self.fences


def _head(text: str, position: int, fences: list[str | None]) -> str:
    """The piece before a cut at `position`, closing a code block that spans it."""
    fence = fences[text.count("\n", 0, position)]
    if fence is None:
        return text[:position].rstrip()
    marker = _FENCE.match(fence)
    closing = marker.group(1) if marker else "```"
    return f"{text[:position].rstrip()}\n{closing}"


def _tail(text: str, position: int, fences: list[str | None]) -> str:
    """The text after a cut at `position`, reopening a code block that spans it."""
    fence = fences[text.count("\n", 0, position)]
    tail = text[position:].lstrip("\n")
    return tail if fence is None else f"{fence}\n{tail}"


def _fence_states(text: str) -> list[str | None]:
    """For each line, the opening fence line of the code block it lies inside (or None)."""
    states: list[str | None] = []
    open_fence: str | None = None
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if match and open_fence is None:
            states.append(None)
            open_fence = line.strip()
            continue
        if match and open_fence is not None and not match.group(2).strip():
            states.append(open_fence)
            open_fence = None
            continue
        states.append(open_fence)
    # position at the very end of a line belongs to that line; one extra slot for safety
    states.append(open_fence)
    return states


# --- the shared send budget ------------------------------------------------------------------


class SendBudget:
    """Per-chat pacing shared by every worker: one Redis key per chat, its next free time."""

    def __init__(self, redis: Redis) -> None:
        self._acquire = load("pace_acquire").bind(redis)
        self._ban = load("pace_ban").bind(redis)

    async def acquire(self, chat_key: str, interval: float) -> float:
        """Take a send slot: 0 when granted, else the seconds to wait before asking again."""
        wait_ms = await self._acquire(
            keys={"budget": Keys.budget(chat_key)}, args={"interval_ms": int(interval * 1000)}
        )
        return int(wait_ms) / 1000.0

    async def ban(self, chat_key: str, seconds: float) -> None:
        """Nothing goes to this chat, from any worker, for `seconds`."""
        await self._ban(
            keys={"budget": Keys.budget(chat_key)}, args={"wait_ms": int(seconds * 1000) + 1}
        )


# --- delivering ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    """The outcome of a paced call: whether it went out, and what it returned."""

    ok: bool
    value: T | None = None


class Channel:
    """One address on one platform, with its limits and pacing."""

    def __init__(self, sender: Sender, address: Address, budget: SendBudget | None) -> None:
        self.sender = sender
        self.address = address
        self.limits: Limits = sender.limits(address)
        self.budget = budget if self.limits.chat_interval is not None else None
        self.not_before = 0.0

    def split(self, text: str) -> list[str]:
        return split_markdown(text, self.limits.max_length, self.sender.measure)

    async def wait_turn(self, *, final: bool) -> bool:
        """Wait (final) or decline (intermediate) while the platform or budget says wait."""
        while True:
            delay = self.not_before - time.monotonic()
            if delay <= 0 and self.budget is not None:
                assert self.limits.chat_interval is not None
                delay = await self.budget.acquire(self.address.chat_key, self.limits.chat_interval)
            if delay <= 0:
                return True
            if not final:
                return False
            await asyncio.sleep(min(delay, MAX_WAIT))

    async def call(self, operation: Callable[[], Awaitable[T]], *, final: bool) -> Done[T]:
        """Run one platform call within the pacing; `Done.ok` is False when it was skipped."""
        for _ in range(FINAL_ATTEMPTS if final else 1):
            if not await self.wait_turn(final=final):
                return Done(False)
            try:
                return Done(True, await operation())
            except RateLimited as exc:
                await self.rate_limited(exc.retry_after)
                if not final:
                    return Done(False)
        raise PlatformError(f"gave up on {self.address.chat_key} after {FINAL_ATTEMPTS} waits")

    async def rate_limited(self, retry_after: float) -> None:
        log.warning("rate limited in %s: waiting %.1fs", self.address.chat_key, retry_after)
        self.not_before = time.monotonic() + retry_after
        if self.budget is not None:
            await self.budget.ban(self.address.chat_key, retry_after)


async def deliver(
    sender: Sender, address: Address, text: str, budget: SendBudget | None = None
) -> list[str]:
    """Post a complete text (a notice, a side answer), split as needed. Returns message ids."""
    channel = Channel(sender, address, budget)
    ids: list[str] = []
    for piece in channel.split(text):
        done = await channel.call(
            lambda p=piece: sender.send(address, p, final=True),  # type: ignore[misc]
            final=True,
        )
        if done.value is not None:
            ids.append(done.value)
    return ids


class ReplyStream:
    """A main reply, streamed into one message edited in place (and continuations).

    `known_ids` are the messages an earlier run of the same turn already posted:
    they are edited, never posted again. `on_ids` is called whenever a new
    message is posted, so a re-run after a crash finds them; ids it could not
    store (Redis away) are stored again at the next flush. `may_post`, asked
    before each new message, says whether this run still holds its turn: a run
    that lost it posts nothing new, since the run that took over could not know
    that message's id.
    """

    def __init__(
        self,
        sender: Sender,
        address: Address,
        *,
        budget: SendBudget | None,
        known_ids: list[str],
        on_ids: Callable[[list[str]], Awaitable[None]],
        on_flush: Callable[[str], Awaitable[None]] | None = None,
        may_post: Callable[[], Awaitable[bool]] | None = None,
    ) -> None:
        self.channel = Channel(sender, address, budget)
        self.sender, self.address = sender, address
        self.ids = list(known_ids)
        self.sent: list[str | None] = [None] * len(self.ids)
        self.text = ""
        self.status = ""
        self._on_ids, self._on_flush, self._may_post = on_ids, on_flush, may_post
        self._ids_unsaved = False
        self._dirty = asyncio.Event()
        self._closing = asyncio.Event()
        self._last_flush = 0.0
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._keep_thinking()))
        if self.channel.limits.edit_interval < float("inf"):
            self._tasks.append(asyncio.create_task(self._pump()))

    def feed(self, piece: str) -> None:
        self.text += piece
        if self.text.strip():
            self._dirty.set()

    def set_status(self, status: str) -> None:
        """A line shown under the text until it changes (a tool running); "" clears it."""
        if status != self.status:
            self.status = status
            self._dirty.set()

    @property
    def shown(self) -> str:
        """What the message shows now: the text, and the status line under it."""
        if not self.status:
            return self.text
        return f"{self.text.rstrip()}\n\n{self.status}" if self.text.strip() else self.status

    async def finish(self, text: str) -> list[str]:
        """Deliver the final text, waiting out any rate limit. Returns the message ids."""
        self.text, self.status = text, ""
        await self._stop_tasks()
        await self._flush(final=True)
        await self._thinking(False)
        return self.ids

    async def abandon(self) -> None:
        await self._stop_tasks()
        await self._thinking(False)

    async def _stop_tasks(self) -> None:
        # The helpers stop at their next step instead of being cancelled, so no
        # platform or Redis call is ever cut off halfway.
        self._closing.set()
        self._dirty.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _pause(self, seconds: float) -> None:
        """Sleep, but wake up early when the stream is closing."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), max(seconds, 0.0))

    async def _pump(self) -> None:
        interval = self.channel.limits.edit_interval
        while not self._closing.is_set():
            await self._dirty.wait()
            delay = max(self._last_flush + interval, self.channel.not_before) - time.monotonic()
            await self._pause(delay)
            if self._closing.is_set():
                return
            self._dirty.clear()
            try:
                await self._flush(final=False)
            except PlatformError as exc:
                log.warning("edit failed in %s: %s", self.address.chat_key, exc)
            except LeaseLost:
                return  # the run stops; what it posted stays as it is
            except RedisError as exc:  # pacing or the ids' store: the next flush tries again
                log.warning("flush in %s interrupted by Redis: %s", self.address.chat_key, exc)
                self._dirty.set()
            self._last_flush = time.monotonic()

    async def _flush(self, *, final: bool) -> None:
        if self._ids_unsaved:
            await self._save_ids()
        pieces = self.channel.split(self.shown)
        for index, piece in enumerate(pieces):
            if index < len(self.ids):
                if self.sent[index] == piece:
                    continue
                done = await self.channel.call(
                    lambda i=index, p=piece: self.sender.edit(  # type: ignore[misc]
                        self.address, self.ids[i], p, final=final
                    ),
                    final=final,
                )
                if not done.ok:
                    self._dirty.set()
                    return
                self.sent[index] = piece
            else:
                if self._may_post is not None and not await self._may_post():
                    raise LeaseLost(f"not posting to {self.address.chat_key}: the turn moved on")
                posted = await self.channel.call(
                    lambda p=piece: self.sender.send(self.address, p, final=final),  # type: ignore[misc]
                    final=final,
                )
                if not posted.ok or posted.value is None:
                    self._dirty.set()
                    return
                self.ids.append(posted.value)
                self.sent.append(piece)
                self._ids_unsaved = True
                await self._save_ids()
        if self._on_flush is not None and not final:
            await self._on_flush(self.text)

    async def _save_ids(self) -> None:
        await self._on_ids(list(self.ids))
        self._ids_unsaved = False

    async def _keep_thinking(self) -> None:
        interval = self.channel.limits.typing_interval
        while not self.ids and not self._closing.is_set():
            await self._thinking(True)
            if interval is None:
                return
            await self._pause(interval)

    async def _thinking(self, on: bool) -> None:
        if time.monotonic() < self.channel.not_before:
            return  # nothing at all goes to a chat that asked us to wait
        try:
            await self.sender.thinking(self.address, on)
        except PlatformError as exc:
            log.debug("thinking signal failed in %s: %s", self.address.chat_key, exc)

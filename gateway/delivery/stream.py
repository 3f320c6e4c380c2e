"""Getting text onto a platform: streamed edits and continuations, within the chat's pacing
(`pacing.py`).

A reply streams as one message edited in place, no more often than the
platform allows, and continues in further messages past the platform's
length limit. When the platform says "wait" (RateLimited), intermediate edits
are dropped and the latest text goes out after the wait: the final text is
always delivered. Platforms that ban per chat get a pace shared by every
worker through Redis, so two workers cannot together exceed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from gateway.delivery.pacing import PacedChat, SendPacing
from gateway.errors import LeaseLost, PlatformError
from gateway.messages import Address
from gateway.ports import PostFinder, Sender

log = logging.getLogger(__name__)
Find = Callable[[Address, str], Awaitable[str | None]]  # a post's id from its key, or None


async def deliver(
    sender: Sender,
    address: Address,
    text: str,
    pacing: SendPacing | None = None,
    *,
    key: str | None = None,
    find: Find | None = None,
) -> list[str]:
    """Post a complete text (a notice, a side answer), split as needed. Returns message ids.

    `key`, the same on every run of the job, names each piece's post (as a reply's
    `post_key` does); `find` (a re-run's, where the sender can find its posts) is asked
    for each piece first, and a piece its predecessor posted is not posted again.
    """
    chat = PacedChat(sender, address, pacing)
    ids: list[str] = []
    for index, piece in enumerate(chat.split(text)):
        piece_key = None if key is None else f"{key}:{index}"
        if (found := await earlier_post(find, address, piece_key)) is not None:
            ids.append(found)
            continue
        attempt = await chat.call(
            lambda p=piece, k=piece_key: sender.send(  # type: ignore[misc]
                address, p, final=True, key=k
            ),
            final=True,
        )
        if attempt.value is not None:
            ids.append(attempt.value)
    return ids


def finder(sender: Sender, rerun: bool) -> Find | None:
    """How a re-run finds what its predecessor posted, where the platform lets it."""
    return sender.find_post if rerun and isinstance(sender, PostFinder) else None


async def earlier_post(find: Find | None, address: Address, key: str | None) -> str | None:
    """The message an earlier run posted under `key`, when `find` is given and finds one.
    A look-up that fails is a miss: posting again is the lesser harm than a message
    never shown."""
    if find is None or key is None:
        return None
    try:
        found = await find(address, key)
    except PlatformError as exc:
        log.warning("could not look for %s's earlier post: %s", address.chat_key, exc)
        return None
    if found is not None:
        log.info("%s: a re-run found its predecessor's message %s", address.chat_key, found)
    return found


class ReplyStream:
    """A main reply, streamed into one message edited in place (and continuations).

    `known_ids` are the messages an earlier run of the same turn already posted:
    they are edited, never posted again. `on_ids` is called whenever a new
    message is posted, so a re-run after a crash finds them; ids it could not
    store (Redis away) are stored again at the next flush. `may_post`, asked
    before each new message, says whether this run still holds its turn: a run
    that lost it posts nothing new, since the run that took over could not know
    that message's id. `post_key`, the same on every run of the turn, names each
    message the stream posts (`Sender.send`'s `key`): where the platform makes
    such a post idempotent, a post whose answer was lost, to a crash or the
    network, is not posted twice. `find` (a re-run's, where the sender can find its
    posts) is asked for each message before it is posted: one its predecessor posted
    but could not record is edited instead of posted again.
    """

    def __init__(
        self,
        sender: Sender,
        address: Address,
        *,
        pacing: SendPacing | None,
        known_ids: list[str],
        on_ids: Callable[[list[str]], Awaitable[None]],
        on_flush: Callable[[str], Awaitable[None]] | None = None,
        may_post: Callable[[], Awaitable[bool]] | None = None,
        post_key: str | None = None,
        find: Find | None = None,
    ) -> None:
        self.chat = PacedChat(sender, address, pacing)
        self.post_key, self._find = post_key, find
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
        self._flushing = asyncio.Lock()  # the pump, `posted` and `finish` never overlap

    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._keep_thinking()))
        if self.chat.limits.edit_interval < float("inf"):
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

    async def posted(self) -> None:
        """Post what is shown now and store its message's id, when nothing is posted yet.

        Called before something a crash can cut off (a tool call): a run that takes
        the turn over then edits that message instead of posting a second one.
        """
        if self.ids or not self.shown.strip():
            return
        try:
            await self._flush(final=False)
        except PlatformError as exc:
            log.warning("could not post to %s: %s", self.address.chat_key, exc)

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
        interval = self.chat.limits.edit_interval
        while not self._closing.is_set():
            await self._dirty.wait()
            delay = max(self._last_flush + interval, self.chat.not_before) - time.monotonic()
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
        async with self._flushing:
            await self._flush_now(final=final)

    async def _flush_now(self, *, final: bool) -> None:
        if self._ids_unsaved:
            await self._save_ids()
        pieces = self.chat.split(self.shown)
        for index, piece in enumerate(pieces):
            if index >= len(self.ids):
                if self._may_post is not None and not await self._may_post():
                    raise LeaseLost(f"not posting to {self.address.chat_key}: the turn moved on")
                key = None if self.post_key is None else f"{self.post_key}:{index}"
                if not await self._found(key):
                    posted = await self.chat.call(
                        lambda p=piece, k=key: self.sender.send(  # type: ignore[misc]
                            self.address, p, final=final, key=k
                        ),
                        final=final,
                    )
                    if not posted.ok or posted.value is None:
                        self._dirty.set()
                        return
                    self.ids.append(posted.value)
                    self.sent.append(piece)
                    self._ids_unsaved = True
                    await self._save_ids()
                    continue
                self.sent.append(None)  # found: stored, then edited to what it should show
                self._ids_unsaved = True
                await self._save_ids()
            if self.sent[index] == piece:
                continue
            attempt = await self.chat.call(
                lambda i=index, p=piece: self.sender.edit(  # type: ignore[misc]
                    self.address, self.ids[i], p, final=final
                ),
                final=final,
            )
            if not attempt.ok:
                self._dirty.set()
                return
            self.sent[index] = piece
        if self._on_flush is not None and not final:
            await self._on_flush(self.text)

    async def _found(self, key: str | None) -> bool:
        """Whether the platform holds the message `key` names (a re-run only): its id
        is then the next of `ids`."""
        found = await earlier_post(self._find, self.address, key)
        if found is not None:
            self.ids.append(found)
        return found is not None

    async def _save_ids(self) -> None:
        await self._on_ids(list(self.ids))
        self._ids_unsaved = False

    async def _keep_thinking(self) -> None:
        interval = self.chat.limits.typing_interval
        while not self.ids and not self._closing.is_set():
            await self._thinking(True)
            if interval is None:
                return
            await self._pause(interval)

    async def _thinking(self, on: bool) -> None:
        if time.monotonic() < self.chat.not_before:
            return  # nothing at all goes to a chat that asked us to wait
        try:
            await self.sender.thinking(self.address, on)
        except PlatformError as exc:
            log.debug("thinking signal failed in %s: %s", self.address.chat_key, exc)

"""Getting text onto a platform: streamed edits and continuations, within the chat's pacing
(`pacing.py`), or the platform's own streaming surface (`LiveMessage`).

A reply streams as one message edited in place, no more often than the
platform allows, and continues in further messages past the platform's
length limit. Where the platform has a streaming surface of its own and the
mechanism chosen for the reply (`mechanism.py`) is it, the same text goes
through that surface instead, under the same pacing, and a refusal of it at
any point carries the reply on edited in place, the text complete.

When the platform says "wait" (RateLimited), intermediate edits are dropped
and the latest text goes out after the wait: the final text is always
delivered. Platforms that ban per chat get a pace shared by every worker
through Redis, so two workers cannot together exceed it.

Long because: `ReplyStream` writes one reply by either mechanism, and a refusal
moves it from the live message to edits midway, on the same ids, sent pieces,
pacing and flush lock: the two halves only make sense read together.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from gateway.delivery.mechanism import EDIT
from gateway.delivery.pacing import PacedChat, SendPacing
from gateway.errors import LeaseLost, PlatformError, StreamRefused
from gateway.messages import Address
from gateway.ports import LiveMessage, NativeStreams, PostFinder, Sender, StatusSender, Step

log = logging.getLogger(__name__)
# How long a reply may take to show its first text before the thinking signal goes out:
# an answer that starts sooner needs none (a reaction, a status line or "typing" shown
# for half a second before the text replaces it is noise, and two calls).
THINKING_GRACE = 1.0
Find = Callable[[Address, str], Awaitable[str | None]]  # a post's id from its key, or None
Refused = Callable[[str, StreamRefused], Awaitable[None]]  # a mechanism, and its refusal


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
    """A main reply, streamed into one message edited in place (and continuations), or
    through the platform's own streaming surface (`mechanism`, not EDIT).

    `known_ids` are the messages an earlier run of the same turn already posted:
    they are edited, never posted again (the last one first closed, where the
    platform streams: its run may have died while it streamed). `on_ids` is called
    whenever a new message is posted, so a re-run after a crash finds them; ids it could not
    store (Redis away) are stored again at the next flush. `on_flush` is told the text
    after each flush that showed it, with the ids when that flush posted the message
    (then stored by that call, not by `on_ids`: one call, not two). `may_post`, asked
    before each new message, says whether this run still holds its turn: a run
    that lost it posts nothing new, since the run that took over could not know
    that message's id. `post_key`, the same on every run of the turn, names each
    message the stream posts (`Sender.send`'s `key`): where the platform makes
    such a post idempotent, a post whose answer was lost, to a crash or the
    network, is not posted twice. `find` (a re-run's, where the sender can find its
    posts) is asked for each message before it is posted: one its predecessor posted
    but could not record is edited instead of posted again.

    Natively, `recipient` is the asker, whom the platform streams to; `on_refused` is
    told of a refusal of the surface (`Mechanisms.refused`), after which the reply goes
    on edited in place: what the live message showed is completed by edits (Slack's
    stream, closed first), or posted (a Telegram draft, which is no message). `feedback`
    asks for the feedback buttons under the reply's last message. The thinking signal
    goes out only when nothing is shown `thinking_grace` seconds after `start`.
    """

    def __init__(
        self,
        sender: Sender,
        address: Address,
        *,
        pacing: SendPacing | None,
        known_ids: list[str],
        on_ids: Callable[[list[str]], Awaitable[None]],
        on_flush: Callable[[str, list[str] | None], Awaitable[None]] | None = None,
        may_post: Callable[[], Awaitable[bool]] | None = None,
        post_key: str | None = None,
        find: Find | None = None,
        mechanism: str = EDIT,
        recipient: str = "",
        on_refused: Refused | None = None,
        feedback: bool = False,
        thinking_grace: float = THINKING_GRACE,
    ) -> None:
        self.chat = PacedChat(sender, address, pacing)
        self.post_key, self._find = post_key, find
        self.sender, self.address = sender, address
        self.ids = list(known_ids)
        self.sent: list[str | None] = [None] * len(self.ids)
        self.text = ""
        self.status = ""
        self.steps: dict[str, Step] = {}
        self.feedback = feedback
        self._on_ids, self._on_flush, self._may_post = on_ids, on_flush, may_post
        self._on_refused = on_refused
        self._ids_unsaved = False
        self._dirty = asyncio.Event()
        self._closing = asyncio.Event()
        self._last_flush = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._flushing = asyncio.Lock()  # the pump, `posted` and `finish` never overlap
        self._recipient = recipient
        self._live: LiveMessage | None = None
        self._live_index = 0  # the piece of the text the live message holds
        self._live_sent: tuple[str, tuple[Step, ...]] | None = None  # what it shows
        self._refresh_due = False
        self._thinking_grace = thinking_grace
        self._thinking_shown = False  # the signal went out, so it is cleared at the end
        self._unclosed: str | None = None  # a message to close before it is edited
        native = sender if isinstance(sender, NativeStreams) else None
        if native is not None and self.ids:
            self._unclosed = self.ids[-1]  # its run may have died while it streamed
        self.mechanism = EDIT
        if native is not None and mechanism != EDIT and not self.ids:
            self.mechanism = mechanism
            self._live = native.open_live(address, recipient=recipient, key=self._key(0))

    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._keep_thinking()))
        if self.chat.limits.edit_interval < float("inf"):
            self._tasks.append(asyncio.create_task(self._pump()))

    def feed(self, piece: str) -> None:
        self.text += piece
        if self.text.strip():
            self._dirty.set()

    def set_status(self, status: str) -> None:
        """A line shown under the text until it changes (a tool running); "" clears it.
        A live message shows the steps instead."""
        if status != self.status:
            self.status = status
            if self._live is None:
                self._dirty.set()

    def set_step(self, step: Step) -> None:
        """A tool call's place on the reply's timeline, where the platform draws one
        (a live message); edited in place, the status line says what runs."""
        if self.steps.get(step.id) != step:
            self.steps[step.id] = step
            if self._live is not None:
                self._dirty.set()

    async def platform_status(self, status: str) -> None:
        """The platform's own status line, where it has one (a tool running; "" goes back
        to thinking): cleared with the thinking signal when the reply ends."""
        if isinstance(self.sender, StatusSender):
            self._thinking_shown = True
            await self.sender.show_status(self.address, status)

    @property
    def shown(self) -> str:
        """What the message shows now: the text, and (edited in place) the status line
        under it."""
        if not self.status or self._live is not None:
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
        if self.ids or not (self.shown.strip() or (self._live is not None and self.steps)):
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

    def _interval(self) -> float:
        return self._live.interval if self._live is not None else self.chat.limits.edit_interval

    async def _changed(self) -> None:
        """Until there is something to show, or a live message must be shown again to
        stay (`LiveMessage.refresh`)."""
        live = self._live
        if live is None or live.refresh is None or self._live_sent is None:
            await self._dirty.wait()
            return
        try:
            await asyncio.wait_for(self._dirty.wait(), live.refresh)
        except TimeoutError:
            self._refresh_due = True  # shown again as it is: it keeps the message alive
            self._dirty.set()

    async def _pump(self) -> None:
        while not self._closing.is_set():
            await self._changed()
            delay = max(self._last_flush + self._interval(), self.chat.not_before)
            await self._pause(delay - time.monotonic())
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
        if self._live is not None:
            try:
                if await self._flush_live(final=final) and self._on_flush and not final:
                    await self._show_progress()
                return
            except StreamRefused as exc:
                await self._fall_back(exc)
        await self._close_unclosed()
        if await self._flush_edits(final=final) and self._on_flush is not None and not final:
            await self._show_progress()

    async def _show_progress(self) -> None:
        """The text shown so far, and the message ids when this flush posted one: one
        call (`on_flush`)."""
        assert self._on_flush is not None
        ids = list(self.ids) if self._ids_unsaved else None
        await self._on_flush(self.text, ids)
        if ids is not None:
            self._ids_unsaved = False

    def _stores_later(self, *, final: bool) -> bool:
        """Whether a post that ends this flush leaves its id to `_show_progress`, which
        follows at once: it is stored with the text, one call instead of two."""
        return not final and self._on_flush is not None

    async def _flush_edits(self, *, final: bool) -> bool:
        """Edit in place: each piece posted once, then edited; False when a call was
        skipped (a rate-limit wait), to be tried at the next flush."""
        pieces = self.chat.split(self.shown)
        for index, piece in enumerate(pieces):
            last = final and index == len(pieces) - 1
            if index >= len(self.ids):
                await self._may_post_now()
                key = self._key(index)
                if not await self._found(key):
                    posted = await self.chat.call(
                        lambda p=piece, k=key, f=last: self.sender.send(  # type: ignore[misc]
                            self.address, p, final=final, key=k, feedback=f and self.feedback
                        ),
                        final=final,
                    )
                    if not posted.ok or posted.value is None:
                        self._dirty.set()
                        return False
                    self.ids.append(posted.value)
                    self.sent.append(piece)
                    self._ids_unsaved = True
                    if not (index == len(pieces) - 1 and self._stores_later(final=final)):
                        await self._save_ids()
                    continue
                self.sent.append(None)  # found: stored, then edited to what it should show
                self._ids_unsaved = True
                await self._save_ids()
            if self.sent[index] == piece and not (last and self.feedback):
                continue  # (the last message gets its feedback buttons with its final edit)
            attempt = await self.chat.call(
                lambda i=index, p=piece, f=last: self.sender.edit(  # type: ignore[misc]
                    self.address, self.ids[i], p, final=final, feedback=f and self.feedback
                ),
                final=final,
            )
            if not attempt.ok:
                self._dirty.set()
                return False
            self.sent[index] = piece
        return True

    async def _flush_live(self, *, final: bool) -> bool:
        """Through the live message: each piece past the length limit closes it and opens
        the next; the last piece shown, or (final) closed with the feedback buttons.
        False when a call was skipped."""
        live = self._live
        assert live is not None
        pieces = self.chat.split(self.text) or [""]
        steps = tuple(self.steps.values())
        for index in range(self._live_index, len(pieces)):
            piece = pieces[index]
            if index < len(pieces) - 1 or final:
                last = index == len(pieces) - 1
                if not live.message_id and not (self._live_sent or piece.strip()):
                    break  # nothing was ever shown, nor is there anything to close with
                if self._live_sent is None:
                    await self._may_post_now()
                shown = steps if last else ()
                closed = await self.chat.call(
                    functools.partial(live.close, piece, shown, feedback=last and self.feedback),
                    final=final,
                )
                if not closed.ok or closed.value is None:
                    self._dirty.set()
                    return False
                await self._record(index, closed.value, piece)
                if last:
                    return True
                live = self._next_live()
                continue
            if not (piece.strip() or steps):
                return True
            if self._live_sent == (piece, steps) and not self._refresh_due:
                return True
            if self._live_sent is None:
                await self._may_post_now()
            attempt = await self.chat.call(functools.partial(live.show, piece, steps), final=False)
            if not attempt.ok:
                self._dirty.set()
                return False
            self._live_sent, self._refresh_due = (piece, steps), False
            if live.message_id is not None and len(self.ids) == index:
                # (a re-run closes it, then edits)
                await self._record(
                    index, live.message_id, None, store=not self._stores_later(final=False)
                )
        return True

    def _next_live(self) -> LiveMessage:
        assert isinstance(self.sender, NativeStreams)
        self._live_index += 1
        key = self._key(self._live_index)
        self._live = self.sender.open_live(self.address, recipient=self._recipient, key=key)
        self._live_sent, self._refresh_due = None, False
        return self._live

    def _key(self, index: int) -> str | None:
        """The key of the reply's message `index` (`Sender.send`'s), the same on every run."""
        return None if self.post_key is None else f"{self.post_key}:{index}"

    async def _record(
        self, index: int, message_id: str, sent: str | None, *, store: bool = True
    ) -> None:
        """Message `index` is `message_id`, showing `sent`; stored (now, or with the
        flush's progress when not `store`) unless that was known already."""
        if index < len(self.ids):
            changed = self.ids[index] != message_id
            self.ids[index], self.sent[index] = message_id, sent
        else:
            changed = True
            self.ids.append(message_id)
            self.sent.append(sent)
        self._ids_unsaved = self._ids_unsaved or changed
        if self._ids_unsaved and store:
            await self._save_ids()

    async def _fall_back(self, error: StreamRefused) -> None:
        """The platform refused its surface: the reply goes on edited in place. A live
        message that is a message (Slack's stream) is closed, then edited to the text."""
        live, mechanism = self._live, self.mechanism
        self._live, self._live_sent, self.mechanism = None, None, EDIT
        if live is not None and live.message_id is not None:
            self._unclosed = live.message_id
        if self._on_refused is not None:
            await self._on_refused(mechanism, error)

    async def _close_unclosed(self) -> None:
        """Close the live message a refusal, or a run that died, left streaming: best
        effort, since one that no longer streams is edited all the same."""
        message_id, self._unclosed = self._unclosed, None
        if message_id is None or not isinstance(self.sender, NativeStreams):
            return
        try:
            await self.sender.close_live(self.address, message_id)
        except PlatformError as exc:
            log.warning("%s: could not close stream %s: %s", self.address.chat_key, message_id, exc)

    async def _may_post_now(self) -> None:
        if self._may_post is not None and not await self._may_post():
            raise LeaseLost(f"not posting to {self.address.chat_key}: the turn moved on")

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
        await self._pause(self._thinking_grace)
        while not self.ids and self._live_sent is None and not self._closing.is_set():
            self._thinking_shown = True
            await self._thinking(True)
            if interval is None:
                return
            await self._pause(interval)

    async def _thinking(self, on: bool) -> None:
        if not (on or self._thinking_shown):
            return  # never shown: nothing to clear
        if time.monotonic() < self.chat.not_before:
            return  # nothing at all goes to a chat that asked us to wait
        try:
            await self.sender.thinking(self.address, on)
        except PlatformError as exc:
            log.debug("thinking signal failed in %s: %s", self.address.chat_key, exc)

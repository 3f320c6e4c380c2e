"""Starting a turn's model call while its claim is still on the way.

A worker that answered a session's last turn still holds what that turn was
compiled from. When the job of the next message says nothing has changed since
(the same reset epoch and history length, no turn running, no injections
waiting, this one message in the inbox) and the job reached the worker while
it was waiting for work (not from a backlog, where more messages may have
joined it), the worker compiles from that copy and
starts the model call at once; the claim, sent at the same time, brings back
the real snapshot. The call is kept only when the request compiled from the
snapshot is exactly the one already sent. Otherwise it is cancelled, and since
nothing of it is shown or recorded before the claim is held, nobody sees it.

What it saves is the claim's round trip to Redis in front of the model call.

    EarlyStarts.start(job) -> EarlyStart (its EarlyCall running) -> claim returns
        -> EarlyStarts.adopt(...): kept, or cancelled -> the turn
        -> EarlyStarts.remember(...): the view the turn left, for the next job
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace

from gateway.messages import Address
from gateway.models import ResponseChain, Usage
from gateway.state.jobs import Job
from gateway.state.session import Claim, Entry, HistoryView
from gateway.turn.chains import Chains, previous_id
from gateway.turn.prepare import PreparedTurn, Preparer

log = logging.getLogger(__name__)

RECENT_SESSIONS = 512  # sessions whose last view one worker keeps
# ... and about how many bytes all those views may hold: an entry's text, plus what a
# parsed entry costs besides it (its dict, ids, speaker and address: about 1.5 KB,
# measured with tracemalloc on short messages). Bounded so, a worker's memory stops
# growing once the cache is full, however long its conversations get.
RECENT_BYTES = 4_000_000
ENTRY_BYTES = 1_500


class RecentViews:
    """The last view each recently answered session was left with, by history base.

    A base is `epoch.length`: the session's reset epoch and its history's
    length once the turn was recorded. A job carries the base it was enqueued
    on, so a view from another base is never used.
    """

    def __init__(self, size: int = RECENT_SESSIONS, held: int = RECENT_BYTES) -> None:
        self.size, self.held_limit = size, held
        self._views: OrderedDict[str, tuple[str, HistoryView, int]] = OrderedDict()
        self._held = 0  # characters of text in the kept views

    def remember(self, session_key: str, base: str, view: HistoryView) -> None:
        self.forget(session_key)
        weight = sum(len(str(entry.get("text") or "")) + ENTRY_BYTES for entry in view.entries)
        if weight > self.held_limit:
            return
        self._views[session_key] = (base, view, weight)
        self._held += weight
        while len(self._views) > self.size or self._held > self.held_limit:
            _, (_, _, dropped) = self._views.popitem(last=False)
            self._held -= dropped

    def forget(self, session_key: str) -> None:
        found = self._views.pop(session_key, None)
        if found is not None:
            self._held -= found[2]

    def get(self, session_key: str, base: str) -> HistoryView | None:
        """The view at `base`; an empty one for an empty history."""
        if base.rpartition(".")[2] == "0":
            return HistoryView({}, [], 0, [])
        found = self._views.get(session_key)
        if found is None or found[0] != base:
            return None
        self._views.move_to_end(session_key)
        return found[1]

    def __len__(self) -> int:
        return len(self._views)


class EarlyCall:
    """A model stream whose first piece is already being fetched.

    `pieces()` yields it and the rest, once; `cancel()` stops the call (its
    model process, if any, is told) and makes `pieces()` unusable.
    """

    def __init__(self, pieces: AsyncIterator[str]) -> None:
        self._pieces = aiter(pieces)
        self._first = asyncio.create_task(self._fetch_first())
        self.cancelled = False

    async def _fetch_first(self) -> str:
        return await anext(self._pieces)

    async def pieces(self) -> AsyncIterator[str]:
        assert not self.cancelled
        try:
            first = await self._first
        except StopAsyncIteration:
            return
        yield first
        async for piece in self._pieces:
            yield piece

    async def cancel(self) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        self._first.cancel()
        await asyncio.gather(self._first, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._pieces.aclose()  # type: ignore[attr-defined]


Pieces = Callable[[PreparedTurn, Usage, ResponseChain | None], AsyncIterator[str]]


@dataclass
class EarlyStart:
    """A model call started before the claim, from the view the last turn left."""

    prepared: PreparedTurn
    chain: ResponseChain | None
    usage: Usage
    call: EarlyCall
    settings_version: int | None = None  # of the settings by scope it started under

    @property
    def kept(self) -> bool:
        """Not cancelled (yet): after `adopt`, whether the turn goes on with this call."""
        return not self.call.cancelled


class EarlyStarts:
    """Starts, adopts and remembers early calls; shared by all of one worker's turns."""

    def __init__(self, preparer: Preparer, chains: Chains, pieces: Pieces) -> None:
        self.preparer, self.chains, self.pieces = preparer, chains, pieces
        self.recent = RecentViews()  # what each session's last turn here left

    def start(self, job: Job) -> EarlyStart | None:
        """Compile from the view the last turn left and start the model call, when the
        job says the session is still as that turn left it."""
        base, user = job.payload.get("base"), job.payload.get("entry")
        if not isinstance(base, str) or not isinstance(user, dict) or not user.get("reply"):
            return None
        if not job.fresh:
            return None  # it waited in a backlog: more messages may have joined it since
        if not self.preparer.ready:
            return None
        view = self.recent.get(job.session_key, base)
        if view is None or any(e.get("attachments") for e in [*view.entries, user]):
            return None  # files are read after the claim (gateway.media): nothing to compare
        view = replace(view, entries=[*view.entries, user])
        address = Address.model_validate(user["reply"])
        context = self.preparer.context(job.session_key, view, user, address, [])
        prepared = self.preparer.compile(context, view)
        if self.preparer.known_over_budget(prepared):
            return None  # it compresses first; unknown is checked once the claim is back
        usage, chain = Usage(), self.chains.start(prepared.request, prepared.view)
        return EarlyStart(prepared, chain, usage, EarlyCall(self.pieces(prepared, usage, chain)))

    async def adopt(self, key: str, early: EarlyStart | None, prepared: PreparedTurn) -> None:
        """Keep the early call only if it sent exactly the request the claimed snapshot
        compiles to; otherwise cancel it."""
        if early is None or not early.kept:
            return
        chain = self.chains.start(prepared.request, prepared.view)
        same = early.prepared.request == prepared.request and early.prepared.model == prepared.model
        if not same or previous_id(early.chain) != previous_id(chain):
            log.info("%s changed since its last turn here; restarting the model call", key)
            await early.call.cancel()

    def remember(
        self,
        key: str,
        claim: Claim,
        view: HistoryView,
        entry: Entry | None,
        fields: dict[str, str] | None,
        recorded: bool,
    ) -> None:
        """Keep the view this turn (compiled from `view`) leaves, for the next early start."""
        if not recorded:
            self.recent.forget(key)
            return
        extra = [entry] if entry is not None else []
        meta = {**view.meta, **(fields or {})}
        left = replace(view, meta=meta, entries=[*view.entries, *extra])
        self.recent.remember(key, f"{claim.epoch}.{claim.length + len(extra)}", left)

    def forget(self, key: str) -> None:
        self.recent.forget(key)

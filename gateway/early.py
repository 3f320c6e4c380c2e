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
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator

from gateway.session import HistoryView

RECENT_SESSIONS = 512  # sessions whose last view one worker keeps
RECENT_CHARS = 16_000_000  # ... and the characters of text all those views may hold


class RecentViews:
    """The last view each recently answered session was left with, by history base.

    A base is `epoch.length`: the session's reset epoch and its history's
    length once the turn was recorded. A job carries the base it was enqueued
    on, so a view from another base is never used.
    """

    def __init__(self, size: int = RECENT_SESSIONS, chars: int = RECENT_CHARS) -> None:
        self.size, self.chars = size, chars
        self._views: OrderedDict[str, tuple[str, HistoryView, int]] = OrderedDict()
        self._held = 0  # characters of text in the kept views

    def remember(self, session_key: str, base: str, view: HistoryView) -> None:
        self.forget(session_key)
        weight = sum(len(str(entry.get("text") or "")) for entry in view.entries)
        if weight > self.chars:
            return
        self._views[session_key] = (base, view, weight)
        self._held += weight
        while len(self._views) > self.size or self._held > self.chars:
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

"""Long conversations: planning and writing summarised segments.

When a session's compiled view passes its allowance, the oldest part of it (all
but the newest entries, which stay verbatim) is summarised by the compression
model into a *segment*: the ids and positions of its first and last entries,
the summary, when and by which model. Segments are contiguous and never
overlap: each starts right after the one before. Each summary is written on
top of the previous one, so the newest segment stands for the whole
compressed past and the view stays one summary plus a bounded tail however
long the history grows.

When the summariser fails, a *fallback* segment records how many messages
were left out, so the turn still fits; the next compression that succeeds
replaces it (it summarises the fallback's range again).

One Redis lock per session (`SET NX PX` with a token) keeps two workers from
compressing the same session at once; the segment is written only while the
lock is still ours and the session was not reset meanwhile.

Whether a request fits its allowance is `gateway.context.tokens`' to tell; which range a
segment covers is `gateway.context.segments`'; what the summariser is asked (and the
fallback's text) is `gateway.context.summary`'s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

from redis.asyncio import Redis

from gateway.context.segments import Plan, Segment, plan_segment
from gateway.context.summary import fallback_summary, summary_request
from gateway.context.tokens import RequestShape, TokenCounter, token_allowance, window_share
from gateway.errors import ModelError
from gateway.models import Charge, ModelCall, Models
from gateway.settings.env import Settings
from gateway.state.keys import Keys
from gateway.state.lease import Lease
from gateway.state.scripts import load
from gateway.state.session import Entry, HistoryView, SessionStore

log = logging.getLogger(__name__)

THRESHOLD_SHARE = 0.8  # after a turn, compress past this share of the allowance
SUMMARY_MAX_TOKENS = 1024
MAX_ROUNDS = 8  # compressions in a row before a turn goes ahead anyway
LOCK_WAIT = 30.0  # seconds a turn waits for another worker's compression


class CompressionResult(StrEnum):
    """What one compression attempt did."""

    SUMMARISED = "summarised"
    FALLBACK = "fallback"
    NOTHING = "nothing"  # nothing left to compress (or it already fits)
    BUSY = "busy"  # another worker holds the lock
    LOST = "lost"  # the lock expired or the session was reset meanwhile


class Compressor:
    """Compresses sessions: before a turn when it must, after a turn when it should."""

    def __init__(self, settings: Settings, redis: Redis, models: Models) -> None:
        self.settings = settings
        self.redis = redis
        self.models = models
        self.sessions = SessionStore(redis)
        self.counter = TokenCounter(models, settings.model)
        self._store = load("store_segment").bind(redis)
        self._warm = False
        self.background: set[asyncio.Task[int]] = set()  # what `schedule` started, running

    async def warm(self) -> None:
        """Look up the models' windows, once, off the event loop (litellm's import can
        take seconds; on the loop it would stall every other turn's heartbeat).

        The tokenizer is not loaded here: the first count loads it, in a thread (of
        the model process, or of this one without model processes). Most requests
        are known to fit by their size in bytes and are never counted, and its
        tables hold 40 MB in the process that counts.
        """
        if not self._warm:
            for model in {self.settings.model, self.settings.compression_model}:
                await self.models.window(model)
            self._warm = True

    @property
    def warmed(self) -> bool:
        return self._warm

    @property
    def allowance(self) -> int:
        return token_allowance(self.settings, self.models)

    @property
    def threshold(self) -> int:
        return int(self.allowance * THRESHOLD_SHARE)

    @property
    def summary_tokens(self) -> int:
        return max(64, min(SUMMARY_MAX_TOKENS, self.allowance // 4))

    @property
    def transcript_chars(self) -> int:
        # What the summariser reads must fit its own window (about 3 characters a token).
        return 3 * window_share(self.models, self.settings.compression_model)

    async def tokens(self, view: HistoryView, group: bool, reminder: str | None = None) -> int:
        shape = RequestShape(self.settings.system_prompt, view, group, reminder)
        await self.counter.ensure(shape)
        return self.counter.count(shape)

    async def within(self, limit: int, shape: RequestShape) -> bool:
        """Whether the request `shape` describes fits `limit` tokens (counted only near it)."""
        known = self.known_within(limit, shape)
        if known is not None:
            return known
        await self.counter.ensure(shape)
        return self.counter.within(limit, shape)

    def known_within(self, limit: int, shape: RequestShape) -> bool | None:
        """`within`, when it can be told without counting anything new; else None."""
        bound = self.counter.bound(shape)
        if bound is not None and bound <= limit:
            return True
        if self.counter.missing(shape):
            return None
        return self.counter.within(limit, shape)

    async def fit(
        self,
        session_key: str,
        group: bool,
        reminder: str | None,
        limit: int,
        allowance: int | None = None,
        system_prompt: str | None = None,
    ) -> int:
        """Before a turn: compress until the request fits the allowance (the session's, by
        scope, when given) or nothing is left.

        Waits for another worker's compression of the session rather than
        racing it. Returns how many segments were written.
        """
        written = 0
        deadline = time.monotonic() + LOCK_WAIT
        while written < MAX_ROUNDS:
            view = await self.sessions.view(session_key)
            prompt = system_prompt or self.settings.system_prompt
            shape = RequestShape(prompt, view, group, reminder)
            if await self.within(allowance or self.allowance, shape):
                break
            outcome = await self.compress(session_key, limit)
            if outcome is CompressionResult.BUSY:
                if time.monotonic() > deadline:
                    log.warning("gave up waiting for the compression of %s", session_key)
                    break
                await asyncio.sleep(0.05)
                continue
            if outcome not in (CompressionResult.SUMMARISED, CompressionResult.FALLBACK):
                break
            written += 1
        return written

    async def after_turn(
        self,
        session_key: str,
        group: bool,
        threshold: int | None = None,
        system_prompt: str | None = None,
    ) -> int:
        """Off the hot path: compress while the view is past the threshold (the session's
        by scope, when given).

        Another worker already compressing the session is left to it.
        """
        written = 0
        while written < MAX_ROUNDS:
            view = await self.sessions.view(session_key)
            shape = RequestShape(system_prompt or self.settings.system_prompt, view, group)
            if await self.within(threshold or self.threshold, shape):
                break
            answered = int(view.meta.get("answered") or 0)
            outcome = await self.compress(session_key, answered)
            if outcome not in (CompressionResult.SUMMARISED, CompressionResult.FALLBACK):
                break
            written += 1
        return written

    async def compress(self, session_key: str, limit: int) -> CompressionResult:
        """One segment, under the session's lock, planned from the state read under it."""
        lock = Lease(self.redis, Keys.compressing(session_key), self.settings.lease_ttl)
        if not await lock.acquire():
            return CompressionResult.BUSY
        async with lock.kept():  # renewed while the summariser works; freed if this worker dies
            view = await self.sessions.view(session_key)
            plan = plan_segment(view, limit)
            if plan is None:
                return CompressionResult.NOTHING
            segment = await self._segment(session_key, plan)
            epoch = view.meta.get("epoch", "0")
            if not await self._write(session_key, lock.token, epoch, plan, segment):
                log.info("compression of %s discarded: the session changed", session_key)
                return CompressionResult.LOST
            return CompressionResult.FALLBACK if segment.fallback else CompressionResult.SUMMARISED

    async def _segment(self, session_key: str, plan: Plan) -> Segment:
        entries = plan.entries
        if plan.replaces is not None:
            entries = await self.sessions.history(session_key, int(plan.replaces["first_index"]))
            entries = entries[: plan.last_index - int(plan.replaces["first_index"]) + 1]
        first_index = int(plan.replaces["first_index"]) if plan.replaces else plan.first_index
        started = time.monotonic()
        summary, fallback = await self._summarise(session_key, plan.previous, entries)
        log.info(
            "compressed %d messages of %s into a %s segment in %.2fs",
            len(entries),
            session_key,
            "fallback" if fallback else "summary",
            time.monotonic() - started,
        )
        return Segment(
            first_id=str(entries[0].get("id", "")),
            last_id=str(entries[-1].get("id", "")),
            first_index=first_index,
            last_index=plan.last_index,
            summary=summary,
            created_at=time.time(),
            model="" if fallback else self.settings.compression_model,
            fallback=fallback,
            messages=len(entries),
        )

    async def _summarise(
        self, session_key: str, previous: dict[str, Any] | None, entries: list[Entry]
    ) -> tuple[str, bool]:
        """(summary, is_fallback): the model's summary, or the note of what was left out."""
        call = ModelCall(
            self.settings.compression_model,
            summary_request(previous, entries, self.transcript_chars),
            self.settings.model_timeout,
            max_tokens=self.summary_tokens,
            temperature=0.2,
            charge=Charge(session_key, "", "compression"),
        )
        try:
            text, _ = await self.models.complete(call)
        except ModelError as exc:
            log.warning(
                "summarising %s failed (%s); leaving messages out instead", session_key, exc
            )
            return fallback_summary(previous, len(entries)), True
        if not text.strip():
            log.warning(
                "the summariser returned nothing for %s; leaving messages out instead", session_key
            )
            return fallback_summary(previous, len(entries)), True
        return text.strip(), False

    async def _write(
        self, session_key: str, token: str, epoch: str, plan: Plan, segment: Segment
    ) -> bool:
        keys = {
            "lock": Keys.compressing(session_key),
            "segments": Keys.segments(session_key),
            "meta": Keys.meta(session_key),
        }
        args = {
            "token": token,
            "epoch": epoch,
            "replace": "1" if plan.replaces is not None else "0",
            "segment": _json(segment.to_dict()),
            "history_start": segment.last_index + 1,
        }
        return bool(await self._store(keys=keys, args=args))

    def schedule(
        self,
        session_key: str,
        view: HistoryView,
        group: bool,
        entry: Entry | None,
        changed: Callable[[str], None],
        allowance: int | None = None,
        system_prompt: str | None = None,
    ) -> None:
        """After a recorded turn (`view` and its reply `entry`): compress off the hot path
        once the history passed the threshold (of `allowance` and the `system_prompt`, the
        session's by scope, when given).

        `changed(session_key)` is called when the session's view may have moved since
        (a segment was written, or the compression failed part way).
        """
        extra = [entry] if entry is not None else []
        threshold = int(allowance * THRESHOLD_SHARE) if allowance else self.threshold
        prompt = system_prompt or self.settings.system_prompt
        shape = RequestShape(prompt, view, group, extra=extra)
        if self.known_within(threshold, shape):
            return

        async def compress() -> int:
            if await self.within(threshold, shape):
                return 0  # counted: still short of the threshold
            return await self.after_turn(session_key, group, threshold, prompt)

        task = asyncio.create_task(compress())
        self.background.add(task)

        def done(finished: asyncio.Task[int]) -> None:
            self.background.discard(finished)
            if finished.cancelled():
                return
            error = finished.exception()
            if error is not None:
                log.error(
                    "compressing %s after its turn failed: %r", session_key, error, exc_info=error
                )
            if error is not None or finished.result():
                changed(session_key)

        task.add_done_callback(done)


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, ensure_ascii=False)

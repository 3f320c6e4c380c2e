"""One main turn: take the lease, compile, stream the model's reply, record it once."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

from redis.exceptions import RedisError

from gateway.compiler import CompiledRequest, MessageCompiler, ReplyTarget, TurnContext
from gateway.compression import Compressor
from gateway.config import Settings
from gateway.delivery import ReplyStream, SendBudget
from gateway.early import EarlyCall, RecentViews
from gateway.errors import (
    LeaseLost,
    ModelBadResponse,
    ModelError,
    ModelStalled,
    PlatformError,
    ProviderStateLost,
)
from gateway.jobs import Job, JobQueue
from gateway.lease import Lease
from gateway.metrics import Metrics
from gateway.model import Address
from gateway.models import ModelCall, Models, ResponseChain, Usage
from gateway.models.providers import is_stateful
from gateway.ports import Sender
from gateway.session import Claim, Entry, Finish, HistoryView, SessionStore, assistant_entry
from gateway.store import Keys
from gateway.tokens import RequestShape

log = logging.getLogger(__name__)

LEASE_LOST = "lease lost"
STOPPED_NOTE = "\n\n_(stopped)_"
EMPTY_REPLY = "_(the model returned an empty answer)_"


@dataclass
class RunningTurn:
    """What the worker needs to stop a turn from outside (a /stop, a lost lease)."""

    session_key: str
    lease: Lease
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str = ""

    def request_stop(self, reason: str) -> None:
        self.reason = self.reason or reason
        self.stop.set()


@dataclass
class TurnResult:
    text: str
    error: ModelError | None = None
    stopped: bool = False


@dataclass
class PreparedTurn:
    """A turn's compiled request and what it was compiled from."""

    compiler: MessageCompiler
    context: TurnContext
    request: CompiledRequest
    view: HistoryView


@dataclass
class EarlyStart:
    """A model call started before the claim, from the view the last turn left."""

    prepared: PreparedTurn
    chain: ResponseChain | None
    usage: Usage
    call: EarlyCall


class TurnRunner:
    """Runs main turns; shared by all of one worker's concurrent jobs."""

    def __init__(
        self,
        settings: Settings,
        sessions: SessionStore,
        queue: JobQueue,
        models: Models,
        senders: dict[str, Sender],
        budget: SendBudget,
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.sessions, self.queue, self.models = sessions, queue, models
        self.senders, self.budget, self.metrics = senders, budget, metrics
        self.ttl = settings.lease_ttl
        self.running: dict[str, RunningTurn] = {}  # by session, for /stop
        self.compressor = Compressor(settings, sessions.redis, models)
        self.stateful = is_stateful(settings.model)
        self.background: set[asyncio.Task[int]] = set()  # compressions after turns
        self.recent = RecentViews()  # what each session's last turn here left

    async def run(self, job: Job) -> None:
        """Answer everything the session has past its `answered` mark, under its lease.

        Returns once the turn is recorded (or there was nothing to record); raises
        when it could not record, so the job is left pending for a re-run.
        """
        key = job.session_key
        lease = Lease(self.sessions.redis, Keys.lease(key), self.ttl)
        try:
            early = self._start_early(job)
        except Exception as exc:  # a job with a payload of the wrong shape: start as usual
            log.warning("%s: no early start for job %s (%r)", key, job.id, exc)
            early = None
        try:
            claim = await self._claim(job, lease, early)
            if not claim.has_work:
                await lease.release()
                return
            running = self.running[key] = RunningTurn(key, lease)
            try:
                # The finishing script releases the lease as it records; any other
                # exit gives it up here, so a re-run need not wait out its TTL.
                async with lease.kept(release=False):
                    await self._answer(key, lease.token, claim, running, early)
            except BaseException:
                with contextlib.suppress(RedisError):
                    await lease.release()
                raise
            finally:
                if self.running.get(key) is running:
                    del self.running[key]
                running.done.set()
        finally:
            if early is not None:
                await early.call.cancel()

    async def give_up(self, job: Job) -> Address | None:
        """Mark what the session's turn had to answer as answered, recording no reply
        (a turn that failed on every delivery). Returns where to tell the user."""
        lease = Lease(self.sessions.redis, Keys.lease(job.session_key), self.ttl)
        claim = await self._claim(job, lease)
        if not claim.has_work or claim.view is None:
            await lease.release()
            return None
        user = _last_user(claim.view.entries[max(0, claim.answered - claim.view.start) :])
        recorded = await self._record(job.session_key, lease.token, claim, None, None)
        self.recent.forget(job.session_key)
        return Address.model_validate(user["reply"]) if recorded and user else None

    def _start_early(self, job: Job) -> EarlyStart | None:
        """Compile from the view the last turn left and start the model call, when the
        job says the session is still as that turn left it (see gateway.early)."""
        base, user = job.payload.get("base"), job.payload.get("entry")
        if not isinstance(base, str) or not isinstance(user, dict) or not user.get("reply"):
            return None
        if not job.fresh:
            return None  # it waited in a backlog: more messages may have joined it since
        if not self.compressor.warmed:
            return None
        view = self.recent.get(job.session_key, base)
        if view is None:
            return None
        view = replace(view, entries=[*view.entries, user])
        address = Address.model_validate(user["reply"])
        context = self._context(job.session_key, view, user, address, [])
        prepared = self._compile(context, view)
        reminder, budget = prepared.request.reminder, self.compressor.budget
        shape = RequestShape(self.settings.system_prompt, view, context.group, reminder)
        if self.compressor.known_within(budget, shape) is False:
            return None  # it compresses first; unknown is checked once the claim is back
        usage, chain = Usage(), self._chain(prepared)
        return EarlyStart(prepared, chain, usage, EarlyCall(self._pieces(prepared, usage, chain)))

    async def _claim(self, job: Job, lease: Lease, early: EarlyStart | None = None) -> Claim:
        """Take the session's lease, waiting while another turn holds it.

        When the holder runs in this process, its end wakes the waiter at once;
        a holder elsewhere is polled, quickly at first. An early call does not
        wait with it: another turn's reply comes first. (The job is touched
        meanwhile by its owner, `JobQueue.owned`.)
        """
        delay = 0.005
        while True:
            claim = await self.sessions.claim(job.session_key, lease.token, self.ttl)
            if claim.ok:
                return claim
            if early is not None and not early.call.cancelled:
                log.info("%s is busy; cancelled its early model call", job.session_key)
                await early.call.cancel()
            local = self.running.get(job.session_key)
            if local is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(local.done.wait(), self.ttl / 3)
                continue
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)

    async def _answer(
        self,
        key: str,
        token: str,
        claim: Claim,
        running: RunningTurn,
        early: EarlyStart | None,
    ) -> None:
        started = time.monotonic()
        view = claim.view
        assert view is not None  # a claim with work carries its snapshot
        user = _last_user(view.entries[max(0, claim.answered - view.start) :])
        if user is None:
            await self._record(key, token, claim, None, None)
            return
        address = Address.model_validate(user["reply"])
        sender = self.senders[address.platform]
        log.info(
            "turn %s %s started (%d new messages)",
            key,
            claim.turn_id,
            claim.length - claim.answered,
        )
        context = self._context(key, view, user, address, list(claim.injections))
        stream = self._reply_stream(key, token, claim, sender, address)
        started_early = early is not None
        usage = Usage()
        prepared: PreparedTurn | None = None
        chain: ResponseChain | None = None
        try:
            try:
                prepared, early = await self._prepare(key, claim, context, view, early)
                usage = early.usage if early is not None else usage
                result, chain = await self._call(key, prepared, usage, stream, running, early)
            except ModelError as exc:  # counting or compressing went through a model that failed
                result = TurnResult(stream.text, error=exc)
            if running.reason == LEASE_LOST:
                # Another run of this turn will edit the same message; say nothing here.
                raise LeaseLost(f"lease of {key} expired during turn {claim.turn_id}")
            entry = await self._deliver(stream, result, claim.turn_id, key)
        except BaseException:
            await stream.abandon()  # the typing indicator and the reaction stop, whatever happened
            raise
        fields = _chain_fields(prepared, chain, result, entry)
        recorded = await self._record(key, token, claim, entry, fields)
        if prepared is not None:
            self._remember(key, claim, prepared, entry, fields, recorded)
            if recorded:
                self._compress_later(key, prepared, entry)
        outcome = _outcome(result, recorded)
        seconds = time.monotonic() - started
        await self.metrics.turn(
            address.platform,
            seconds,
            usage.prompt_tokens,
            usage.completion_tokens,
            outcome,
            early=("used" if early is not None else "discarded") if started_early else "",
        )
        log.info(
            "turn %s %s %s in %.2fs (tokens in %d, out %d)",
            key,
            claim.turn_id,
            outcome,
            seconds,
            usage.prompt_tokens,
            usage.completion_tokens,
        )

    async def _record(
        self,
        key: str,
        token: str,
        claim: Claim,
        entry: Entry | None,
        fields: dict[str, str] | None,
    ) -> bool:
        """Record the turn; True when recorded, False when a reset or another run of it
        got there first. Raises LeaseLost when it could not record (left for a re-run)."""
        outcome = await self.sessions.finish(key, token, claim, entry, fields)
        if outcome is Finish.LOST:
            raise LeaseLost(f"{key} turn {claim.turn_id} lost its lease before recording")
        return outcome is Finish.RECORDED

    def _reply_stream(
        self, key: str, token: str, claim: Claim, sender: Sender, address: Address
    ) -> ReplyStream:
        async def store_ids(ids: list[str]) -> None:
            await self.sessions.show_progress(key, token, claim, ids=ids)

        async def show_live(text: str) -> None:
            await self.sessions.show_progress(key, token, claim, text=text)

        stream = ReplyStream(
            sender,
            address,
            budget=self.budget,
            known_ids=list(claim.reply_ids),
            on_ids=store_ids,
            on_flush=show_live,
        )
        stream.start()
        return stream

    def _context(
        self, key: str, view: HistoryView, user: Entry, address: Address, injections: list[str]
    ) -> TurnContext:
        """What the turn answering `user` (the last user entry of `view`, replied to at
        `address`) compiles from."""
        target = _target(user, address)
        group = bool(user.get("group"))
        cursor = self._cursor(view)
        return TurnContext(key, view.entries, target, injections, group, view.segments, cursor)

    def _cursor(self, view: HistoryView) -> str | None:
        """The last entry a stateful provider has seen, when its chain fits this view."""
        if not self.stateful or not view.meta.get("response_id"):
            return None
        if view.meta.get("chain_base", "") != _chain_base(view):
            return None  # compressed since the chain started: resend the compressed view
        return view.meta.get("cursor") or None

    async def _prepare(
        self,
        key: str,
        claim: Claim,
        context: TurnContext,
        view: HistoryView,
        early: EarlyStart | None = None,
    ) -> tuple[PreparedTurn, EarlyStart | None]:
        """Compile the turn; compress first (blocking) only when it would exceed the budget.

        Also returns the early call when it is kept; otherwise it is cancelled here.
        """
        prepared = self._compile(context, view)
        early = await self._adopt(key, early, prepared)
        await self.compressor.warm()
        reminder, budget = prepared.request.reminder, self.compressor.budget
        shape = RequestShape(self.settings.system_prompt, view, context.group, reminder)
        if await self.compressor.within(budget, shape):
            return prepared, early
        if early is not None:
            await early.call.cancel()
        log.info(
            "%s is over its budget (%d > %d tokens); compressing first",
            key,
            await self.compressor.tokens(view, context.group, reminder),
            budget,
        )
        # Reload even when this worker wrote nothing: another one may have compressed.
        await self.compressor.fit(key, context.group, reminder, claim.length)
        view = await self.sessions.view(key)
        context = replace(
            context,
            entries=view.entries,
            segments=view.segments,
            cursor=self._cursor(view),
        )
        return self._compile(context, view), None

    def _compile(self, context: TurnContext, view: HistoryView) -> PreparedTurn:
        compiler = MessageCompiler(context.session_key, self.settings.system_prompt)
        return PreparedTurn(compiler, context, compiler.compile(context), view)

    async def _adopt(
        self, key: str, early: EarlyStart | None, prepared: PreparedTurn
    ) -> EarlyStart | None:
        """The early call, if it sent exactly the request the claimed snapshot compiles to."""
        if early is None or early.call.cancelled:
            return None
        same = early.prepared.request == prepared.request and _previous_id(
            early.chain
        ) == _previous_id(self._chain(prepared))
        if not same:
            log.info("%s changed since its last turn here; restarting the model call", key)
            await early.call.cancel()
            return None
        return early

    def _remember(
        self,
        key: str,
        claim: Claim,
        prepared: PreparedTurn,
        entry: Entry | None,
        fields: dict[str, str] | None,
        recorded: bool,
    ) -> None:
        """Keep the view this turn leaves, for the next turn's early start."""
        if not recorded:
            self.recent.forget(key)
            return
        view = prepared.view
        extra = [entry] if entry is not None else []
        meta = {**view.meta, **(fields or {})}
        left = replace(view, meta=meta, entries=[*view.entries, *extra])
        self.recent.remember(key, f"{claim.epoch}.{claim.length + len(extra)}", left)

    async def _call(
        self,
        key: str,
        prepared: PreparedTurn,
        usage: Usage,
        stream: ReplyStream,
        running: RunningTurn,
        early: EarlyStart | None = None,
    ) -> tuple[TurnResult, ResponseChain | None]:
        """Stream the reply; a lost provider chain is resent once in full, unseen by the user."""
        if early is not None:
            chain, pieces = early.chain, early.call.pieces()
        else:
            chain = self._chain(prepared)
            pieces = self._pieces(prepared, usage, chain)
        result = await self._generate(pieces, stream, running)
        lost = isinstance(result.error, ProviderStateLost)
        if chain is not None and chain.previous_id and lost and not result.text:
            log.info("the provider lost the chain of %s; resending the turn in full", key)
            prepared.context = replace(prepared.context, cursor=None)
            prepared.request = prepared.compiler.compile(prepared.context)
            chain = ResponseChain()
            result = await self._generate(self._pieces(prepared, usage, chain), stream, running)
        return result, chain

    def _chain(self, prepared: PreparedTurn) -> ResponseChain | None:
        if not self.stateful:
            return None
        delta = prepared.request.mode == "delta"
        return ResponseChain(prepared.view.meta.get("response_id") if delta else None)

    def _pieces(
        self, prepared: PreparedTurn, usage: Usage, chain: ResponseChain | None
    ) -> AsyncIterator[str]:
        call = ModelCall(
            self.settings.model,
            prepared.request.messages,
            self.settings.model_timeout,
            max_tokens=self.settings.max_tokens,
        )
        if chain is None:
            return self.models.stream(call, usage)
        return self.models.stream_response(call, usage, chain)

    def _compress_later(self, key: str, prepared: PreparedTurn, entry: Entry | None) -> None:
        """Start a compression off the hot path once the history passed the threshold."""
        extra, group = ([entry] if entry is not None else []), prepared.context.group
        threshold = self.compressor.threshold
        shape = RequestShape(self.settings.system_prompt, prepared.view, group, extra=extra)
        if self.compressor.known_within(threshold, shape):
            return

        async def compress() -> int:
            if await self.compressor.within(threshold, shape):
                return 0  # counted: still short of the threshold
            return await self.compressor.after_turn(key, group)

        task = asyncio.create_task(compress())
        self.background.add(task)

        def done(finished: asyncio.Task[int]) -> None:
            self.background.discard(finished)
            if finished.cancelled():
                return
            if finished.exception() is not None:
                error = finished.exception()
                log.error("compressing %s after its turn failed: %r", key, error, exc_info=error)
            if finished.exception() is not None or finished.result():
                self.recent.forget(key)  # the view the turn left is not the session's now

        task.add_done_callback(done)

    async def _generate(
        self, pieces: AsyncIterator[str], stream: ReplyStream, running: RunningTurn
    ) -> TurnResult:
        async def consume() -> None:
            async for piece in pieces:
                stream.feed(piece)

        producing = asyncio.create_task(consume())
        stopping = asyncio.create_task(running.stop.wait())
        losing = asyncio.create_task(running.lease.lost.wait())
        try:
            await asyncio.wait({producing, stopping, losing}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the turn is cancelled (a stop): so is its model call
            for task in (producing, stopping, losing):
                task.cancel()
            await asyncio.gather(producing, stopping, losing, return_exceptions=True)
            raise
        stopping.cancel()
        losing.cancel()
        if running.lease.lost.is_set():
            running.request_stop(LEASE_LOST)
        if not producing.done():
            producing.cancel()
            await asyncio.gather(producing, return_exceptions=True)
            return TurnResult(stream.text, stopped=True)
        error = producing.exception()
        if isinstance(error, ModelError):
            return TurnResult(stream.text, error=error)
        if error is not None:  # a provider's answer of a shape nothing expected
            log.error("the model's answer could not be read: %r", error, exc_info=error)
            return TurnResult(stream.text, error=ModelBadResponse(type(error).__name__))
        return TurnResult(stream.text)

    async def _deliver(
        self, stream: ReplyStream, result: TurnResult, turn_id: str, key: str
    ) -> Entry | None:
        """Post the final text; the assistant entry to record, or None for a failed call.

        A stream that stalled after some text keeps that text on screen with a note
        that it was cut off, and it is recorded as the answer (as after a /stop): the
        history holds what the user saw, so a "go on" has something to go on from.
        """
        if result.error is not None:
            log.warning("model failed in %s: %s", key, result.error)
            await self.metrics.count("errors", type(result.error).__name__)
            if isinstance(result.error, ModelStalled) and result.text.strip():
                text = result.text.strip()
                note = f"\n\n_(the answer was cut off: {result.error.user_text})_"
                ids = await self._finish_stream(stream, f"{text}{note}")
                return assistant_entry(text, turn_id, ids)
            await self._finish_stream(stream, failure_text(result.error))
            return None
        text = result.text.strip() or ("" if result.stopped else EMPTY_REPLY)
        shown = f"{text}{STOPPED_NOTE}" if result.stopped else text
        ids = await self._finish_stream(stream, shown.strip())
        return assistant_entry(text, turn_id, ids) if text else None

    async def _finish_stream(self, stream: ReplyStream, text: str) -> list[str]:
        try:
            return await stream.finish(text)
        except PlatformError as exc:
            log.error("could not deliver the reply in %s: %s", stream.address.chat_key, exc)
            await self.metrics.count("errors", "delivery")
            return stream.ids


def failure_text(error: ModelError) -> str:
    return f"⚠️ Sorry, I could not answer: {error.user_text}. Please try again in a moment."


def _last_user(entries: list[Entry]) -> Entry | None:
    return next((e for e in reversed(entries) if e.get("role") == "user" and e.get("reply")), None)


def _target(user: Entry, address: Address) -> ReplyTarget:
    speaker = user.get("speaker") or {}
    place = f"{address.platform} channel {address.channel}"
    if address.thread:
        place += f", thread {address.thread}"
    return ReplyTarget(str(speaker.get("name", "the user")), str(speaker.get("id", "")), place)


def _previous_id(chain: ResponseChain | None) -> str | None:
    return chain.previous_id if chain is not None else None


def _chain_base(view: HistoryView) -> str:
    return str(view.segments[-1].get("last_id", "")) if view.segments else ""


def _chain_fields(
    prepared: PreparedTurn | None,
    chain: ResponseChain | None,
    result: TurnResult,
    entry: Entry | None,
) -> dict[str, str] | None:
    """The chain to continue next turn: set only when the provider holds this whole turn."""
    if prepared is None or chain is None or not chain.response_id or entry is None:
        return None
    if result.error is not None or result.stopped:
        return None  # the next turn resends these entries on the chain it had
    return {
        "response_id": chain.response_id,
        "cursor": str(entry["id"]),
        "chain_base": _chain_base(prepared.view),
    }


def _outcome(result: TurnResult, recorded: bool) -> str:
    if not recorded:
        return "superseded"
    if result.error is not None:
        return "failed"
    return "stopped" if result.stopped else "ok"

"""One main turn: take the lease, compile, stream the model's reply, record it once."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass, field

from redis.exceptions import RedisError

from adapters.base import Sender
from gateway.compiler import MessageCompiler, ReplyTarget, TurnContext
from gateway.config import Settings
from gateway.delivery import ReplyStream, SendBudget
from gateway.errors import ModelError, PlatformError
from gateway.jobs import Job, JobQueue
from gateway.llm import ModelCall, Models, Usage
from gateway.metrics import Metrics
from gateway.model import Address
from gateway.session import Claim, Entry, SessionStore, assistant_entry

log = logging.getLogger(__name__)

STOPPED_NOTE = "\n\n_(stopped)_"
EMPTY_REPLY = "_(the model returned an empty answer)_"


@dataclass
class RunningTurn:
    """What the worker needs to stop a turn from outside (a /stop, a lost lease)."""

    session_key: str
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str = ""

    def request_stop(self, reason: str) -> None:
        self.reason = self.reason or reason
        self.stop.set()


@dataclass
class TurnResult:
    text: str
    error: ModelError | None = None
    stopped: bool = False


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

    async def run(self, job: Job) -> None:
        key = job.session_key
        token = secrets.token_hex(8)
        claim = await self._claim(job, token)
        if not claim.has_work:
            await self.sessions.release(key, token)
            return
        running = self.running[key] = RunningTurn(key)
        beat = asyncio.create_task(self._heartbeat(job, token, running))
        try:
            await self._answer(key, token, claim, running)
        finally:
            beat.cancel()
            if self.running.get(key) is running:
                del self.running[key]

    async def _claim(self, job: Job, token: str) -> Claim:
        """Take the session's lease, waiting while another turn holds it."""
        delay, touched = 0.02, time.monotonic()
        while True:
            claim = await self.sessions.claim(job.session_key, token, self.ttl)
            if claim.ok:
                return claim
            if time.monotonic() - touched > self.ttl / 3:
                await self.queue.touch(job)
                touched = time.monotonic()
            await asyncio.sleep(delay)
            delay = min(delay * 1.5, 0.25)

    async def _heartbeat(self, job: Job, token: str, running: RunningTurn) -> None:
        while True:
            await asyncio.sleep(self.ttl / 3)
            try:
                if not await self.sessions.renew(job.session_key, token, self.ttl):
                    log.warning("lease lost for %s; stopping the turn", job.session_key)
                    running.request_stop("lease lost")
                    return
                await self.queue.touch(job)
            except RedisError as exc:
                log.warning("heartbeat for %s failed: %s", job.session_key, exc)

    async def _answer(self, key: str, token: str, claim: Claim, running: RunningTurn) -> None:
        started = time.monotonic()
        entries = await self.sessions.history(key)
        user = _last_user(entries[claim.answered :])
        if user is None:
            await self.sessions.finish(key, token, claim, None)
            return
        address = Address.model_validate(user["reply"])
        sender = self.senders[address.platform]
        log.info(
            "turn %s %s started (%d new messages)",
            key,
            claim.turn_id,
            len(entries) - claim.answered,
        )
        injections = await self.sessions.take_injections(key)
        request = MessageCompiler(key, self.settings.system_prompt).compile(
            TurnContext(
                key, entries, _target(user, address), injections, group=bool(user.get("group"))
            )
        )
        stream = await self._reply_stream(key, claim.turn_id, sender, address)
        usage = Usage()
        call = ModelCall(
            self.settings.model,
            request.messages,
            self.settings.model_timeout,
            max_tokens=self.settings.max_tokens,
        )
        result = await self._generate(call, usage, stream, running)
        entry = await self._deliver(stream, result, claim.turn_id, key)
        recorded = await self.sessions.finish(key, token, claim, entry)
        outcome = _outcome(result, recorded)
        seconds = time.monotonic() - started
        await self.metrics.turn(
            address.platform, seconds, usage.prompt_tokens, usage.completion_tokens, outcome
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

    async def _reply_stream(
        self, key: str, turn_id: str, sender: Sender, address: Address
    ) -> ReplyStream:
        known = await self.sessions.reply_ids(key, turn_id)

        async def store_ids(ids: list[str]) -> None:
            await self.sessions.store_reply_ids(key, turn_id, ids)

        async def show_live(text: str) -> None:
            await self.sessions.set_live(key, text)

        stream = ReplyStream(
            sender,
            address,
            budget=self.budget,
            known_ids=known,
            on_ids=store_ids,
            on_flush=show_live,
        )
        stream.start()
        return stream

    async def _generate(
        self, call: ModelCall, usage: Usage, stream: ReplyStream, running: RunningTurn
    ) -> TurnResult:
        async def consume() -> None:
            async for piece in self.models.stream(call, usage):
                stream.feed(piece)

        producing = asyncio.create_task(consume())
        stopping = asyncio.create_task(running.stop.wait())
        await asyncio.wait({producing, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not producing.done():
            producing.cancel()
            await asyncio.gather(producing, return_exceptions=True)
            return TurnResult(stream.text, stopped=True)
        error = producing.exception()
        if isinstance(error, ModelError):
            return TurnResult(stream.text, error=error)
        if error is not None:
            raise error
        return TurnResult(stream.text)

    async def _deliver(
        self, stream: ReplyStream, result: TurnResult, turn_id: str, key: str
    ) -> Entry | None:
        """Post the final text; the assistant entry to record, or None for a failed call."""
        if result.error is not None:
            log.warning("model failed in %s: %s", key, result.error)
            await self.metrics.count("errors", type(result.error).__name__)
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


def _outcome(result: TurnResult, recorded: bool) -> str:
    if not recorded:
        return "superseded"
    if result.error is not None:
        return "failed"
    return "stopped" if result.stopped else "ok"

"""The worker: reads jobs, runs main turns, side questions and command replies.

    run() -> _read_loop() -> _start(job) -> _run_job(job) -> queue.owned(job) -> _dispatch(job)

A job is read or reclaimed only into a free slot, so no job waits, untouched,
for a slot while another worker could have run it; from then on its owner
(`JobQueue.owned`) touches it until it completes or is left pending.

Many sessions run at once in one process (`concurrency` caps it); one
session runs one main turn at a time (its lease). Side questions take no
lease, so they are answered while the session's main turn is still streaming.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway import config_command, side_question, tools
from gateway.approvals import ApprovalStore
from gateway.budgets import holding
from gateway.compiler import split_view
from gateway.config import ECHO_MODEL, Settings
from gateway.config_command import ConfigAsk
from gateway.confirmations import Confirmations
from gateway.delivery import SendBudget, deliver
from gateway.errors import LeaseLost, ModelError, PlatformError
from gateway.jobs import Job, JobQueue
from gateway.media.pipeline import MediaPipeline
from gateway.metrics import Metrics
from gateway.model import Address
from gateway.models import Charge, ModelCall, Models
from gateway.ports import AdminCheck, FileSource, Sender
from gateway.retention import DAY, Retention
from gateway.scoped import Effective
from gateway.session import SessionStore
from gateway.store import Keys
from gateway.transcript import render_transcript
from gateway.turn import TurnRunner
from gateway.usage import UsageLedger, usage_text

log = logging.getLogger(__name__)

APPROVAL_CHECK_PERIOD = 2.0  # seconds between looks for approvals past their deadline

GIVE_UP_TEXT = (
    "⚠️ Sorry, something went wrong on my side and I could not answer that. Please ask again."
)


class Worker:
    """One consumer of the job streams of the platforms it has senders for."""

    def __init__(
        self,
        settings: Settings,
        redis: Redis,
        senders: Mapping[str, Sender],
        models: Models | None = None,
        *,
        concurrency: int | None = None,
        streams: Mapping[str, str] | None = None,
        sources: Mapping[str, FileSource] | None = None,
    ) -> None:
        """`sources` say how each platform's files are fetched (a platform without one has
        its attachments' URLs fetched as they are)."""
        self.settings = settings
        self.redis = redis
        self.senders = dict(senders)
        self.models = models or Models.for_settings(settings, processes=self._model_processes())
        self.ledger = UsageLedger(redis)
        self.models.meter = self.ledger.safely
        self.sessions = SessionStore(redis, streams)
        self.queue = JobQueue(redis, sorted(self.senders), streams=streams)
        self.budget = SendBudget(redis)
        self.metrics = Metrics(redis)
        self.tools = (
            tools.ToolServers.for_settings(settings, self.metrics) if settings.mcp_config else None
        )
        self.media = MediaPipeline(settings, redis, self.models, self.metrics, sources)
        self.approvals = ApprovalStore(redis, self.sessions)
        confirmations = Confirmations(self.approvals, settings.confirm_timeout)
        self.turns = TurnRunner(
            settings,
            self.sessions,
            self.queue,
            self.models,
            self.senders,
            self.budget,
            self.metrics,
            self.tools,
            confirmations,
            self.media,
        )
        days = settings.session_retention_days
        self.retention = Retention(redis, days * DAY) if days is not None else None
        self.slots = asyncio.Semaphore(concurrency or settings.worker_concurrency)
        self.tasks: set[asyncio.Task[None]] = set()
        self.running_jobs: set[str] = set()
        self.ready = asyncio.Event()

    async def run(self, stop: asyncio.Event, grace: float | None = None) -> None:
        """Work until `stop` is set, then let running jobs finish for `grace` seconds (the
        lease TTL unless told); unfinished ones stay pending.

        Cancelled (a stop that must not wait), it cancels its running jobs, which
        leaves them pending, and stops its model processes on the way out.
        """
        try:
            await self._work(stop, self.settings.lease_ttl if grace is None else grace)
        finally:
            await self.drain(timeout=0)
            await self.media.aclose()
            await self.models.aclose()
            if self.tools is not None:
                await self.tools.aclose()

    async def _work(self, stop: asyncio.Event, grace: float) -> None:
        await self.queue.ensure_groups()
        if self._calls_models():
            # litellm's import (seconds) or the model processes' start: paid before
            # taking jobs, not inside the first turn (where it would stall every other
            # session and their lease heartbeats). With model processes, litellm lives
            # there and this process never loads it.
            await self.models.start()
        await self.turns.compressor.warm()  # the model window and tokenizer, likewise
        await self.turns.scoped.load()  # settings by scope, before the first early start
        if self.tools is not None:
            await self.tools.start()  # each server up, or retried in the background
        loops = [
            asyncio.create_task(self._read_loop(stop)),
            asyncio.create_task(self._reclaim_loop(stop)),
            asyncio.create_task(self._cancel_listener()),
        ]
        if self.retention is not None:
            loops.append(asyncio.create_task(self.retention.keep_pruning()))
        if self.tools is not None:
            loops.append(asyncio.create_task(self._approval_deadlines()))
        self.ready.set()
        log.info("worker %s reading %s", self.queue.consumer, ", ".join(self.queue.streams))
        try:
            await stop.wait()
        finally:
            for loop in loops:
                loop.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
        await self.drain(timeout=grace)

    async def _approval_deadlines(self) -> None:
        """Approvals nobody answered in time count as declined: their turns go on."""
        while True:
            try:
                expired = await self.approvals.expire_due(time.time())
                if expired:
                    log.info("approvals timed out in %s", ", ".join(expired))
            except RedisError as exc:
                log.warning("approval deadlines not checked: %s", exc)
            await asyncio.sleep(APPROVAL_CHECK_PERIOD)

    def _calls_models(self) -> bool:
        names = (self.settings.model, self.settings.side_model, self.settings.compression_model)
        return any(name != ECHO_MODEL for name in names)

    def _model_processes(self) -> int:
        """GATEWAY_MODEL_PROCESSES, or none when every model is `echo` (nothing to run there)."""
        return self.settings.model_processes if self._calls_models() else 0

    async def drain(self, timeout: float) -> None:
        """Let running jobs finish for a while; the rest stay pending for another worker.

        A compression still running after a turn is not waited for: its lock
        expires and the next turn past the threshold compresses again.
        """
        if self.tasks:
            _, pending = await asyncio.wait(set(self.tasks), timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _read_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.slots.acquire()
            taken = 1 + await self._take_free_slots()
            try:
                jobs = await self.queue.read(count=taken, block_ms=1000)
                if not jobs:  # idle: anything read earlier whose answer never arrived
                    jobs = await self.queue.unstarted(self.running_jobs, taken)
            except RedisError as exc:
                self._give_slots(taken)
                log.warning("reading jobs failed (%s); retrying", exc)
                await asyncio.sleep(0.5)
                continue
            self._start_all(jobs, taken)
            await asyncio.sleep(0)  # the new jobs send their claims before the next read

    async def _take_free_slots(self) -> int:
        """Take every slot that is free now (acquiring a free slot never suspends)."""
        taken = 0
        while not self.slots.locked():
            await self.slots.acquire()
            taken += 1
        return taken

    def _give_slots(self, count: int) -> None:
        for _ in range(count):
            self.slots.release()

    def _start_all(self, jobs: list[Job], taken: int) -> None:
        for job in jobs:
            self._start(job, slot_taken=True)
        self._give_slots(taken - len(jobs))

    async def _reclaim_loop(self, stop: asyncio.Event) -> None:
        min_idle = max(2.0, self.settings.lease_ttl * 1.5)
        while not stop.is_set():
            await asyncio.sleep(min_idle / 2)
            # Slots first, then claims: a busy worker claims nothing it cannot start at once.
            await self.slots.acquire()
            taken = 1 + await self._take_free_slots()
            try:
                jobs = await self.queue.reclaim(min_idle, taken)
            except RedisError as exc:
                self._give_slots(taken)
                log.warning("reclaiming jobs failed: %s", exc)
                continue
            for job in jobs:
                log.info(
                    "reclaimed %s job %s of %s (delivery %d)",
                    job.kind,
                    job.id,
                    job.session_key,
                    job.deliveries,
                )
            self._start_all(jobs, taken)

    async def _cancel_listener(self) -> None:
        while True:
            try:
                async with self.redis.pubsub() as pubsub:
                    await pubsub.subscribe(Keys.CANCEL_CHANNEL)
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            self._stop_turn(str(message["data"]))
            except RedisError as exc:
                log.warning("cancel listener lost Redis (%s); resubscribing", exc)
                await asyncio.sleep(0.5)

    def _stop_turn(self, session_key: str) -> None:
        self.turns.claims.stop(session_key)

    def _start(self, job: Job, *, slot_taken: bool) -> None:
        if job.id in self.running_jobs:
            # Found twice (a reclaim round and the check for unstarted jobs both saw
            # it before either started it): it runs once.
            if slot_taken:
                self.slots.release()
            return
        task = asyncio.create_task(self._run_job(job))
        self.tasks.add(task)
        self.running_jobs.add(job.id)

        def done(finished: asyncio.Task[None]) -> None:
            self.tasks.discard(finished)
            self.running_jobs.discard(job.id)
            if slot_taken:
                self.slots.release()

        task.add_done_callback(done)

    async def _run_job(self, job: Job) -> None:
        """Run a job under its owner: completed when it returns, left pending when it raises."""
        try:
            async with self.queue.owned(job, touch_every=self.settings.lease_ttl / 3):
                if job.exhausted:
                    await self._give_up(job)
                else:
                    await self._dispatch(job)
                await self.models.metered()  # its calls' usage written before it completes
        except LeaseLost as exc:
            # Left pending on purpose: reclaimed once idle, the turn runs again and
            # edits the message this run had posted.
            log.warning("%s", exc)
            return
        except RedisError as exc:
            # Left pending on purpose: another worker (or this one) reclaims it.
            log.warning(
                "%s job %s of %s interrupted by Redis: %s", job.kind, job.id, job.session_key, exc
            )
            return
        except asyncio.CancelledError:
            log.info(
                "%s job %s of %s cancelled; left for another worker",
                job.kind,
                job.id,
                job.session_key,
            )
            raise
        except Exception:
            # Left pending: reclaimed once idle and run again, up to MAX_DELIVERIES.
            log.exception(
                "%s job %s of %s failed (delivery %d); left for a retry",
                job.kind,
                job.id,
                job.session_key,
                job.deliveries,
            )
            with contextlib.suppress(RedisError):
                await self.metrics.count("errors", f"job_{job.kind}")

    async def _give_up(self, job: Job) -> None:
        """A job that failed on every delivery: said once, then done with."""
        log.error(
            "%s job %s of %s failed %d times; giving up",
            job.kind,
            job.id,
            job.session_key,
            job.deliveries - 1,
        )
        await self.metrics.count("errors", "job_given_up")
        address = await self.turns.claims.give_up(job) if job.kind == "turn" else _address_of(job)
        if address is not None and job.kind != "notice":
            await self._send(address, GIVE_UP_TEXT)

    async def _dispatch(self, job: Job) -> None:
        """Run the job's effect; it returns once that effect is recorded."""
        if job.kind == "turn":
            await self._turn(job)
        elif job.kind == "side":
            await self._side(job)
        elif job.kind == "notice":
            await self._send(Address.model_validate(job.payload["address"]), job.payload["text"])
        elif job.kind == "status":
            await self._status(job)
        elif job.kind == "config":
            await self._config(job)
        elif job.kind == "usage":
            user = str(job.payload.get("user") or "")
            text = await usage_text(self.ledger, job.session_key, user)
            await self._send(Address.model_validate(job.payload["address"]), text)
        else:
            log.warning("unknown job kind %r (%s)", job.kind, job.id)

    async def _turn(self, job: Job) -> None:
        await self.turns.run(job)

    async def _side(self, job: Job) -> None:
        address = Address.model_validate(job.payload["address"])
        question = str(job.payload.get("question", ""))
        started = time.monotonic()
        key = job.session_key
        # The newest summary and the entries after it: the summary stands for the
        # history before it, which is never read (however long it has grown).
        view = await self.sessions.view(key)
        segment, entries = split_view(view.entries, view.segments)
        inbox = await self.sessions.inbox(key)
        live = await self.sessions.live(key) if await self.sessions.is_running(key) else None
        media = await self.media.stored(key, [*entries, *inbox])
        transcript = render_transcript(
            [*entries, *inbox],
            message_cap=self.settings.side_message_cap,
            budget=self.settings.side_transcript_budget,
            live_reply=live,
            summary=str(segment.get("summary", "")) if segment is not None else None,
            media=media,
        )
        settings = await self._settings(key)
        call = ModelCall(
            settings.side_model,
            side_question.build_side_messages(transcript, question),
            self.settings.side_timeout,
            max_tokens=self.settings.side_max_tokens,
            temperature=self.settings.side_temperature,
            charge=Charge(key, str(job.payload.get("user", "")), "side"),
        )
        marker = side_question.answer_marker(question)
        try:
            async with holding(self.turns.caps.limited(settings.budgets), call) as hold:
                answer, _ = await self.models.complete(call)
            body, outcome = answer.strip() or "_(the side model returned an empty answer)_", "ok"
            body += f"\n\n⚠️ {hold.warning}" if hold is not None and hold.warning else ""
        except ModelError as exc:
            body, outcome = side_question.failure_text(exc), "failed"
        await self._send(address, f"{marker}\n\n{body}")
        await self.metrics.count("side", outcome)
        log.info("side question in %s %s in %.2fs", key, outcome, time.monotonic() - started)

    async def _status(self, job: Job) -> None:
        key = job.session_key
        view = await self.sessions.view(key)  # what the next turn sends, compressed
        messages = int(view.meta.get("answered", 0) or 0)
        queued = len(await self.sessions.inbox(key))
        await self.turns.compressor.warm()
        tokens = await self.turns.compressor.tokens(view, group=True)
        running = "a reply is being written" if await self.sessions.is_running(key) else "idle"
        settings = await self._settings(key)
        text = (
            f"Model: `{settings.model}` (side questions: `{settings.side_model}`)\n"
            f"This conversation: {messages} messages; the next request carries about "
            f"{tokens:,} tokens of it; {queued} queued; {running}."
        )
        if files := await self.media.store.kept(key):
            text += "\n" + files_line(files)
        if self.tools is not None:
            text += "\n" + tools_line(self.tools, settings)
        await self._send(Address.model_validate(job.payload["address"]), text)

    async def _config(self, job: Job) -> None:
        address = Address.model_validate(job.payload["address"])
        sender = self.senders[address.platform]
        ask = ConfigAsk(
            job.session_key,
            address,
            str(job.payload.get("user") or ""),
            bool(job.payload.get("dm")),
            str(job.payload.get("argument") or ""),
        )
        admins = sender if isinstance(sender, AdminCheck) else None
        await self._send(address, await config_command.answer(self.turns.scoped, admins, ask))

    async def _settings(self, session_key: str) -> Effective:
        """The session's settings by scope, for a job that claims nothing (one GET)."""
        await self.turns.scoped.fresh()
        return self.turns.scoped.resolve(session_key)

    async def _send(self, address: Address, text: str) -> None:
        sender = self.senders[address.platform]
        try:
            await deliver(sender, address, text, self.budget)
        except PlatformError as exc:
            log.error("could not send to %s: %s", address.chat_key, exc)
            await self.metrics.count("errors", "delivery")


def files_line(kept: Mapping[str, int]) -> str:
    """The files a conversation keeps, by kind."""
    names = {"image": "image", "voice": "voice message", "file": "document"}
    parts = [f"{n} {names.get(kind, kind)}{'s' * (n != 1)}" for kind, n in sorted(kept.items())]
    return f"Files kept: {', '.join(parts)}."


def tools_line(servers: tools.ToolServers, settings: Effective) -> str:
    """The tools the model may call here, and the servers it cannot reach now."""
    allowed = [spec for spec in servers.tools() if settings.allows_tool(spec.name, spec.server)]
    names = ", ".join(f"`{spec.name}`" for spec in allowed) or "none"
    down = servers.down()
    return f"Tools: {names}" + (f" (unavailable now: {', '.join(down)})" if down else "")


def _address_of(job: Job) -> Address | None:
    raw = job.payload.get("address")
    return Address.model_validate(raw) if isinstance(raw, dict) else None

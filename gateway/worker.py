"""The worker: reads jobs and runs them: main turns (`turn/runner.py`), side questions and
command replies (`answers/side_jobs.py`).

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

from gateway import tools
from gateway.answers.side_jobs import Answers, TurnParts
from gateway.approvals.store import ApprovalStore
from gateway.approvals.waiting import Confirmations
from gateway.delivery.pacing import SendPacing
from gateway.errors import LeaseLost
from gateway.logs import Outage
from gateway.media.pipeline import MediaPipeline
from gateway.messages import Address
from gateway.metrics import GATHER, Metrics
from gateway.models import Models
from gateway.ports import FileSource, Sender
from gateway.settings.defaults import ECHO_MODEL
from gateway.settings.env import Settings
from gateway.shutdown import cancel_and_wait
from gateway.spend.usage import UsageLedger
from gateway.state.jobs import Job, JobQueue
from gateway.state.keys import Keys
from gateway.state.pubsub import keep_subscribed
from gateway.state.retention import DAY, Retention
from gateway.state.session import SessionStore
from gateway.turn.runner import TurnRunner

log = logging.getLogger(__name__)

APPROVAL_CHECK_PERIOD = 2.0  # seconds between looks for approvals past their deadline
WORKER_GONE_MS = 600_000  # a worker not heard of for this long is no longer listed

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
        self.pacing = SendPacing(redis)
        self.metrics = Metrics(redis, gather=GATHER)  # /metrics a second behind at most
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
            self.pacing,
            self.metrics,
            self.tools,
            confirmations,
            self.media,
        )
        self.answers = Answers(
            settings,
            self.sessions,
            self.models,
            self.media,
            TurnParts(self.turns.scoped, self.turns.caps, self.turns.compressor),
            self.tools,
            self.senders,
            self.pacing,
            self.metrics,
            self.ledger,
        )
        days = settings.session_retention_days
        self.retention = Retention(redis, days * DAY) if days is not None else None
        self.slots = asyncio.Semaphore(concurrency or settings.worker_concurrency)
        self.tasks: set[asyncio.Task[None]] = set()
        self.running_jobs: set[str] = set()  # their `Job.key`s
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
            await self.metrics.aclose()
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
        await self.turns.compressor.warm()  # the models' windows, likewise
        await self.turns.scoped.load()  # settings by scope, before the first early start
        if self.tools is not None:
            await self.tools.start()  # each server up, or retried in the background
            self.tools.check_commands()  # ...unless its command cannot be run at all
        await self.turns.scoped.spread()  # every shard's copy of the settings' version
        await self.say_alive()
        loops = [
            asyncio.create_task(self.queue.listen()),
            asyncio.create_task(self._read_loop(stop)),
            asyncio.create_task(self._reclaim_loop(stop)),
            asyncio.create_task(self._cancel_listener()),
        ]
        if self.retention is not None:
            loops.append(asyncio.create_task(self.retention.keep_pruning()))
        if self.tools is not None:
            loops.append(asyncio.create_task(self._approval_deadlines()))
        self.ready.set()
        log.info(
            "worker %s reading %d job streams of %s",
            self.queue.consumer,
            len(self.queue.streams),
            ", ".join(sorted(self.senders)),
        )
        try:
            await stop.wait()
        finally:
            await cancel_and_wait(loops)
        await self.drain(timeout=grace)

    async def say_alive(self) -> None:
        """Count as a running worker for a while (`Keys.WORKERS`: what `gateway migrate`
        looks at before it moves anything); said again every reclaim round."""
        now_ms = int(time.time() * 1000)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zadd(Keys.WORKERS, {self.queue.consumer: now_ms})
            pipe.zremrangebyscore(Keys.WORKERS, "-inf", now_ms - WORKER_GONE_MS)
            await pipe.execute()

    async def _approval_deadlines(self) -> None:
        """Approvals nobody answered in time count as declined: their turns go on."""
        outage = Outage(log, "checking approval deadlines")
        while True:
            try:
                expired = await self.approvals.expire_due(time.time())
                if expired:
                    log.info("approvals timed out in %s", ", ".join(expired))
                outage.worked()
            except RedisError as exc:
                outage.failed(exc)
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
            await cancel_and_wait(pending)

    async def _read_loop(self, stop: asyncio.Event) -> None:
        outage = Outage(log, "reading jobs")
        while not stop.is_set():
            await self.slots.acquire()
            taken = 1 + await self._take_free_slots()
            try:
                jobs = await self.queue.read(count=taken, block_ms=1000)
                if not jobs:  # idle: anything read earlier whose answer never arrived
                    jobs = await self.queue.unstarted(self.running_jobs, taken)
            except RedisError as exc:
                self._give_slots(taken)
                outage.failed(exc)
                await asyncio.sleep(0.5)
                continue
            outage.worked()
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
        outage = Outage(log, "reclaiming jobs")
        while not stop.is_set():
            await asyncio.sleep(min_idle / 2)
            # Slots first, then claims: a busy worker claims nothing it cannot start at once.
            await self.slots.acquire()
            taken = 1 + await self._take_free_slots()
            try:
                await self.say_alive()
                jobs = await self.queue.reclaim(min_idle, taken)
            except RedisError as exc:
                self._give_slots(taken)
                outage.failed(exc)
                continue
            outage.worked()
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
        await keep_subscribed(self.redis, Keys.CANCEL_CHANNEL, self._stop_turn, "cancel listener")

    def _stop_turn(self, session_key: str) -> None:
        self.turns.claims.stop(session_key)

    def _start(self, job: Job, *, slot_taken: bool) -> None:
        if job.key in self.running_jobs:
            # Found twice (a reclaim round and the check for unstarted jobs both saw
            # it before either started it): it runs once.
            if slot_taken:
                self.slots.release()
            return
        task = asyncio.create_task(self._run_job(job))
        self.tasks.add(task)
        self.running_jobs.add(job.key)

        def done(finished: asyncio.Task[None]) -> None:
            self.tasks.discard(finished)
            self.running_jobs.discard(job.key)
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
            await self.answers.send(address, GIVE_UP_TEXT)

    async def _dispatch(self, job: Job) -> None:
        """Run the job's effect; it returns once that effect is recorded."""
        if job.kind == "turn":
            await self._turn(job)
        elif job.kind == "side":
            await self.answers.side(job)
        elif job.kind == "notice":
            address = Address.model_validate(job.payload["address"])
            await self.answers.send(address, job.payload["text"], job)
        elif job.kind == "status":
            await self.answers.status(job)
        elif job.kind == "config":
            await self.answers.config(job)
        elif job.kind == "usage":
            await self.answers.usage(job)
        else:
            log.warning("unknown job kind %r (%s)", job.kind, job.id)

    async def _turn(self, job: Job) -> None:
        await self.turns.run(job)


def _address_of(job: Job) -> Address | None:
    raw = job.payload.get("address")
    return Address.model_validate(raw) if isinstance(raw, dict) else None

"""One main turn: take the lease, compile, stream the model's reply, record it once.

    run(job) -> early start -> claim -> _answer: _prepare -> call -> deliver -> _finish

The parts it tells the story over: `claims` (the lease taken, held and recorded
under; the turns running here), `early` (the call started before the claim),
`prepare` (the request, compressed first when it must), `chains` (what a stateful
provider holds), `generation` (the model call), `reply` (the platform message),
and `Compressor.schedule` (compression after the turn).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from gateway.approvals.waiting import Asker, Confirmations
from gateway.context.compiler import TurnContext
from gateway.context.compression import Compressor
from gateway.delivery.pacing import SendPacing
from gateway.delivery.stream import ReplyStream, deliver, finder
from gateway.errors import LeaseLost, ModelError, PlatformError
from gateway.media.pipeline import MediaPipeline
from gateway.messages import Address
from gateway.metrics import Metrics
from gateway.models import Charge, Models, ResponseChain, Usage
from gateway.models.providers import is_stateful
from gateway.ports import Sender
from gateway.settings.env import Settings
from gateway.settings.scoped import ScopedSettings, SessionSettings
from gateway.spend.budgets import Budgets, Hold
from gateway.state.jobs import Job, JobQueue
from gateway.state.keys import Keys
from gateway.state.replicas import ReplicaWait
from gateway.state.session import Entry, SessionStore
from gateway.turn.chains import Chains
from gateway.turn.claims import Claims, last_user
from gateway.turn.early_start import EarlyStart, EarlyStarts
from gateway.turn.generation import LEASE_LOST, Generation
from gateway.turn.prepare import PreparedTurn, Preparer
from gateway.turn.reply import Replies, failure_text
from gateway.turn.tool_loop import ToolLoop
from gateway.turn.types import AnsweringTurn, RunningTurn, Turn, TurnResult

if TYPE_CHECKING:
    from gateway.tools import ToolServers

__all__ = ["PreparedTurn", "RunningTurn", "Turn", "TurnResult", "TurnRunner", "failure_text"]

log = logging.getLogger(__name__)

WAITING_NOTE = "_(waiting for approval)_"


class TurnRunner:
    """Runs main turns; shared by all of one worker's concurrent jobs."""

    def __init__(
        self,
        settings: Settings,
        sessions: SessionStore,
        queue: JobQueue,
        models: Models,
        senders: dict[str, Sender],
        pacing: SendPacing,
        metrics: Metrics,
        tools: ToolServers | None = None,
        confirmations: Confirmations | None = None,
        media: MediaPipeline | None = None,
    ) -> None:
        self.sessions, self.queue, self.senders, self.metrics = sessions, queue, senders, metrics
        self.compressor = Compressor(settings, sessions.redis, models)
        self.chains = Chains(is_stateful(settings.model))
        self.preparer = Preparer(settings, sessions, self.compressor, self.chains, media)
        self.generation = Generation(settings, models, self.chains)
        self.early = EarlyStarts(self.preparer, self.chains, self.generation.pieces)
        self.claims = Claims(sessions, settings.lease_ttl, self.early)
        self.replies = Replies(sessions, pacing, metrics)
        self.tools = tools
        self.scoped = ScopedSettings(sessions.redis, settings)
        self.caps = Budgets.priced(sessions.redis, settings)
        self.model, self.max_output = settings.model, settings.max_tokens
        self.replicas = ReplicaWait.of(sessions.redis, settings.replica_wait)
        self.loop = (
            ToolLoop(sessions, self.generation, tools, settings.tool_max_steps, confirmations)
            if tools is not None
            else None
        )

    async def run(self, job: Job) -> None:
        """Answer everything the session has past its `answered` mark, under its lease.

        Returns once the turn is recorded (or there was nothing to record); raises
        when it could not record, so the job is left pending for a re-run.
        """
        key = job.session_key
        lease = self.claims.lease(key)
        try:
            early = self._start_early(job)
        except Exception as exc:  # a job with a payload of the wrong shape: start as usual
            log.warning("%s: no early start for job %s (%r)", key, job.id, exc)
            early = None
        try:
            claim = await self.claims.claim(job, lease, early)
            if not claim.has_work:
                await lease.release()
                return
            await self.scoped.seen(claim.settings_version)  # a reload only when they changed
            if early is not None and early.settings_version != self.scoped.version:
                log.info("%s: settings changed; its early model call is discarded", key)
                await early.call.cancel()
            settings = self.scoped.resolve(key)
            async with self.claims.turn_running(key, lease) as running:
                await self._answer(Turn(key, lease, claim, running, early), settings)
        finally:
            if early is not None:
                await early.call.cancel()

    def _start_early(self, job: Job) -> EarlyStart | None:
        """The model call started before the claim, when it cannot differ from the one the
        claim would start. Never with tools (every such turn starts claimed), with
        budgets (no call goes out before they are checked), with settings by scope for
        the session (the call goes out as the environment has it), or when the message
        came after a change of them this process has not loaded yet (the job carries
        their version). A change made after the message discards the call at the claim."""
        if self.loop is not None or self.scoped.version is None:
            return None
        version = job.payload.get("settings")
        if isinstance(version, int) and version > self.scoped.version:
            return None
        settings = self.scoped.resolve(job.session_key)
        if settings.scoped or self.caps.limited(settings.budgets) is not None:
            return None
        early = self.early.start(job)
        if early is not None:
            early.settings_version = self.scoped.version
        return early

    async def _answer(self, turn: Turn, settings: SessionSettings) -> None:
        started, key, claim = time.monotonic(), turn.session_key, turn.claim
        view = claim.view
        assert view is not None  # a claim with work carries its snapshot
        user = last_user(view.entries[max(0, claim.answered - view.start) :])
        if user is None:
            await self.claims.record(turn, None)
            return
        address = Address.model_validate(user["reply"])
        new = claim.length - claim.answered
        log.info("turn %s %s started (%d new messages)", key, claim.turn_id, new)
        notes = list(claim.injections) + self._tool_notes()
        chained = settings.model == self.model  # the provider chain is the environment model's
        context = self.preparer.context(key, view, user, address, notes, chained)
        sender = self.senders[address.platform]
        unanswered = view.entries[max(0, claim.answered - view.start) :]
        context, notices = await self.preparer.with_media(context, unanswered)
        told = f"{key}:{user.get('id') or ''}:notice"  # the same on a re-run, found there
        await _tell(sender, address, notices, self.replies.pacing, told, claim.rerun)
        stream = await self.replies.open(
            key,
            turn.lease.token,
            claim,
            sender,
            address,
            str(user.get("id") or ""),
            recipient=str((user.get("speaker") or {}).get("id") or ""),
            feedback=settings.feedback(address.platform),
            may_post=lambda: self._may_post(turn),
        )
        usage, prepared, chain, length, hold = Usage(), None, None, claim.length, None
        try:
            try:
                prepared = await self._prepare(turn, context, settings)
                caps = self.caps.limited(settings.budgets)
                hold = await self._hold(caps, key, user, prepared, sender, address)
                if self.loop is not None:
                    asker = Asker(str(user["speaker"]["id"]), _speaker_name(user), address)
                    answering = AnsweringTurn(turn, prepared, usage, stream, asker, settings, hold)
                    ran = await self.loop.run(answering)
                    if ran.waiting:
                        await self._wait_for_approval(turn, stream)
                        return
                    result, chain, length = ran.result, ran.chain, ran.length
                else:
                    early = turn.kept_early
                    usage = early.usage if early is not None else usage
                    call = self.generation.call(
                        key, prepared, usage, stream, turn.running, early, hold
                    )
                    result, chain = await call
            except ModelError as exc:  # counting or compressing went through a model that failed
                result = TurnResult(stream.text, error=exc)
            if turn.running.reason == LEASE_LOST:
                # Another run of this turn will edit the same message; say nothing here.
                raise LeaseLost(f"lease of {key} expired during turn {claim.turn_id}")
            entry = await self.replies.deliver(
                stream, result, claim.turn_id, key, model=settings.model
            )
            if entry is not None and prepared is not None and length == claim.length:
                # One call answered from `prepared`: its provider's count bounds the next.
                sent = self.preparer.sent(prepared, usage.prompt_tokens)
                if sent is not None:
                    entry["sent"] = sent
        except BaseException:
            await stream.abandon()  # the typing indicator and the reaction stop, whatever happened
            raise
        finally:
            if hold is not None:
                await self.caps.release(hold)
        outcome = await self._finish(turn, prepared, chain, result, entry, length)
        if length != claim.length and outcome != "superseded":
            # Messages that came while the loop was open stayed in the inbox: their turn.
            await self.sessions.enqueue_turn(key, address.platform)
        await _report(self.metrics, turn, address, time.monotonic() - started, usage, outcome)

    async def _may_post(self, turn: Turn) -> bool:
        """Whether the turn may post a new message: only while its lease is held, asked of
        Redis each time (a post made while Redis is away could not be recorded, and its
        re-run would post it again: the redis-restart drill showed it when this was
        answered locally), and, with GATEWAY_REDIS_WAIT_REPLICAS, only once the replicas
        have the claim and all before it. A failover then cannot take the claim with it
        after a post went out: a re-run knows it is one and looks for its post first.
        The replicas first, the lease then: a wait that outlasts a failover ends on the
        new primary, whose replica says nothing of the old one's writes; the lease asked
        of that primary does (the claim is there, and ours, or the turn does not post)."""
        await self.replicas.settled(Keys.meta(turn.session_key))
        return await turn.lease.renew()

    async def _hold(
        self,
        caps: Budgets | None,
        key: str,
        user: Entry,
        prepared: PreparedTurn,
        sender: Sender,
        address: Address,
    ) -> Hold | None:
        """The turn's budgets (`caps`: the session's) checked and its estimate held
        (BudgetExceeded when one is used up); the asker is told once when one passes 80%."""
        if caps is None:
            return None
        charge = Charge(key, str(user["speaker"]["id"]), "turn")
        messages = prepared.request.messages
        hold = await caps.hold_call(charge, prepared.model, messages, self.max_output)
        if hold.warning:
            told = f"{key}:{user.get('id') or ''}:budget"
            await _tell(sender, address, (f"⚠️ {hold.warning}",), self.replies.pacing, told)
        return hold

    async def _wait_for_approval(self, turn: Turn, stream: ReplyStream) -> None:
        """A call waits for its approval: the reply says so, and the turn lets go of its
        lease unrecorded. The click, or the deadline, enqueues it again."""
        await stream.finish(f"{stream.text.rstrip()}\n\n{WAITING_NOTE}".strip())
        await turn.lease.release()
        log.info("turn %s %s waits for an approval", turn.session_key, turn.claim.turn_id)

    def _tool_notes(self) -> list[str]:
        """What the model is told of tool servers it cannot reach now."""
        down = self.tools.down() if self.tools is not None else []
        if not down:
            return []
        return [f"These tool servers are unavailable right now: {', '.join(down)}."]

    async def _prepare(
        self, turn: Turn, context: TurnContext, settings: SessionSettings
    ) -> PreparedTurn:
        """Compile the turn with the session's settings; compress first (blocking) only
        when it would exceed its token allowance.

        The early call is kept when it sent this very request; otherwise it is cancelled.
        """
        assert turn.claim.view is not None
        prepared = self.preparer.compile(context, turn.claim.view, settings)
        await self.early.adopt(turn.session_key, turn.early, prepared)
        if await self.preparer.fits(prepared):
            return prepared
        if turn.kept_early is not None:
            await turn.kept_early.call.cancel()
        key, length = turn.session_key, turn.claim.length
        return await self.preparer.compressed(key, prepared, length, settings)

    async def _finish(
        self,
        turn: Turn,
        prepared: PreparedTurn | None,
        chain: ResponseChain | None,
        result: TurnResult,
        entry: Entry | None,
        length: int,
    ) -> str:
        """Record the turn, and keep what the next one starts from; returns its outcome.
        `length` is the history's as the turn left it (past the claim's after tool steps)."""
        if prepared is None:  # a model failed while counting or compressing: nothing to keep
            return _outcome(result, await self.claims.record(turn, entry, length=length))
        key, group = turn.session_key, prepared.context.group
        fields = self.chains.fields(prepared.view, chain, entry, result.whole)
        recorded = await self.claims.record(turn, entry, fields, length)
        if length == turn.claim.length:
            self.early.remember(key, turn.claim, prepared.view, entry, fields, recorded)
        else:  # tool steps were recorded: the view misses them, nothing to start from
            self.early.forget(key)
        if recorded:
            prompt, allowance = prepared.compiler.system_prompt, prepared.allowance
            self.compressor.schedule(
                key, prepared.view, group, entry, self.early.forget, allowance, prompt
            )
        return _outcome(result, recorded)


async def _tell(
    sender: Sender,
    address: Address,
    notices: tuple[str, ...],
    pacing: SendPacing,
    key: str,
    rerun: bool = False,
) -> None:
    """Lines for the asker before the answer (what was heard in voice notes, files of the
    message that could not be used, a budget past 80%), in one message paced like every
    other message to the chat, posted under `key`; a failure to send it does not stop
    the turn."""
    if not notices:
        return
    try:
        text = "\n".join(notices)
        await deliver(sender, address, text, pacing, key=key, find=finder(sender, rerun))
    except PlatformError as exc:
        log.warning("%s: the notice about its files was not sent (%s)", address.chat_key, exc)


def _speaker_name(user: Entry) -> str:
    speaker = user.get("speaker") or {}
    return str(speaker.get("name") or speaker.get("id") or "")


async def _report(
    metrics: Metrics, turn: Turn, address: Address, seconds: float, usage: Usage, outcome: str
) -> None:
    """The turn's metrics and its closing log line."""
    tokens_in, tokens_out = usage.prompt_tokens, usage.completion_tokens
    early = "" if turn.early is None else "used" if turn.kept_early else "discarded"
    await metrics.turn(address.platform, seconds, tokens_in, tokens_out, outcome, early=early)
    log.info(
        "turn %s %s %s in %.2fs (tokens in %d, out %d)",
        turn.session_key,
        turn.claim.turn_id,
        outcome,
        seconds,
        tokens_in,
        tokens_out,
    )


def _outcome(result: TurnResult, recorded: bool) -> str:
    if not recorded:
        return "superseded"
    if result.error is not None:
        return "failed"
    return "stopped" if result.stopped else "ok"

"""A turn's model call: its pieces fed to the reply until the model is done, the turn is
stopped, or its lease is lost."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence

from gateway.delivery.stream import ReplyStream
from gateway.errors import ModelBadResponse, ModelError, ProviderStateLost
from gateway.models import Charge, Message, ModelCall, Models, ResponseChain, ToolCall, Usage
from gateway.settings.env import Settings
from gateway.spend.budgets import Hold
from gateway.turn.chains import Chains
from gateway.turn.early_start import EarlyStart
from gateway.turn.prepare import PreparedTurn
from gateway.turn.types import AnsweringTurn, RunningTurn, TurnResult

log = logging.getLogger(__name__)

LEASE_LOST = "lease lost"


class Generation:
    """Calls the main model for turns; shared by all of one worker's turns."""

    def __init__(self, settings: Settings, models: Models, chains: Chains) -> None:
        self.settings, self.models, self.chains = settings, models, chains

    async def call(
        self,
        key: str,
        prepared: PreparedTurn,
        usage: Usage,
        stream: ReplyStream,
        running: RunningTurn,
        early: EarlyStart | None = None,
        hold: Hold | None = None,
    ) -> tuple[TurnResult, ResponseChain | None]:
        """Stream the reply (from the `early` call when the turn kept it); a lost provider
        chain is resent once in full, unseen by the user. The calls carry the turn's
        budget `hold` to their usage write (an early call starts only without one)."""
        if early is not None:
            chain, pieces = early.chain, early.call.pieces()
        else:
            chain = self.chain(prepared)
            pieces = self.pieces(prepared, usage, chain, hold)
        result = await generate(pieces, stream, running)
        lost = isinstance(result.error, ProviderStateLost)
        if chain is not None and chain.previous_id and lost and not result.text:
            log.info("the provider lost the chain of %s; resending the turn in full", key)
            chain = ResponseChain()
            pieces = self.pieces(prepared.in_full(), usage, chain, hold)
            result = await generate(pieces, stream, running)
        return result, chain

    def chain(self, prepared: PreparedTurn) -> ResponseChain | None:
        """The provider chain the turn continues; none for a model other than the
        environment's (a session's own, by scope), whose provider holds nothing of it."""
        if prepared.model != self.settings.model:
            return None
        return self.chains.start(prepared.request, prepared.view)

    async def step(
        self,
        answering: AnsweringTurn,
        messages: Sequence[Message],
        chain: ResponseChain | None,
        tools: Sequence[Message] | None,
        calls: list[ToolCall] | None,
    ) -> TurnResult:
        """One call of a tool loop: `messages` offered `tools`; `calls` gets what the
        model asked for (filled in only when the answer ended cleanly); its usage is
        counted against the turn's asker, and settles the turn's budget hold."""
        charge = Charge(answering.turn.session_key, answering.asker.user_id, "turn")
        model, usage, hold = answering.prepared.model, answering.usage, answering.hold
        pieces = self._stream(model, messages, usage, chain, tools, calls, charge, hold)
        return await generate(pieces, answering.stream, answering.turn.running)

    def pieces(
        self,
        prepared: PreparedTurn,
        usage: Usage,
        chain: ResponseChain | None,
        hold: Hold | None = None,
    ) -> AsyncIterator[str]:
        """The reply's pieces, as the model streams them (on `chain` for a stateful one)."""
        context = prepared.context
        user = context.target.speaker_id if context.target is not None else ""
        charge = Charge(context.session_key, user, "turn")
        messages = prepared.request.messages
        return self._stream(prepared.model, messages, usage, chain, None, None, charge, hold)

    def _stream(
        self,
        model: str,
        messages: Sequence[Message],
        usage: Usage,
        chain: ResponseChain | None,
        tools: Sequence[Message] | None,
        calls: list[ToolCall] | None,
        charge: Charge,
        hold: Hold | None,
    ) -> AsyncIterator[str]:
        call = ModelCall(
            model,
            messages,
            self.settings.model_timeout,
            max_tokens=self.settings.max_tokens,
            tools=tools,
            charge=charge,
            hold=hold,
        )
        if chain is None:
            return self.models.stream(call, usage, calls)
        return self.models.stream_response(call, usage, chain, calls)


async def generate(
    pieces: AsyncIterator[str], stream: ReplyStream, running: RunningTurn
) -> TurnResult:
    """Feed `pieces` to `stream` until they end, the turn is stopped or its lease is lost."""

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

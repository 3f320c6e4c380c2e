"""A main turn's tool loop: the model asks for tools, they run, the results go back.

    step: call the model with the tools -> it asks for none: that answer is the reply
          -> record its calls (the loop opens) -> run them at once, recording each
             result as it arrives -> call the model again
    after GATEWAY_TOOL_MAX_STEPS steps: one last call without tools, and a note

Every step is recorded in the history under the turn's lease, epoch and
`answered` mark (`SessionStore.record_steps`), so a run that dies mid-loop is
resumed by the next: a call whose result is recorded is never run again. A call
recorded without a result was in flight when the run died: a read-only tool
runs again, any other gets a result saying it was interrupted and may or may
not have taken effect. While the loop is open the claim leaves new messages in
the inbox: they are the next turn's, after this one's answer.

Long because: the steps, their recording and the resume all read and write
one `LoopState` under the same fences, and parted they would pass it back and
forth; the entry and message builders at the end are its only free-standing
helpers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gateway.approvals.waiting import Asker, Confirmations
from gateway.context.compiler import NO_RESULT
from gateway.delivery.stream import ReplyStream
from gateway.errors import LeaseLost
from gateway.models import Message, ResponseChain, ToolCall
from gateway.ports import Sender
from gateway.state.session import Claim, Entry, SessionStore, new_entry_id
from gateway.tools import ToolResult
from gateway.tools.spec import openai_tool
from gateway.turn import timeline
from gateway.turn.generation import LEASE_LOST, Generation
from gateway.turn.types import AnsweringTurn, RunningTurn, TurnResult

if TYPE_CHECKING:
    from gateway.tools import ToolServers

log = logging.getLogger(__name__)

STEP_LIMIT_NOTE = "_(stopped after {steps} tool steps: the step limit)_"
INTERRUPTED = (
    "[{name} was interrupted before its result was recorded; it may or may not have "
    "taken effect. It was not run again.]"
)
STOPPED_RESULT = "[the call was cancelled: the user stopped the turn]"
STATUS_PERIOD = 1.0  # how often the status line's clock moves
NOT_ALLOWED = "[{name} is not allowed in this conversation; it was not run.]"

# Whether a tool (its public name, its server) may be offered and run in the turn's
# conversation: its settings by scope (`SessionSettings.allows_tool`).
ToolFilter = Callable[[str, str], bool]


@dataclass
class LoopState:
    """One run of a turn's loop: where its history ends and what the model is sent next."""

    session_key: str
    token: str
    claim: Claim
    length: int
    messages: list[Message]
    chain: ResponseChain | None
    asker: Asker
    sender: Sender
    allows: ToolFilter
    steps: int = 0
    system: list[Message] = field(default_factory=list)
    stream: ReplyStream | None = None  # where the calls show as steps


@dataclass(frozen=True)
class LoopResult:
    """The turn's answer, the chain it ended on, and the history's length after its steps;
    `waiting` when a call waits for its approval (the turn ends unrecorded)."""

    result: TurnResult
    chain: ResponseChain | None
    length: int
    waiting: bool = False


class ToolLoop:
    """Runs main turns that may call tools; shared by all of one worker's turns."""

    def __init__(
        self,
        sessions: SessionStore,
        generation: Generation,
        servers: ToolServers,
        max_steps: int,
        confirmations: Confirmations | None = None,
    ) -> None:
        self.sessions, self.generation, self.servers = sessions, generation, servers
        self.max_steps, self.confirmations = max_steps, confirmations

    async def run(self, answering: AnsweringTurn) -> LoopResult:
        """Answer the turn, calling tools as the model asks (those its settings allow),
        from where a dead run left off."""
        state = self._state(answering)
        stream = answering.stream
        running, view = answering.turn.running, answering.prepared.view
        if await self._resume(state, view.entries, stream, running):
            return LoopResult(TurnResult(stream.text), state.chain, state.length, waiting=True)
        while state.steps < self.max_steps:
            calls: list[ToolCall] = []
            tools = self._offered(state)
            result = await self._step(state, answering, tools, calls)
            if not calls or not result.whole:
                return LoopResult(result, state.chain, state.length)
            if await self._run_step(state, calls, result.text, stream, running):
                return LoopResult(TurnResult(stream.text), state.chain, state.length, waiting=True)
            if running.stop.is_set():
                return LoopResult(TurnResult(stream.text, stopped=True), state.chain, state.length)
        result = await self._step(state, answering, None, None)
        if result.whole:
            note = STEP_LIMIT_NOTE.format(steps=state.steps)
            result = TurnResult(f"{result.text.rstrip()}\n\n{note}")
        return LoopResult(result, state.chain, state.length)

    def _state(self, answering: AnsweringTurn) -> LoopState:
        turn, prepared = answering.turn, answering.prepared
        messages = [dict(m) for m in prepared.request.messages]  # placeholders get filled in
        system = [m for m in messages if m.get("role") == "system"]
        return LoopState(
            turn.session_key,
            turn.lease.token,
            turn.claim,
            turn.claim.length,
            messages,
            self.generation.chain(prepared),
            answering.asker,
            answering.stream.sender,
            answering.settings.allows_tool,
            system=system,
            stream=answering.stream,
        )

    def _offered(self, state: LoopState) -> list[dict[str, Any]] | None:
        """The tools of servers that are up which this conversation allows; None for none."""
        specs = [s for s in self.servers.tools() if state.allows(s.name, s.server)]
        return [openai_tool(spec) for spec in specs] or None

    async def _step(
        self,
        state: LoopState,
        answering: AnsweringTurn,
        tools: list[dict[str, Any]] | None,
        calls: list[ToolCall] | None,
    ) -> TurnResult:
        """One model call; the text it streams is this step's (the stream shows them all)."""
        stream, running = answering.stream, answering.turn.running
        before = len(stream.text)
        result = await self.generation.step(answering, state.messages, state.chain, tools, calls)
        if running.reason == LEASE_LOST:
            raise LeaseLost(f"lease of {state.session_key} expired during a tool step")
        if not calls:
            return result
        return TurnResult(stream.text[before:], result.error, result.stopped)

    async def _run_step(
        self,
        state: LoopState,
        calls: list[ToolCall],
        text: str,
        stream: ReplyStream,
        running: RunningTurn,
    ) -> bool:
        """Record the model's calls, run them, record and send back their results;
        True when a call waits for its approval."""
        step = _step_entry(state.claim.turn_id, text, calls)
        await self._record(state, [step])
        state.steps += 1
        state.messages.append(_assistant_message(text, calls))
        results, waiting = await self._execute(state, calls, stream, running, resumed=False)
        if not waiting:
            self._answer(state, calls, results)
        return waiting

    async def _execute(
        self,
        state: LoopState,
        calls: Sequence[ToolCall],
        stream: ReplyStream,
        running: RunningTurn,
        *,
        resumed: bool,
    ) -> tuple[dict[str, ToolResult], bool]:
        """Run what may run now. Calls that need the asker's approval go through the
        gate; in a resumed run, a call without a result that may have had an effect
        is not run again; a call this conversation does not allow is answered so, unrun.
        Returns the results and whether an approval is awaited."""
        for call in calls:
            if call.id not in stream.steps:
                stream.set_step(timeline.pending(call))
        results = await self._refuse_disallowed(state, calls)
        gated = [c for c in calls if c.id not in results and self._needs_confirmation(c.name)]
        free = [c for c in calls if c.id not in results and c not in gated]
        again = [c for c in free if not resumed or self._read_only(c.name)]
        if again:
            results |= await self._run_calls(state, again, stream, running)
        for call in free:
            if call.id not in results:
                interrupted = ToolResult(INTERRUPTED.format(name=call.name), "interrupted")
                await self._settle(state, call, interrupted, results)
        if not gated or running.stop.is_set():
            return results, False
        assert self.confirmations is not None  # `_needs_confirmation` says so
        gate = await self.confirmations.gate(
            state.session_key, state.claim.turn_id, gated, state.asker, state.sender
        )
        for call in gated:
            if call.id in gate.settled:
                await self._settle(state, call, gate.settled[call.id], results)
        ran = await self._run_calls(state, gate.to_run, stream, running) if gate.to_run else {}
        for call in gate.to_run:
            results[call.id] = ran[call.id]
            await self.confirmations.settle(
                state.session_key, state.claim.turn_id, call, ran[call.id], state.sender
            )
        return results, gate.waiting

    async def _refuse_disallowed(
        self, state: LoopState, calls: Sequence[ToolCall]
    ) -> dict[str, ToolResult]:
        """A result recorded for each call of a tool this conversation does not allow."""
        results: dict[str, ToolResult] = {}
        for call in calls:
            if not self._allowed(state, call.name):
                results[call.id] = ToolResult(NOT_ALLOWED.format(name=call.name), "unknown")
                await self._record_result(state, call, results[call.id])
        return results

    async def _settle(
        self, state: LoopState, call: ToolCall, result: ToolResult, results: dict[str, ToolResult]
    ) -> None:
        """A result the call did not produce itself (refused, interrupted): recorded."""
        results[call.id] = result
        await self._record_result(state, call, result)
        if self.confirmations is not None and self._needs_confirmation(call.name):
            await self.confirmations.settle(
                state.session_key, state.claim.turn_id, call, result, state.sender
            )

    async def _run_calls(
        self,
        state: LoopState,
        calls: Sequence[ToolCall],
        stream: ReplyStream,
        running: RunningTurn,
    ) -> dict[str, ToolResult]:
        """Run `calls` concurrently, each result recorded as it arrives; on /stop the
        calls still running are cancelled and recorded as such."""
        results: dict[str, ToolResult] = {}
        tasks: dict[asyncio.Task[ToolResult], ToolCall] = {}
        names = ", ".join(f"`{name}`" for name in dict.fromkeys(c.name for c in calls))
        status = asyncio.create_task(_show_status(stream, names))
        try:
            await asyncio.sleep(0)  # the status line is set
            await stream.posted()  # on screen, its id stored, before any call takes effect
            await stream.platform_status(f"is running {names}…")  # a post may clear it
            for call in calls:
                stream.set_step(timeline.running(call))
            tasks = {asyncio.create_task(self.servers.call(c.name, c.arguments)): c for c in calls}
            pending = set(tasks)
            while pending:
                done, pending = await _next_done(pending, running)
                for task in done:
                    results[tasks[task].id] = task.result()
                    await self._record_result(state, tasks[task], task.result())
                if running.stop.is_set() and pending:
                    await _cancel(pending)
                    if running.reason == LEASE_LOST:
                        raise LeaseLost(f"lease of {state.session_key} lost during a tool call")
                    await self._stop_rest(state, [tasks[t] for t in pending], results)
                    pending = set()
        finally:
            await _cancel(set(tasks) | {status})
            stream.set_status("")
            await stream.platform_status("")  # "" goes back to thinking
        return results

    async def _stop_rest(
        self, state: LoopState, calls: Sequence[ToolCall], results: dict[str, ToolResult]
    ) -> None:
        for call in calls:
            results[call.id] = ToolResult(STOPPED_RESULT, "cancelled")
            await self._record_result(state, call, results[call.id])

    def _answer(
        self, state: LoopState, calls: Sequence[ToolCall], results: dict[str, ToolResult]
    ) -> None:
        """What the next call sends: everything so far, or (on a provider's chain) the
        system prompt and the results, on the response that asked for them."""
        tool_messages = [_tool_message(c.id, results[c.id].text) for c in calls]
        state.messages.extend(tool_messages)
        if state.chain is not None and state.chain.response_id:
            state.chain = ResponseChain(state.chain.response_id)
            state.messages = [*state.system, *tool_messages]

    async def _resume(
        self,
        state: LoopState,
        entries: Sequence[Entry],
        stream: ReplyStream,
        running: RunningTurn,
    ) -> bool:
        """Take up the steps an earlier run of this turn recorded: count them, and give
        each call it left without a result one (`_execute`, as resumed). True when a
        call still waits for its approval."""
        mine = [e for e in entries if e.get("turn_id") == state.claim.turn_id]
        steps = [e for e in mine if e.get("role") == "assistant" and e.get("tool_calls")]
        if not steps:
            return False
        state.steps = len(steps)
        answered = {e.get("tool_call_id") for e in mine if e.get("role") == "tool"}
        open_calls = [
            ToolCall(str(c.get("id")), str(c.get("name")), str(c.get("arguments") or "{}"))
            for c in steps[-1]["tool_calls"]
            if c.get("id") not in answered
        ]
        if not open_calls:
            return False
        log.info("%s: resuming a tool loop with %d open calls", state.session_key, len(open_calls))
        results, waiting = await self._execute(state, open_calls, stream, running, resumed=True)
        _fill_placeholders(state.messages, results)
        return waiting

    def _allowed(self, state: LoopState, name: str) -> bool:
        spec = self.servers.spec(name)
        return spec is None or state.allows(spec.name, spec.server)  # unknown: the server says

    def _read_only(self, name: str) -> bool:
        spec = self.servers.spec(name)
        return spec is not None and spec.read_only

    def _needs_confirmation(self, name: str) -> bool:
        spec = self.servers.spec(name)
        return self.confirmations is not None and spec is not None and spec.needs_confirmation

    async def _record_result(self, state: LoopState, call: ToolCall, result: ToolResult) -> None:
        """A call's result recorded, and its step on the reply's timeline finished."""
        await self._record(state, [_result_entry(state, call, result)])
        if state.stream is not None:
            state.stream.set_step(timeline.finished(call, result))

    async def _record(self, state: LoopState, entries: list[Entry]) -> None:
        length = await self.sessions.record_steps(
            state.session_key, state.token, state.claim, state.length, entries, loop_open=True
        )
        if length is None:
            raise LeaseLost(f"{state.session_key}: a tool step could not be recorded")
        state.length = length


async def _next_done(
    pending: set[asyncio.Task[ToolResult]], running: RunningTurn
) -> tuple[set[asyncio.Task[ToolResult]], set[asyncio.Task[ToolResult]]]:
    """The calls done so far, or none when the turn was stopped (or lost its lease) first."""
    stopping = asyncio.create_task(running.stop.wait())
    losing = asyncio.create_task(running.lease.lost.wait())
    try:
        await asyncio.wait({*pending, stopping, losing}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await _cancel({stopping, losing})
    if running.lease.lost.is_set():
        running.request_stop(LEASE_LOST)
    done = {task for task in pending if task.done()}
    return done, pending - done


async def _cancel(tasks: set[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(*tasks, return_exceptions=True)


async def _show_status(stream: ReplyStream, shown: str) -> None:
    """A status line under the reply while the tools run: which, and for how long."""
    started = time.monotonic()
    while True:
        seconds = int(time.monotonic() - started)
        stream.set_status(f"_⚙️ running {shown} ({seconds} s)_")
        await asyncio.sleep(STATUS_PERIOD)


def _step_entry(turn_id: str, text: str, calls: Sequence[ToolCall]) -> Entry:
    return {
        "id": new_entry_id(),
        "role": "assistant",
        "text": text,
        "turn_id": turn_id,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls],
        "at": time.time(),
    }


def _result_entry(state: LoopState, call: ToolCall, result: ToolResult) -> Entry:
    return {
        "id": new_entry_id(),
        "role": "tool",
        "tool_call_id": call.id,
        "name": call.name,
        "text": result.text,
        "outcome": result.outcome,
        "turn_id": state.claim.turn_id,
        "at": time.time(),
    }


def _assistant_message(text: str, calls: Sequence[ToolCall]) -> Message:
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ],
    }


def _tool_message(call_id: str, text: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _fill_placeholders(messages: list[Message], results: dict[str, ToolResult]) -> None:
    """The compiled request held a placeholder for each call without a result: now it has one."""
    for message in messages:
        call_id = message.get("tool_call_id")
        if message.get("role") == "tool" and call_id in results and message["content"] == NO_RESULT:
            message["content"] = results[call_id].text

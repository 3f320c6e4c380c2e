"""Tool calls that wait for the asker's approval, inside a turn's tool loop.

    a call that needs confirmation -> no approval yet: ask (buttons), the loop waits
                                   -> pending: still waiting
                                   -> approved: marked running, run, result recorded
                                   -> declined or timed out: a result that says so
                                   -> running (a run died during it): interrupted

While any call of a step waits, the turn ends without recording: its lease is
released and its job completed, so the session holds no worker. The click (or
the deadline, `ApprovalStore.expire_due`) enqueues the turn again; that run
finds the recorded step and comes back here with the decision.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from gateway.approvals.store import Approval, ApprovalStore, Status
from gateway.errors import PlatformError
from gateway.messages import Address
from gateway.models import ToolCall
from gateway.ports import Sender
from gateway.tools import ToolResult

log = logging.getLogger(__name__)

ARGUMENTS_SHOWN = 1_500  # characters of arguments in the request; the rest is cut
DECLINED = "[not run: {who} declined this call]"
TIMED_OUT = "[not run: nobody approved this call within {span}]"
INTERRUPTED_APPROVED = (
    "[the approved call was interrupted before its result was recorded; it may or may "
    "not have taken effect. It was not run again.]"
)


@dataclass(frozen=True)
class Asker:
    """Whose message led to the tool calls, and where the approval request goes."""

    user_id: str
    name: str
    address: Address


@dataclass(frozen=True)
class Gate:
    """A step's calls sorted by where their approvals stand."""

    to_run: list[ToolCall]  # approved now: run them
    settled: dict[str, ToolResult]  # declined, timed out or interrupted: their results
    waiting: bool  # some call still waits for its approval


class Confirmations:
    """Asks for approvals and reads their outcome; shared by a worker's turns."""

    def __init__(self, store: ApprovalStore, timeout: float) -> None:
        self.store, self.timeout = store, timeout

    async def gate(
        self,
        session_key: str,
        turn_id: str,
        calls: list[ToolCall],
        asker: Asker,
        sender: Sender,
    ) -> Gate:
        """Where each of `calls` (all needing confirmation) stands; asks for the new ones."""
        to_run: list[ToolCall] = []
        settled: dict[str, ToolResult] = {}
        waiting = False
        for call in calls:
            approval = await self.store.get(session_key, turn_id, call.id)
            if approval is None:
                await self._ask(session_key, turn_id, call, asker, sender)
                waiting = True
            elif approval.status is Status.PENDING:
                waiting = True
            elif approval.status is Status.APPROVED:
                await self.store.mark_running(session_key, approval.approval_id)
                to_run.append(call)
            else:
                settled[call.id] = _refusal(approval, asker, self.timeout)
        return Gate(to_run, settled, waiting)

    async def settle(
        self, session_key: str, turn_id: str, call: ToolCall, result: ToolResult, sender: Sender
    ) -> None:
        """The request's message shows the outcome, without buttons; the record goes."""
        approval = await self.store.get(session_key, turn_id, call.id)
        if approval is None:
            return
        if approval.message_id is not None:
            text = f"{_summary(approval.tool, approval.arguments)}\n\n{_outcome(approval, result)}"
            try:
                await sender.settle_approval(approval.address, approval.message_id, text)
            except PlatformError as exc:
                log.warning("approval request in %s not updated: %s", session_key, exc)
        await self.store.close(session_key, approval.approval_id)

    async def _ask(
        self, session_key: str, turn_id: str, call: ToolCall, asker: Asker, sender: Sender
    ) -> None:
        approval_id = await self.store.open(
            session_key,
            turn_id,
            call.id,
            call.name,
            call.arguments,
            asker.user_id,
            asker.address,
            self.timeout,
        )
        text = f"{_summary(call.name, call.arguments)}\n\nApprove this call, {asker.name}?"
        message_id = await sender.ask_approval(asker.address, text, approval_id)
        await self.store.set_message(session_key, approval_id, message_id)
        log.info("%s: approval %s asked for %s", session_key, approval_id, call.name)


def _refusal(approval: Approval, asker: Asker, timeout: float) -> ToolResult:
    if approval.status is Status.DECLINED:
        return ToolResult(DECLINED.format(who=asker.name or "the user"), "declined")
    if approval.status is Status.TIMEOUT:
        return ToolResult(TIMED_OUT.format(span=_span(timeout)), "declined")
    return ToolResult(INTERRUPTED_APPROVED, "interrupted")  # running when a run died


def _span(seconds: float) -> str:
    """A deadline as people say it: "45 seconds", "1 minute", "10 minutes"."""
    count, unit = (round(seconds), "second") if seconds < 60 else (round(seconds / 60), "minute")
    count = max(count, 1)
    return f"{count} {unit}" if count == 1 else f"{count} {unit}s"


def _summary(tool: str, arguments: str) -> str:
    """The tool and its arguments, as the request shows them."""
    try:
        shown = json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        shown = arguments
    if len(shown) > ARGUMENTS_SHOWN:
        shown = f"{shown[:ARGUMENTS_SHOWN]}\n… ({len(shown) - ARGUMENTS_SHOWN} more characters)"
    shown = shown.replace("```", "`\u200b``")  # the arguments cannot close the block
    return f"🔧 **{tool}** asks to run with:\n```json\n{shown}\n```"


def _outcome(approval: Approval, result: ToolResult) -> str:
    if result.outcome == "declined":
        return "❌ Declined." if approval.status is Status.DECLINED else "⌛ Not approved in time."
    return "✅ Approved and run." if result.outcome == "ok" else f"✅ Approved; {result.outcome}."

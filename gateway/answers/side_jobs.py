"""The answers of the jobs that are not turns: a side question's, `/status`,
`/usage` and `/config`; and `send`, the one way a worker posts such a text.

A side question takes no lease: it reads a snapshot of the session (the newest
summary, the entries after it, the inbox and the reply being written) and is
answered by one model call while the main turn goes on; its answer is never
written into the history. What the answers share with the worker's turns (the
settings by scope, the budgets, the compressor's count) comes in as `TurnParts`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from gateway import tools
from gateway.answers import config_command, side_question
from gateway.answers.config_command import ConfigAsk
from gateway.context.compiler import split_view
from gateway.context.compression import Compressor
from gateway.context.transcript import render_transcript
from gateway.delivery.pacing import SendPacing
from gateway.delivery.stream import deliver, finder
from gateway.errors import ModelError, PlatformError
from gateway.media.pipeline import MediaPipeline
from gateway.messages import Address
from gateway.metrics import Metrics
from gateway.models import Charge, ModelCall, Models
from gateway.ports import AdminCheck, Sender
from gateway.settings.env import Settings
from gateway.settings.scoped import ScopedSettings, SessionSettings
from gateway.spend.budgets import Budgets, spend_hold
from gateway.spend.usage import UsageLedger, usage_text
from gateway.state.jobs import Job
from gateway.state.session import SessionStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TurnParts:
    """What the answers share with the worker's turns: the settings by scope (one copy a
    process), the budgets priced for it, and the compressor whose count `/status` gives."""

    scoped: ScopedSettings
    caps: Budgets
    compressor: Compressor


class Answers:
    """Side questions and command replies; shared by all of one worker's jobs."""

    def __init__(
        self,
        settings: Settings,
        sessions: SessionStore,
        models: Models,
        media: MediaPipeline,
        parts: TurnParts,
        tools: tools.ToolServers | None,
        senders: Mapping[str, Sender],
        pacing: SendPacing,
        metrics: Metrics,
        ledger: UsageLedger,
    ) -> None:
        self.settings, self.sessions, self.models, self.media = settings, sessions, models, media
        self.parts, self.tools, self.senders = parts, tools, senders
        self.pacing, self.metrics, self.ledger = pacing, metrics, ledger

    async def side(self, job: Job) -> None:
        """A side question, answered from a read-only snapshot by a one-shot model call."""
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
            max_chars=self.settings.side_transcript_budget,
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
            async with spend_hold(self.parts.caps.limited(settings.budgets), call) as hold:
                answer, _ = await self.models.complete(replace(call, hold=hold))
            body, outcome = answer.strip() or "_(the side model returned an empty answer)_", "ok"
            body += f"\n\n⚠️ {hold.warning}" if hold is not None and hold.warning else ""
        except ModelError as exc:
            body, outcome = side_question.failure_text(exc), "failed"
        await self.send(address, f"{marker}\n\n{body}", job)
        asker = str(job.payload.get("speaker") or job.payload.get("user") or "")
        await self.sessions.note_side_answer(
            key, {"at": time.time(), "who": asker, "question": question, "answer": body}
        )
        await self.metrics.count("side", outcome)
        log.info("side question in %s %s in %.2fs", key, outcome, time.monotonic() - started)

    async def status(self, job: Job) -> None:
        key = job.session_key
        view = await self.sessions.view(key)  # what the next turn sends, compressed
        messages = int(view.meta.get("answered", 0) or 0)
        queued = len(await self.sessions.inbox(key))
        await self.parts.compressor.warm()
        tokens = await self.parts.compressor.tokens(view, group=True)
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
        await self.send(Address.model_validate(job.payload["address"]), text, job)

    async def config(self, job: Job) -> None:
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
        answer = await config_command.answer(self.parts.scoped, admins, ask)
        await self.send(address, answer, job)

    async def _settings(self, session_key: str) -> SessionSettings:
        """The session's settings by scope, for a job that claims nothing (one GET)."""
        await self.parts.scoped.fresh()
        return self.parts.scoped.resolve(session_key)

    async def usage(self, job: Job) -> None:
        user = str(job.payload.get("user") or "")
        text = await usage_text(self.ledger, job.session_key, user)
        await self.send(Address.model_validate(job.payload["address"]), text, job)

    async def send(self, address: Address, text: str, job: Job | None = None) -> None:
        """Post `text` through the chat's send pacing; a platform that refuses is logged.

        A job's answer is posted under a key of its own (the job's id): where the
        platform makes a post idempotent it is not shown twice, and a re-run of the job
        looks for it first where the platform lets it.
        """
        sender = self.senders[address.platform]
        key = None if job is None else f"{job.session_key}:{job.id}"
        find = None if job is None else finder(sender, job.deliveries > 1)
        try:
            await deliver(sender, address, text, self.pacing, key=key, find=find)
        except PlatformError as exc:
            log.error("could not send to %s: %s", address.chat_key, exc)
            await self.metrics.count("errors", "delivery")


def files_line(kept: Mapping[str, int]) -> str:
    """The files a conversation keeps, by kind."""
    names = {"image": "image", "voice": "voice message", "file": "document"}
    parts = [f"{n} {names.get(kind, kind)}{'s' * (n != 1)}" for kind, n in sorted(kept.items())]
    return f"Files kept: {', '.join(parts)}."


def tools_line(servers: tools.ToolServers, settings: SessionSettings) -> str:
    """The tools the model may call here, and the servers it cannot reach now."""
    allowed = [spec for spec in servers.tools() if settings.allows_tool(spec.name, spec.server)]
    names = ", ".join(f"`{spec.name}`" for spec in allowed) or "none"
    down = servers.down()
    return f"Tools: {names}" + (f" (unavailable now: {', '.join(down)})" if down else "")

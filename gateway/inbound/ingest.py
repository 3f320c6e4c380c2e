"""The one door every adapter calls: dedupe, commands, rate limits, append and enqueue;
the clicks on approval buttons (`decide`) and on a reply's feedback buttons (`feedback`).

Who may use the bot, and what a refused user is told, is `access.py`'s; ingest
answers a refused speaker with its notice job.

Nothing here calls a model or a platform: replies that ingest decides on (a
refusal, a command's answer) become jobs for a worker, so an adapter can
acknowledge its platform within milliseconds.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from redis.asyncio import Redis

from gateway.approvals.store import ApprovalStore
from gateway.feedback.store import FeedbackStore, FeedbackVerdict
from gateway.inbound import commands
from gateway.inbound.access import Access
from gateway.inbound.commands import Command
from gateway.inbound.rate_limit import RateLimiter
from gateway.messages import Address, Decision, FeedbackClick, Inbound
from gateway.metrics import Metrics
from gateway.settings.env import Settings
from gateway.state.keys import Keys
from gateway.state.replicas import ReplicaWait
from gateway.state.session import SessionStore

log = logging.getLogger(__name__)

_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class Verdict(StrEnum):
    """What became of a click on an approval request (`Ingest.decide`)."""

    APPROVED = "approved"  # the turn goes on and runs the tool
    DECLINED = "declined"  # the turn goes on without it
    NOT_YOURS = "not yours"  # someone other than the asker clicked: refuse them, briefly
    CLOSED = "closed"  # decided already, timed out, reset, or unknown: nothing changes


NOT_YOURS_TEXT = "Only the person who asked can approve or decline this."
CLOSED_TEXT = "This request is no longer open."


class Receipt(StrEnum):
    """What became of one inbound message: queued for a turn, a command answered...."""

    QUEUED = "queued"
    DUPLICATE = "duplicate"
    IGNORED = "ignored"
    REFUSED = "refused"
    COMMAND = "command"
    SIDE = "side"
    LIMITED = "limited"  # over a rate limit: nothing written, the sender told once


def clean_text(text: str) -> str:
    """Lone surrogates become U+FFFD; control characters other than tab and newline go."""
    return _CONTROL.sub("", _LONE_SURROGATE.sub("\ufffd", text))


class Ingest:
    """Turns a normalized message into session state and jobs."""

    def __init__(
        self, settings: Settings, redis: Redis, streams: Mapping[str, str] | None = None
    ) -> None:
        self.settings = settings
        self.redis = redis
        self.sessions = SessionStore(redis, streams)
        self.approvals = ApprovalStore(redis, self.sessions)
        self.feedback_store = FeedbackStore(redis)
        self.rate_limits = RateLimiter(redis, settings.rate_user, settings.rate_conversation)
        self.metrics = Metrics(redis)
        self.access = Access(settings, redis)
        self.replicas = ReplicaWait.of(redis, settings.replica_wait)

    async def receive(self, inbound: Inbound) -> Receipt:
        """What became of the message, once it is stored (and, with
        GATEWAY_REDIS_WAIT_REPLICAS, once replicas have it: a platform may then
        acknowledge it). A retried delivery waits again, finding it stored."""
        if inbound.speaker.is_bot:
            return Receipt.IGNORED
        receipt = await self._receive(inbound)
        key = inbound.session_key
        # What was stored is marked seen, and that mark must be on the primary that answers.
        written = receipt not in (Receipt.IGNORED, Receipt.LIMITED)
        await self.replicas.confirm(
            Keys.meta(key), Keys.seen(key, inbound.event_id) if written else None
        )
        return receipt

    async def _receive(self, inbound: Inbound) -> Receipt:
        inbound = inbound.model_copy(update={"text": clean_text(inbound.text)})
        command = commands.parse(inbound.text)
        if not await self._addressed(inbound):
            return Receipt.IGNORED
        allowed = await self.access.admits(inbound)
        if command is None and allowed:
            return await self._message(inbound)  # dedupes inside its one atomic step
        if not await self.sessions.first_delivery(inbound):
            return Receipt.DUPLICATE
        if not allowed:
            return await self._refuse(inbound)
        assert command is not None
        return await self._command(inbound, command)

    async def decide(self, decision: Decision) -> Verdict:
        """A click on an approval request's button: settle it when its asker clicked.

        The session comes from the approval id (a button's payload carries nothing
        else). A stranger, who may not use the bot here, is told "not yours" like
        anyone else who is not the asker, and nothing changes.
        """
        if not await self.access.admits_user(decision.platform, decision.user_id):
            log.info("approval click by a stranger refused: %s", decision.approval_id)
            return Verdict.NOT_YOURS
        session_key = await self.approvals.session_of(decision.approval_id)
        if session_key is None:
            return Verdict.CLOSED
        verdict = Verdict(await self.approvals.decide(decision, session_key))
        await self.replicas.confirm(Keys.meta(session_key))
        log.info("approval %s in %s: %s", decision.approval_id, session_key, verdict)
        return verdict

    async def feedback(self, click: FeedbackClick) -> FeedbackVerdict:
        """A click on a reply's thumbs up or down: recorded when its clicker may use the
        bot (a stranger's changes nothing), once per clicker and reply."""
        if not await self.access.admits_user(
            click.platform, click.user_id, external=click.external
        ):
            log.info("feedback click by a stranger refused: %s", click.message_id)
            return FeedbackVerdict.REFUSED
        verdict = await self.feedback_store.record(
            click.platform, click.channel, click.message_id, click.user_id, click.value
        )
        log.info("feedback on %s:%s: %s", click.channel, click.message_id, verdict)
        return verdict

    async def latest_session(self, channel_key: str) -> str | None:
        """The most recently active session in a channel (Slack's `/btw` applies to it)."""
        return await self.sessions.latest_in_channel(channel_key)

    async def stop(self, session_key: str) -> bool:
        """`/stop`: cancels the session's running turn, wherever it runs; whether one was."""
        running = await self.sessions.is_running(session_key)
        await self._cancel(session_key)
        return running

    async def reset(self, session_key: str) -> None:
        """`/reset`: the running turn cancelled, and a fresh conversation."""
        await self._cancel(session_key)
        await self.sessions.reset(session_key)

    async def _addressed(self, inbound: Inbound) -> bool:
        if inbound.is_dm or inbound.mentions_bot or inbound.replies_to_bot:
            return True
        if inbound.media_group and await self._album_addressed(inbound):
            return True  # a further item of an album whose first item mentioned the bot
        return inbound.follows_thread and await self.sessions.participated(inbound.session_key)

    async def _album_addressed(self, inbound: Inbound) -> bool:
        gathering = await self.redis.get(Keys.album(inbound.session_key))
        return bool(gathering) and gathering == inbound.media_group

    async def _refuse(self, inbound: Inbound) -> Receipt:
        first = await self.access.first_refusal(inbound.user_key)
        # A platform interaction (a Discord slash command) waits for an answer of its
        # own, so it is refused every time; plain messages once per window.
        if first or inbound.reply.token is not None:
            await self._notice(inbound, inbound.reply, await self.access.refusal_text(inbound))
        log.info("refused %s in %s", inbound.user_key, inbound.session_key)
        return Receipt.REFUSED

    async def _message(self, inbound: Inbound) -> Receipt:
        if not inbound.text.strip() and not inbound.attachments:
            await self._notice_once(
                inbound, "I got an empty message: write your question and I will answer."
            )
            return Receipt.IGNORED
        limit = self.settings.max_message_chars
        if len(inbound.text) > limit:
            await self._notice_once(
                inbound,
                f"That message is too long "
                f"({len(inbound.text):,} characters; the limit is {limit:,}). "
                "Please shorten it or send it in parts.",
            )
            return Receipt.IGNORED
        if await self._over_rate(inbound, inbound.reply):
            return Receipt.LIMITED
        fresh, _ = await self.sessions.append_user(inbound, self.settings.album_wait)
        return Receipt.QUEUED if fresh else Receipt.DUPLICATE

    async def _over_rate(self, inbound: Inbound, address: Address, seen: bool = False) -> bool:
        """Take a token for the message; when over a limit, mark its event seen (a retry
        is a duplicate) and tell the sender once per window. `seen`: marked already."""
        if not self.rate_limits.active:
            return False
        if inbound.media_group and await self._album_addressed(inbound):
            return False  # a further item of an album counts as the message it joins
        if not seen and not await self.sessions.first_delivery(inbound, mark=False):
            return False  # a retry: the ingest step answers it as a duplicate, taking no token
        refusal = await self.rate_limits.take(inbound)
        if refusal is None:
            return False
        if not seen:
            await self.sessions.first_delivery(inbound)
        # A platform interaction (a Discord slash command) waits for an answer of its own.
        if refusal.tell or address.token is not None:
            await self._notice(inbound, address, refusal.text)
        await self.metrics.count("rate_limited", inbound.platform)
        log.info("over the rate limit: %s in %s", inbound.user_key, inbound.session_key)
        return True

    async def _notice_once(self, inbound: Inbound, text: str) -> None:
        if await self.sessions.first_delivery(inbound):
            await self._notice(inbound, inbound.reply, text)

    async def _command(self, inbound: Inbound, command: Command) -> Receipt:
        key = inbound.session_key
        if command.name == "btw":
            return await self._side_question(inbound, command.argument)
        if command.name == "reset":
            await self.reset(key)
            return await self._notice(inbound, inbound.reply, "Started a fresh conversation.")
        if command.name == "stop":
            running = await self.stop(key)
            text = "Stopping the reply." if running else "Nothing is running."
            return await self._notice(inbound, inbound.reply, text)
        if command.name == "approve":
            return await self._notice(inbound, inbound.reply, await self._approve(inbound, command))
        if command.name in ("status", "usage", "config"):
            payload: dict[str, Any] = {"address": _dump(inbound.reply), "user": inbound.speaker.id}
            if command.name == "config":  # who asks, and whether in a DM, decide who may change
                payload |= {"dm": inbound.is_dm, "argument": command.argument}
            return await self._enqueue(inbound, command.name, payload)
        return await self._notice(inbound, inbound.reply, commands.HELP_TEXT)

    async def _approve(self, inbound: Inbound, command: Command) -> str:
        """`/approve CODE`: an admin (a user the operator named in GATEWAY_ALLOWED_USERS,
        or the console's) lets a stranger in, in a DM, so the code is not shown to a
        group. Wrong codes count toward the same lock as `gateway users approve`."""
        if not self.access.is_admin(inbound):
            return "Only the bot's admins can approve pairing codes."
        if not inbound.is_dm:
            return "Send `/approve CODE` in a direct message with the bot."
        if not command.argument:
            return commands.APPROVE_USAGE
        status, detail = await self.access.pairing.approve(command.argument)
        log.info("pairing code approval by %s: %s", inbound.user_key, status)
        if status == "approved":
            return f"Approved: `{detail}` may use the bot now."
        if status == "locked":
            return f"Too many wrong codes; approving is locked for {detail} s."
        return "No such pending code (or it expired)."

    async def _side_question(self, inbound: Inbound, question: str) -> Receipt:
        if not question:
            return await self._notice(inbound, inbound.side_reply, commands.BTW_USAGE)
        if await self._over_rate(inbound, inbound.side_reply, seen=True):
            return Receipt.LIMITED
        payload = {
            "question": question,
            "address": _dump(inbound.side_reply),
            "speaker": inbound.speaker.name,
            "user": inbound.speaker.id,
        }
        status, _ = await self.sessions.enqueue(
            inbound,
            "side",
            payload,
            side_limit=self.settings.side_max_in_flight,
            side_window=self.settings.side_timeout * 2,
        )
        if status == "busy":
            text = (
                f"Busy: {self.settings.side_max_in_flight} side questions are already being "
                "answered here; ask again in a moment."
            )
            return await self._notice(inbound, inbound.side_reply, text)
        return Receipt.SIDE

    async def _notice(self, inbound: Inbound, address: Address, text: str) -> Receipt:
        return await self._enqueue(inbound, "notice", {"address": _dump(address), "text": text})

    async def _enqueue(self, inbound: Inbound, kind: str, payload: dict[str, Any]) -> Receipt:
        await self.sessions.enqueue(inbound, kind, payload)
        return Receipt.COMMAND

    async def _cancel(self, session_key: str) -> None:
        await self.redis.publish(Keys.CANCEL_CHANNEL, session_key)


def _dump(address: Address) -> dict[str, Any]:
    return address.model_dump(exclude_none=True)

"""A turn's reply on the platform: the stream it is written into, and its final text."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from gateway.delivery.mechanism import FEEDBACK_ALWAYS, Mechanisms, delivered_count
from gateway.delivery.pacing import SendPacing
from gateway.delivery.stream import ReplyStream, finder
from gateway.errors import (
    BudgetExceeded,
    ModelError,
    PlatformError,
    StreamRefused,
)
from gateway.feedback.store import FeedbackStore, Reply
from gateway.messages import Address
from gateway.metrics import Metrics
from gateway.ports import Sender
from gateway.state.session import Claim, Entry, SessionStore, assistant_entry
from gateway.turn.types import TurnResult

log = logging.getLogger(__name__)

STOPPED_NOTE = "\n\n_(stopped)_"
EMPTY_REPLY = "_(the model returned an empty answer)_"


class Replies:
    """Opens turns' reply streams and posts their final texts."""

    def __init__(self, sessions: SessionStore, pacing: SendPacing, metrics: Metrics) -> None:
        self.sessions, self.pacing, self.metrics = sessions, pacing, metrics
        self.mechanisms = Mechanisms(sessions.redis, metrics)
        self.feedback = FeedbackStore(sessions.redis)

    async def open(
        self,
        key: str,
        token: str,
        claim: Claim,
        sender: Sender,
        address: Address,
        user_entry_id: str,
        *,
        recipient: str,
        feedback: bool,
        may_post: Callable[[], Awaitable[bool]] | None = None,
    ) -> ReplyStream:
        """A started stream that stores its message ids (and the user entry they answer)
        and its live text under the lease; each post is named by the session and the
        user entry it answers, the same on every run of the turn. Its mechanism is the
        one `Mechanisms` chooses for this reply; `recipient` is the asker; `feedback`
        whether the settings ask for feedback buttons (mechanisms in FEEDBACK_ALWAYS
        carry them regardless)."""
        mechanism = await self.mechanisms.choose(sender, address, rerun=claim.rerun)

        async def refused(mechanism: str, error: StreamRefused) -> None:
            await self.mechanisms.refused(address, mechanism, error)

        async def store_ids(ids: list[str]) -> None:
            await self.sessions.show_progress(key, token, claim, ids=ids, reply_to=user_entry_id)

        async def show_live(text: str, ids: list[str] | None) -> None:
            await self.sessions.show_progress(
                key, token, claim, text=text, ids=ids, reply_to=user_entry_id
            )

        stream = ReplyStream(
            sender,
            address,
            pacing=self.pacing,
            known_ids=list(claim.ids_for(user_entry_id)),
            on_ids=store_ids,
            on_flush=show_live,
            may_post=may_post,
            post_key=f"{key}:{user_entry_id}",
            # A re-run looks for what its predecessor posted but could not record.
            find=finder(sender, claim.rerun),
            mechanism=mechanism,
            recipient=recipient,
            on_refused=refused,
            feedback=feedback or mechanism in FEEDBACK_ALWAYS,
        )
        stream.start()
        return stream

    async def deliver(
        self, stream: ReplyStream, result: TurnResult, turn_id: str, key: str, *, model: str
    ) -> Entry | None:
        """Post the final text; the assistant entry to record, or None for a failed call.

        A call that failed after some text (a stall, a connection cut midway, a model
        process that died, a chunk it could not read) keeps that text on screen with a
        note that it was cut off and why, and it is recorded as the answer (as after a
        /stop): the history holds what the user saw, so a "go on" has something to go
        on from. Only a call that showed nothing says it could not answer.
        A reply delivered with feedback buttons is registered under its last message,
        with the turn's `model`, so that their clicks find it.
        """
        turn = (key, turn_id, model)
        if result.error is not None:
            log.warning("model failed in %s: %s", key, result.error)
            await self.metrics.count("errors", type(result.error).__name__)
            if result.text.strip():
                text = result.text.strip()
                note = f"\n\n_(the answer was cut off: {result.error.user_text})_"
                ids = await self._finish(stream, f"{text}{note}", turn)
                return assistant_entry(text, turn_id, ids)
            await self._finish(stream, failure_text(result.error), turn)
            return None
        text = result.text.strip() or ("" if result.stopped else EMPTY_REPLY)
        shown = f"{text}{STOPPED_NOTE}" if result.stopped else text
        ids = await self._finish(stream, shown.strip(), turn)
        return assistant_entry(text, turn_id, ids) if text else None

    async def _finish(
        self, stream: ReplyStream, text: str, turn: tuple[str, str, str]
    ) -> list[str]:
        try:
            ids = await stream.finish(text)
        except PlatformError as exc:
            log.error("could not deliver the reply in %s: %s", stream.address.chat_key, exc)
            await self.metrics.count("errors", "delivery")
            return stream.ids
        address = stream.address
        if not (stream.feedback and ids):
            await self.mechanisms.delivered(address, stream.mechanism)
            return ids
        key, turn_id, model = turn
        reply = Reply(
            address.platform, address.workspace, address.channel, ids[-1], key, turn_id, model
        )
        await self.feedback.register(reply, counted=delivered_count(address, stream.mechanism))
        return ids


def failure_text(error: ModelError) -> str:
    if isinstance(error, BudgetExceeded):
        return f"⚠️ {error.user_text}"  # which budget, and when it resets: trying again won't do
    return f"⚠️ Sorry, I could not answer: {error.user_text}. Please try again in a moment."

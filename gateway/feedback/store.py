"""Feedback on replies: which messages take it, and each clicker's thumbs up or down.

When a reply is delivered with the feedback buttons under its last message, that
message is registered (`FeedbackStore.register`): its session, turn, model, platform
and workspace, for `REPLY_TTL`. A click names only the message it was made on, so
that is the key (`Keys.feedback_reply`). `record` takes a click in one step
(`feedback_record.lua`): one vote per user and reply, which a click of the other
value moves and the same value leaves alone; a message that is not a registered
reply, or a value other than up or down, changes nothing. Every vote is in the log
(`Keys.FEEDBACK_LOG`, kept `LOG_KEEP`) that `gateway feedback` lists, with its
clicker, and counted in `gw:metrics` by platform, workspace, model and value: never
by user.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, cast

from redis.asyncio import Redis

from gateway.state.keys import Keys
from gateway.state.scripts import Arg, load

UP, DOWN = "up", "down"
VALUES = (UP, DOWN)
REPLY_TTL = 30 * 86400  # how long a reply takes clicks after it was delivered
LOG_KEEP = 400 * 86400  # how long the log keeps a vote (as usage is kept)

THANKS_TEXT = "Thanks for the feedback."
REFUSED_TEXT = "Sorry, you are not allowed to use this bot."
UNKNOWN_TEXT = "This reply no longer takes feedback."

RECORD = load("feedback_record")


class FeedbackVerdict(StrEnum):
    """What became of a click on a feedback button (`FeedbackStore.record`)."""

    RECORDED = "recorded"  # the clicker's first vote on this reply
    CHANGED = "changed"  # their vote moved to the other value
    UNCHANGED = "unchanged"  # the same value again: nothing changes
    UNKNOWN = "unknown"  # not a registered reply (never, or expired): nothing changes
    INVALID = "invalid"  # a value other than up or down: nothing changes
    REFUSED = "refused"  # the clicker may not use the bot (`Ingest.feedback`)

    @property
    def counted(self) -> bool:
        """Whether the clicker's vote stands as they clicked it."""
        return self in (
            FeedbackVerdict.RECORDED,
            FeedbackVerdict.CHANGED,
            FeedbackVerdict.UNCHANGED,
        )

    @property
    def text(self) -> str:
        """What the clicker is told, where the platform answers every click."""
        if self.counted:
            return THANKS_TEXT
        return REFUSED_TEXT if self is FeedbackVerdict.REFUSED else UNKNOWN_TEXT


@dataclass(frozen=True, slots=True)
class Reply:
    """A delivered reply that takes feedback, named by its last message."""

    platform: str
    workspace: str
    channel: str
    message_id: str
    session: str
    turn: str
    model: str


@dataclass(frozen=True, slots=True)
class Vote:
    """One clicker's standing vote on one reply, as the log keeps it."""

    at: dt.datetime
    platform: str
    workspace: str
    channel: str
    message_id: str
    session: str
    turn: str
    model: str
    user: str
    value: str

    def as_dict(self) -> dict[str, str]:
        found = asdict(self)
        found["at"] = self.at.isoformat()
        return found


class FeedbackStore:
    """The registered replies, their votes, the log and the counters, in Redis."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self._record = RECORD.bind(redis)

    async def register(self, reply: Reply, counted: tuple[str, str] | None = None) -> None:
        """The reply takes clicks from now for REPLY_TTL. A re-run's delivery of the same
        message registers it again, its votes kept. `counted` (a `Metrics.count` name
        and label) is counted in the same step: the `/metrics` hash is in this slot."""
        key = Keys.feedback_reply(reply.platform, reply.channel, reply.message_id)
        fields = {
            "session": reply.session,
            "turn": reply.turn,
            "model": reply.model,
            "platform": reply.platform,
            "workspace": reply.workspace,
            "channel": reply.channel,
            "message": reply.message_id,
        }
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, items=[part for pair in fields.items() for part in pair])
            pipe.expire(key, REPLY_TTL)
            if counted is not None:
                pipe.hincrby(Keys.METRICS, "|".join(counted), 1)
            await pipe.execute()

    async def record(
        self,
        platform: str,
        channel: str,
        message_id: str,
        user_id: str,
        value: str,
        now: float | None = None,
    ) -> FeedbackVerdict:
        """A click by `user_id` on the message, `value` up or down: its verdict."""
        keys = {
            "reply": Keys.feedback_reply(platform, channel, message_id),
            "log": Keys.FEEDBACK_LOG,
            "metrics": Keys.METRICS,
        }
        at_ms = int((time.time() if now is None else now) * 1000)
        args: dict[str, Arg] = {
            "user": user_id,
            "value": value,
            "now": at_ms,
            "keep_ms": LOG_KEEP * 1000,
        }
        return FeedbackVerdict(await self._record(keys=keys, args=args))

    async def since(self, start: dt.datetime) -> list[Vote]:
        """Every standing vote from `start` on, newest first."""
        floor = int(start.timestamp() * 1000)
        raw = cast(list[str], await self.redis.zrevrangebyscore(Keys.FEEDBACK_LOG, "+inf", floor))
        return [_vote(json.loads(member)) for member in raw]


def _vote(found: dict[str, Any]) -> Vote:
    return Vote(
        at=dt.datetime.fromtimestamp(int(found["at"]) / 1000, dt.UTC),
        platform=str(found["platform"]),
        workspace=str(found["workspace"]),
        channel=str(found["channel"]),
        message_id=str(found["message"]),
        session=str(found["session"]),
        turn=str(found["turn"]),
        model=str(found["model"]),
        user=str(found["user"]),
        value=str(found["value"]),
    )

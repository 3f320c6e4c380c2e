"""Approvals: a destructive tool call waits for its asker's Approve or Decline.

While it waits, nothing holds the session: no lease, no worker slot. The turn
records the request here and ends; the click (or the deadline) settles it and
enqueues a turn job in the same step (`decide.lua`), and that turn reads the
decision and goes on.

A session's approvals live in one hash (`Keys.approvals`), so a reset and
retention remove them with the rest of the session. Its fields, per approval:

    <id>                 the request, as JSON (what `Approval` holds but status
                         and message id: it never changes once written)
    <id>:status          pending | approved | declined | timeout
    <id>:message         the platform id of the message with the buttons
    for:<turn>:<call>    the approval id of that tool call (a re-run asks again
                         and gets the same id back)

Outside the hash: the due index (`Keys.APPROVALS_DUE`) and the lookup a click
finds its session by (`Keys.approval_session`), since a button's payload
carries the approval id only. Both are global, so on a Redis Cluster they are
in other slots than the session's: each is written in a step of its own, before
the request is recorded (an entry for a request that was never recorded, or
was settled, finds nothing pending when its deadline comes and is dropped), and
removed after it is settled or closed (a removal that never happened is the
same stale entry).
"""

from __future__ import annotations

import json
import logging
import secrets
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import cast

from redis.asyncio import Redis

from gateway.messages import Address, Decision
from gateway.state.keys import DEDUPE_TTL, Keys
from gateway.state.scripts import Arg, load
from gateway.state.session import SessionStore

log = logging.getLogger(__name__)

ID_BYTES = 12  # 16 url-safe characters: short enough for any platform's button payload
LOOKUP_SLACK = 24 * 3600  # the click lookup outlives the deadline by this much
EXPIRE_BATCH = 100


class Status(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DECLINED = "declined"
    TIMEOUT = "timeout"
    RUNNING = "running"  # approved, and its call started: a run that dies must not repeat it


# The verdicts of decide.lua that settled a request (its deadline no longer due).
SETTLED = frozenset({Status.APPROVED, Status.DECLINED, Status.TIMEOUT})


@dataclass(frozen=True, slots=True)
class Approval:
    """One approval request and where it stands."""

    approval_id: str
    session: str
    turn_id: str
    call_id: str
    tool: str
    arguments: str  # the JSON text the model wrote
    asker: str  # the platform user id whose message led to the call
    platform: str
    deadline: float
    status: Status
    message_id: str | None
    address: Address  # where the request was posted, to settle it


def new_approval_id() -> str:
    return secrets.token_urlsafe(ID_BYTES)


def _pointer(turn_id: str, call_id: str) -> str:
    return f"for:{turn_id}:{call_id}"


class ApprovalStore:
    """Every read and write of approval state goes through here."""

    def __init__(self, redis: Redis, sessions: SessionStore) -> None:
        self.redis = redis
        self.sessions = sessions
        self._open = load("approval_open").bind(redis)
        self._decide = load("decide").bind(redis)

    async def open(
        self,
        session_key: str,
        turn_id: str,
        call_id: str,
        tool: str,
        arguments: str,
        asker: str,
        address: Address,
        timeout: float,
    ) -> str:
        """Record a pending approval; returns its id (the same one when this tool call
        of this turn asked before)."""
        approval_id, deadline = new_approval_id(), time.time() + timeout
        record = {
            "session": session_key,
            "turn_id": turn_id,
            "call_id": call_id,
            "tool": tool,
            "arguments": arguments,
            "asker": asker,
            "platform": address.platform,
            "deadline": repr(deadline),
            "address": address.model_dump_json(exclude_none=True),
        }
        member = f"{session_key} {approval_id}"
        # Before the request, so that no pending request lacks its deadline or lookup.
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(Keys.APPROVALS_DUE, {member: deadline})
            lookup_ttl = int(timeout) + LOOKUP_SLACK
            pipe.set(Keys.approval_session(approval_id), session_key, ex=lookup_ttl)
            await pipe.execute()
        args: dict[str, Arg] = {
            "pointer": _pointer(turn_id, call_id),
            "approval_id": approval_id,
            "record": json.dumps(record, ensure_ascii=False),
        }
        found = str(await self._open(keys={"approvals": Keys.approvals(session_key)}, args=args))
        if found != approval_id:  # this call asked before: its first id is in force
            await self.redis.zrem(Keys.APPROVALS_DUE, member)
        return found

    async def set_message(self, session_key: str, approval_id: str, message_id: str) -> None:
        """Remember the message with the buttons, so the outcome can replace them."""
        await self.redis.hset(Keys.approvals(session_key), f"{approval_id}:message", message_id)

    async def get(self, session_key: str, turn_id: str, call_id: str) -> Approval | None:
        """The approval of this tool call of this turn, None when there is none."""
        key = Keys.approvals(session_key)
        approval_id = await self.redis.hget(key, _pointer(turn_id, call_id))
        return await self.by_id(session_key, str(approval_id)) if approval_id else None

    async def by_id(self, session_key: str, approval_id: str) -> Approval | None:
        fields = (approval_id, f"{approval_id}:status", f"{approval_id}:message")
        found = await self.redis.hmget(Keys.approvals(session_key), fields)
        raw, status, message_id = cast(list[str | None], found)
        if raw is None or status is None:
            return None
        record = json.loads(raw)
        return Approval(
            approval_id=approval_id,
            session=record["session"],
            turn_id=record["turn_id"],
            call_id=record["call_id"],
            tool=record["tool"],
            arguments=record["arguments"],
            asker=record["asker"],
            platform=record["platform"],
            deadline=float(record["deadline"]),
            status=Status(status),
            message_id=message_id,
            address=Address.model_validate_json(record["address"]),
        )

    async def pending(self, session_key: str) -> list[str]:
        """The ids of the session's approvals still waiting, oldest request first."""
        fields = cast(dict[str, str], await self.redis.hgetall(Keys.approvals(session_key)))
        waiting = [
            (float(json.loads(fields[name.removesuffix(":status")])["deadline"]), name)
            for name, value in fields.items()
            if name.endswith(":status") and value == Status.PENDING
        ]
        return [name.removesuffix(":status") for _, name in sorted(waiting)]

    async def waiting(self, limit: int) -> list[tuple[str, str]]:
        """Every session's pending approvals, soonest deadline first: (session, id) pairs."""
        found = await self.redis.zrange(Keys.APPROVALS_DUE, 0, limit - 1)
        return [cast(tuple[str, str], tuple(str(m).rsplit(" ", 1))) for m in found]

    async def session_of(self, approval_id: str) -> str | None:
        """The session a click's approval id belongs to (None once it is long gone)."""
        found = await self.redis.get(Keys.approval_session(approval_id))
        return cast(str | None, found)

    async def decide(self, decision: Decision, session_key: str) -> str:
        """Settle a click: returns approved, declined, "not yours" or closed (the
        values of `gateway.inbound.ingest.Verdict`)."""
        status = Status.APPROVED if decision.approve else Status.DECLINED
        return await self._settle(session_key, decision.approval_id, status, decision, time.time())

    async def expire_due(self, now: float) -> list[str]:
        """Settle every approval past its deadline as timed out and enqueue the turns
        that continue them; returns the sessions touched."""
        due = await self.redis.zrangebyscore(
            Keys.APPROVALS_DUE, "-inf", now, start=0, num=EXPIRE_BATCH
        )
        touched: list[str] = []
        for member in cast(list[str], due):
            session_key, _, approval_id = member.rpartition(" ")
            verdict = await self._settle(session_key, approval_id, Status.TIMEOUT, None, now)
            if verdict == Status.TIMEOUT:
                touched.append(session_key)
            else:  # settled meanwhile, or its session reset: nothing to wait for
                await self.redis.zrem(Keys.APPROVALS_DUE, member)
        if touched:
            log.info("approvals timed out in %d session(s)", len(touched))
        return touched

    async def mark_running(self, session_key: str, approval_id: str) -> None:
        """An approved call is about to run. A re-run that finds it so, with no result
        recorded, reports it interrupted instead of running it again."""
        await self.redis.hset(Keys.approvals(session_key), f"{approval_id}:status", Status.RUNNING)

    async def close(self, session_key: str, approval_id: str) -> None:
        """Remove a settled approval once its turn has recorded the outcome."""
        approval = await self.by_id(session_key, approval_id)
        fields = [approval_id, f"{approval_id}:status", f"{approval_id}:message"]
        if approval is not None:
            fields.append(_pointer(approval.turn_id, approval.call_id))
        async with self.redis.pipeline(transaction=False) as pipe:  # each step idempotent
            pipe.hdel(Keys.approvals(session_key), *fields)
            pipe.zrem(Keys.APPROVALS_DUE, f"{session_key} {approval_id}")
            pipe.delete(Keys.approval_session(approval_id))
            await pipe.execute()

    async def _settle(
        self,
        session_key: str,
        approval_id: str,
        status: Status,
        decision: Decision | None,
        now: float,
    ) -> str:
        """One run of decide.lua: a click (`decision`) or, without one, a timeout."""
        # A session key starts with its platform; a click's must be the approval's.
        platform = decision.platform if decision else session_key.split(":", 1)[0]
        event = f"click:{decision.event_id}" if decision else "timeout"  # timeouts: unused
        keys = {
            "approvals": Keys.approvals(session_key),
            "seen": Keys.seen(session_key, event),
            "queued": Keys.queued(session_key),
            "stream": self.sessions.stream(platform, session_key),
            "meta": Keys.meta(session_key),
            "sessions": Keys.session_index(session_key),
        }
        args: dict[str, Arg] = {
            "approval_id": approval_id,
            "platform": platform,
            "user": decision.user_id if decision else "",
            "status": str(status),
            "session": session_key,
            "now": now,
            "dedupe_ttl": DEDUPE_TTL,
        }
        verdict = str(await self._decide(keys=keys, args=args))
        if verdict in SETTLED:  # its deadline is no longer due (a step of its own)
            await self.redis.zrem(Keys.APPROVALS_DUE, f"{session_key} {approval_id}")
        return verdict

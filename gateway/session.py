"""A session's state in Redis: history, inbox, metadata, lease, replies, injections.

A user message lands in the session's *inbox* together with a turn job (one
script, so neither exists without the other). A worker that takes the
session's lease moves the inbox into the *history* and answers everything past
the `answered` mark; finishing the turn appends the assistant entry and moves
the mark, all fenced by the lease token and the session's reset epoch, so a
turn is recorded once even when a slow worker and its replacement both finish.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis

from gateway.model import Inbound
from gateway.store import DEDUPE_TTL, Keys

Entry = dict[str, Any]

EARLY_ENTRY_MAX = 64 * 1024  # larger messages are not copied into their job

_INGEST = """
if redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) == false then return {0, false} end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[3], 'updated', ARGV[4])
redis.call('HSETNX', KEYS[3], 'created', ARGV[4])
redis.call('ZADD', KEYS[6], ARGV[4], ARGV[3])
redis.call('ZADD', KEYS[7], ARGV[4], ARGV[3])
local job = false
if redis.call('EXISTS', KEYS[4]) == 0 then
  -- The base a worker may start early from (gateway.early): only when nothing
  -- but this message is waiting and no turn is running.
  local payload = ''
  if ARGV[5] == '1' and redis.call('LLEN', KEYS[2]) == 1 and redis.call('EXISTS', KEYS[8]) == 0
      and redis.call('EXISTS', KEYS[10]) == 0 then
    local base = (redis.call('HGET', KEYS[3], 'epoch') or '0') .. '.' .. redis.call('LLEN', KEYS[9])
    payload = '{"base":"' .. base .. '","entry":' .. ARGV[2] .. '}'
  end
  job = redis.call('XADD', KEYS[5], '*', 'kind', 'turn', 'session', ARGV[3], 'payload', payload)
  redis.call('SET', KEYS[4], job)
  redis.call('HINCRBY', KEYS[3], 'owed', 1)
end
return {1, job}
"""

_ENQUEUE = """
if ARGV[5] ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[6])
  if redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[5]) then return {2, false} end
end
local job = redis.call('XADD', KEYS[1], '*', 'kind', ARGV[2], 'session', ARGV[3],
                      'payload', ARGV[4])
if ARGV[5] ~= '' then redis.call('ZADD', KEYS[3], ARGV[7], job) end
redis.call('HINCRBY', KEYS[2], 'owed', 1)
return {1, job}
"""

_CLAIM = """
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return {0} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', KEYS[2])
while true do
  local entry = redis.call('LPOP', KEYS[3])
  if not entry then break end
  redis.call('RPUSH', KEYS[4], entry)
end
local answered = tonumber(redis.call('HGET', KEYS[5], 'answered') or '0')
local length = redis.call('LLEN', KEYS[4])
local epoch = redis.call('HGET', KEYS[5], 'epoch') or '0'
if length <= answered then return {1, answered, length, epoch} end
if redis.call('EXISTS', KEYS[8]) == 0 and redis.call('EXISTS', KEYS[7]) == 1 then
  redis.call('RENAME', KEYS[7], KEYS[8])
end
local start = tonumber(redis.call('HGET', KEYS[5], 'history_start') or '0')
return {1, answered, length, epoch, redis.call('HGETALL', KEYS[5]),
        redis.call('LRANGE', KEYS[6], -2, -1), redis.call('LRANGE', KEYS[4], start, -1),
        redis.call('LRANGE', KEYS[8], 0, -1),
        redis.call('HGET', KEYS[9], epoch .. '.' .. answered) or ''}
"""

_FINISH = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local epoch = redis.call('HGET', KEYS[2], 'epoch') or '0'
local answered = redis.call('HGET', KEYS[2], 'answered') or '0'
if epoch ~= ARGV[2] or answered ~= ARGV[3] then
  redis.call('DEL', KEYS[1])
  return 0
end
if ARGV[4] ~= '' then
  redis.call('RPUSH', KEYS[3], ARGV[4])
  redis.call('HSET', KEYS[2], 'participated', '1')
end
redis.call('HSET', KEYS[2], 'answered', redis.call('LLEN', KEYS[3]), 'updated', ARGV[5])
redis.call('HINCRBY', KEYS[2], 'turns', 1)
if #ARGV > 6 then redis.call('HSET', KEYS[2], unpack(ARGV, 7)) end
redis.call('HDEL', KEYS[5], ARGV[6])
if ARGV[4] == '' then
  -- No reply was recorded: the turn's injections go back, ahead of newer ones.
  local taken = redis.call('LRANGE', KEYS[6], 0, -1)
  for i = #taken, 1, -1 do redis.call('LPUSH', KEYS[7], taken[i]) end
end
redis.call('DEL', KEYS[1], KEYS[4], KEYS[6])
return 1
"""

_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

_RESET = """
local epoch = redis.call('HINCRBY', KEYS[1], 'epoch', 1)
local owed = redis.call('HGET', KEYS[1], 'owed') or '0'
for i = 2, #KEYS do redis.call('DEL', KEYS[i]) end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'epoch', epoch, 'owed', owed, 'updated', ARGV[1])
return epoch
"""


def new_entry_id() -> str:
    return secrets.token_hex(6)


def user_entry(inbound: Inbound) -> Entry:
    """The history entry of an incoming user message."""
    return {
        "id": new_entry_id(),
        "role": "user",
        "speaker": {"id": inbound.speaker.id, "name": inbound.speaker.name},
        "text": inbound.text,
        "attachments": [a.model_dump(exclude_none=True) for a in inbound.attachments],
        "platform_message_id": inbound.message_id,
        "group": not inbound.is_dm,
        "reply": inbound.reply.model_dump(exclude_none=True),
        "at": inbound.received_at,
    }


def assistant_entry(text: str, turn_id: str, message_ids: list[str]) -> Entry:
    return {
        "id": new_entry_id(),
        "role": "assistant",
        "text": text,
        "turn_id": turn_id,
        "platform_message_ids": message_ids,
        "at": time.time(),
    }


@dataclass(frozen=True, slots=True)
class HistoryView:
    """What a turn is compiled from: `entries` are the history from index `start` on."""

    meta: dict[str, str]
    segments: list[dict[str, Any]]  # the newest (at most two), oldest first
    start: int
    entries: list[Entry]


@dataclass(frozen=True, slots=True)
class Claim:
    """What a worker learns when it takes a session's lease."""

    ok: bool
    answered: int = 0
    length: int = 0
    epoch: str = "0"
    # Read in the same step when there is work: the snapshot the turn is compiled
    # from, its deferred injections, and the platform ids of its reply so far.
    view: HistoryView | None = None
    injections: tuple[str, ...] = ()
    reply_ids: tuple[str, ...] = ()

    @property
    def has_work(self) -> bool:
        return self.length > self.answered

    @property
    def turn_id(self) -> str:
        # Stable across re-runs of the same turn: it names where the turn starts.
        return f"{self.epoch}.{self.answered}"


class SessionStore:
    """Every read and write of session state goes through here."""

    def __init__(self, redis: Redis, streams: Mapping[str, str] | None = None) -> None:
        self.redis = redis
        self.streams = dict(streams or {})
        self._ingest = redis.register_script(_INGEST)
        self._enqueue = redis.register_script(_ENQUEUE)
        self._claim = redis.register_script(_CLAIM)
        self._finish = redis.register_script(_FINISH)
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)
        self._reset = redis.register_script(_RESET)

    async def append_user(self, inbound: Inbound) -> tuple[bool, str | None]:
        """Dedupe, append to the inbox and enqueue a turn unless one is queued: one step.

        Returns (fresh, job id or None when a queued turn will pick it up).
        """
        key = inbound.session_key
        entry = json.dumps(user_entry(inbound), ensure_ascii=False)
        keys = [
            Keys.seen(key, inbound.event_id),
            Keys.inbox(key),
            Keys.meta(key),
            Keys.queued(key),
            self.stream(inbound.platform),
            Keys.SESSIONS,
            Keys.channel_sessions(inbound.channel_key),
            Keys.lease(key),
            Keys.history(key),
            Keys.injections(key),
        ]
        early = "1" if len(entry) <= EARLY_ENTRY_MAX else ""
        args: list[str | int | float] = [DEDUPE_TTL, entry, key, time.time(), early]
        fresh, job = await self._ingest(keys=keys, args=args)
        return bool(fresh), job or None

    def stream(self, platform: str) -> str:
        """The job stream of a platform (a console routes to its own process's stream)."""
        return self.streams.get(platform) or Keys.jobs(platform)

    async def first_delivery(self, inbound: Inbound) -> bool:
        """Mark the platform event as seen; False when it was seen before (a retry)."""
        key = Keys.seen(inbound.session_key, inbound.event_id)
        return bool(await self.redis.set(key, "1", nx=True, ex=DEDUPE_TTL))

    async def enqueue(
        self,
        inbound: Inbound,
        kind: str,
        payload: dict[str, Any],
        *,
        side_limit: int | None = None,
        side_window: float = 0.0,
    ) -> tuple[str, str | None]:
        """Enqueue a job that does not touch history. Returns ("ok"|"busy", job id).

        With `side_limit`, the job counts as a side question in flight and is
        refused ("busy") when that many are already running for the session.
        """
        key = inbound.session_key
        now = time.time()
        keys = [self.stream(inbound.platform), Keys.meta(key), Keys.side_in_flight(key)]
        args = [
            "",
            kind,
            key,
            json.dumps(payload, ensure_ascii=False),
            side_limit or "",
            now - side_window,
            now,
        ]
        status, job = await self._enqueue(keys=keys, args=args)
        return ("busy" if int(status) == 2 else "ok"), job or None

    async def claim(self, session_key: str, token: str, ttl: float) -> Claim:
        """Take the lease and, when there is work, read all a turn starts from: one step.

        The inbox moves into the history; the session's injections become this
        turn's (a re-run of the same turn sees them again).
        """
        keys = [
            Keys.lease(session_key),
            Keys.queued(session_key),
            Keys.inbox(session_key),
            Keys.history(session_key),
            Keys.meta(session_key),
            Keys.segments(session_key),
            Keys.injections(session_key),
            Keys.turn_injections(session_key),
            Keys.replies(session_key),
        ]
        result = await self._claim(keys=keys, args=[token, int(ttl * 1000)])
        if not int(result[0]):
            return Claim(ok=False)
        answered, length, epoch = int(result[1]), int(result[2]), str(result[3])
        if len(result) == 4:
            return Claim(ok=True, answered=answered, length=length, epoch=epoch)
        flat_meta, raw_segments, raw_entries, injections, raw_ids = result[4:]
        meta = dict(zip(flat_meta[::2], flat_meta[1::2], strict=True))
        view = HistoryView(
            meta,
            [json.loads(s) for s in raw_segments],
            int(meta.get("history_start") or 0),
            [json.loads(e) for e in raw_entries],
        )
        ids = tuple(json.loads(raw_ids)) if raw_ids else ()
        return Claim(True, answered, length, epoch, view, tuple(injections), ids)

    async def renew(self, session_key: str, token: str, ttl: float) -> bool:
        return bool(
            await self._renew(keys=[Keys.lease(session_key)], args=[token, int(ttl * 1000)])
        )

    async def release(self, session_key: str, token: str) -> None:
        await self._release(keys=[Keys.lease(session_key)], args=[token])

    async def finish(
        self,
        session_key: str,
        token: str,
        claim: Claim,
        entry: Entry | None,
        meta_fields: dict[str, str] | None = None,
    ) -> bool:
        """Record the turn (once) and release the lease; False when the lease was lost.

        A turn that records no reply (nothing to answer, a failed or empty call)
        gives its injections back for the next turn.

        `meta_fields` are set in the same step (a stateful provider's chain:
        its response id and the cursor), so they never outlive a lost turn.
        """
        keys = [
            Keys.lease(session_key),
            Keys.meta(session_key),
            Keys.history(session_key),
            Keys.live(session_key),
            Keys.replies(session_key),
            Keys.turn_injections(session_key),
            Keys.injections(session_key),
        ]
        body = json.dumps(entry, ensure_ascii=False) if entry else ""
        args: list[str | int | float] = [
            token, claim.epoch, claim.answered, body, time.time(), claim.turn_id,
        ]
        for name, value in (meta_fields or {}).items():
            args += [name, value]
        return bool(await self._finish(keys=keys, args=args))

    async def view(self, session_key: str) -> HistoryView:
        """The meta, the newest segments and the history after them, as one snapshot.

        Entries before `history_start` are covered by a segment; a turn never
        loads them, so its cost does not grow with the length of the history.
        """
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(Keys.meta(session_key))
            pipe.lrange(Keys.segments(session_key), -2, -1)
            meta, raw_segments = await pipe.execute()
        start = int(meta.get("history_start") or 0)
        entries = await self.history(session_key, start)
        return HistoryView(meta, [json.loads(s) for s in raw_segments], start, entries)

    async def segments(self, session_key: str) -> list[dict[str, Any]]:
        """Every compression segment of the session, oldest first."""
        raw = await self.redis.lrange(Keys.segments(session_key), 0, -1)
        return [json.loads(item) for item in raw]

    async def history(self, session_key: str, start: int = 0) -> list[Entry]:
        raw = await self.redis.lrange(Keys.history(session_key), start, -1)
        return [json.loads(item) for item in raw]

    async def inbox(self, session_key: str) -> list[Entry]:
        raw = await self.redis.lrange(Keys.inbox(session_key), 0, -1)
        return [json.loads(item) for item in raw]

    async def meta(self, session_key: str) -> dict[str, str]:
        return cast(dict[str, str], await self.redis.hgetall(Keys.meta(session_key)))

    async def participated(self, session_key: str) -> bool:
        return bool(await self.redis.hexists(Keys.meta(session_key), "participated"))

    async def is_running(self, session_key: str) -> bool:
        return bool(await self.redis.exists(Keys.lease(session_key)))

    async def store_reply_ids(self, session_key: str, turn_id: str, ids: list[str]) -> None:
        await self.redis.hset(Keys.replies(session_key), turn_id, json.dumps(ids))

    async def set_live(self, session_key: str, text: str) -> None:
        """The reply still being written, for /btw snapshots (expires if the writer dies)."""
        await self.redis.set(Keys.live(session_key), text, ex=600)

    async def live(self, session_key: str) -> str | None:
        return cast(str | None, await self.redis.get(Keys.live(session_key)))

    async def inject(self, session_key: str, text: str) -> None:
        """Queue a text for the next turn's reminder block (consumed once)."""
        await self.redis.rpush(Keys.injections(session_key), text)

    async def reset(self, session_key: str) -> int:
        """Start a fresh conversation; a turn still running cannot record into it."""
        parts = Keys.all_parts(session_key)
        meta = Keys.meta(session_key)
        return int(
            await self._reset(keys=[meta, *[k for k in parts if k != meta]], args=[time.time()])
        )

    async def owed(self, session_key: str) -> int:
        """Jobs of this session not yet completed (replies still owed)."""
        return int(await self.redis.hget(Keys.meta(session_key), "owed") or 0)

    async def latest_in_channel(self, channel_key: str) -> str | None:
        found = await self.redis.zrevrange(Keys.channel_sessions(channel_key), 0, 0)
        return str(found[0]) if found else None

    async def list_sessions(self, limit: int = 100) -> list[tuple[str, float]]:
        rows = await self.redis.zrevrange(Keys.SESSIONS, 0, limit - 1, withscores=True)
        return [(str(key), float(score)) for key, score in cast(list[tuple[str, float]], rows)]

"""What the conversation pages show: the list (searched), and one conversation's history.

The list reads every session's key from the shards' session indexes (keys only: ten thousand of
them are a few hundred kilobytes) and filters them by their parts (platform,
workspace, channel); user and text are matched in the recent history of the newest
SEARCH_SESSIONS candidates only, so a search costs the same however many sessions
there are. One conversation shows its newest PAGE entries (older ones by page),
its summaries, what waits in the inbox, and the reply being written.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any, cast

from redis.asyncio import Redis

from gateway.approvals.store import Approval, ApprovalStore
from gateway.state.keys import Keys
from gateway.state.session import Entry, SessionStore, parse_all

LISTED = 50  # conversations a page of the list shows
SEARCH_SESSIONS = 200  # newest candidates whose recent history a user or text search reads
SEARCH_ENTRIES = 50  # ... and how much of it
PAGE = 200  # entries a page of one conversation shows
RUNNING_AMONG = 50  # the newest conversations the turns in flight are looked for in


@dataclass(frozen=True, slots=True)
class Search:
    """The list's filters, as typed (each matched as a part of the key, or in the text)."""

    platform: str = ""
    workspace: str = ""
    channel: str = ""
    user: str = ""
    text: str = ""

    @property
    def reads_history(self) -> bool:
        return bool(self.user or self.text)

    def keeps_key(self, session_key: str) -> bool:
        parts = session_key.split(":")
        wanted = (self.platform, self.workspace, self.channel)
        return all(
            not want or (len(parts) > i and parts[i].lower() == want.lower())
            for i, want in enumerate(wanted)
        )

    def keeps_entries(self, entries: list[Entry]) -> bool:
        user, text = self.user.lower(), self.text.lower()
        for entry in entries:
            speaker = entry.get("speaker") or {}
            if user and user not in f"{speaker.get('id', '')} {speaker.get('name', '')}".lower():
                continue
            if text and text not in str(entry.get("text") or "").lower():
                continue
            return True
        return False


@dataclass(frozen=True, slots=True)
class Row:
    key: str
    updated: float
    messages: int
    running: bool


@dataclass(frozen=True, slots=True)
class Listing:
    rows: list[Row]
    matched: int  # sessions whose key matched the filters
    searched: int  # of them, those whose history was read (a user or text search)


async def listing(redis: Redis, search: Search, limit: int = LISTED) -> Listing:
    """The newest conversations that match `search`, at most `limit`."""
    keys = [key for key, _ in await by_activity(redis)]
    matched = [k for k in keys if search.keeps_key(k)]
    searched = 0
    if search.reads_history:
        candidates = matched[:SEARCH_SESSIONS]
        searched = len(candidates)
        async with redis.pipeline(transaction=False) as pipe:
            for key in candidates:
                pipe.lrange(Keys.history(key), -SEARCH_ENTRIES, -1)
                pipe.lrange(Keys.inbox(key), 0, -1)
            found = await pipe.execute()
        chosen = [
            key
            for i, key in enumerate(candidates)
            if search.keeps_entries(parse_all([*found[2 * i], *found[2 * i + 1]]))
        ]
    else:
        chosen = matched
    return Listing(await rows(redis, chosen[:limit]), len(matched), searched)


async def by_activity(redis: Redis, newest: int | None = None) -> list[tuple[str, float]]:
    """Sessions and their last activity, newest first: every shard's index (or its
    `newest`), merged, in one round trip."""
    stop = -1 if newest is None else newest - 1
    async with redis.pipeline(transaction=False) as pipe:
        for index in Keys.session_indexes():
            pipe.zrevrange(index, 0, stop, withscores=True)
        found = await pipe.execute()
    merged = [(str(key), float(score)) for part in found for key, score in part]
    merged.sort(key=lambda row: row[1], reverse=True)
    return merged if newest is None else merged[:newest]


async def rows(redis: Redis, keys: list[str]) -> list[Row]:
    """Each conversation's last activity, its messages, whether a turn runs (one round trip)."""
    async with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.zscore(Keys.session_index(key), key)
            pipe.hget(Keys.meta(key), "answered")
            pipe.exists(Keys.lease(key))
        found = await pipe.execute()
    return [
        Row(key, float(found[3 * i] or 0), int(found[3 * i + 1] or 0), bool(found[3 * i + 2]))
        for i, key in enumerate(keys)
    ]


async def running(redis: Redis, newest: int = RUNNING_AMONG) -> list[Row]:
    """The turns in flight among the `newest` most recently active conversations (a turn
    marks its session active when it is enqueued and when it records)."""
    keys = [key for key, _ in await by_activity(redis, newest)]
    async with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.exists(Keys.lease(key))
        leases = await pipe.execute()
    return await rows(redis, [key for key, lease in zip(keys, leases, strict=True) if lease])


@dataclass(frozen=True, slots=True)
class Shown:
    """One entry as the page shows it."""

    kind: str  # user, assistant, step (tool calls), tool (a result), waiting (inbox)
    index: int
    who: str
    text: str
    at: str
    attachments: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    outcome: str = ""


@dataclass(frozen=True, slots=True)
class Conversation:
    key: str
    exists: bool
    length: int
    start: int  # index of the first entry shown
    entries: list[Shown]
    summaries: list[dict[str, Any]]
    side_answers: list[dict[str, Any]]
    live: str | None
    running: bool
    approvals: list[Approval]
    meta: dict[str, str]


def _when(at: Any) -> str:
    try:
        return dt.datetime.fromtimestamp(float(at), dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return ""


def shown(entry: Entry, index: int, waiting: bool = False) -> Shown:
    role = str(entry.get("role") or "")
    speaker = entry.get("speaker") or {}
    attachments = [
        str(a.get("name") or a.get("kind") or "file") for a in entry.get("attachments") or []
    ]
    calls = [
        f"{c.get('name', '?')}({str(c.get('arguments', ''))[:300]})"
        for c in entry.get("tool_calls") or []
    ]
    kind = "waiting" if waiting else "step" if calls else role if role else "other"
    who = str(speaker.get("name") or speaker.get("id") or "") if role == "user" else role
    if role == "tool":
        who = str(entry.get("name") or "tool")
    return Shown(
        kind,
        index,
        who,
        str(entry.get("text") or ""),
        _when(entry.get("at")),
        attachments,
        calls,
        str(entry.get("outcome") or ""),
    )


async def conversation(
    redis: Redis, sessions: SessionStore, approvals: ApprovalStore, key: str, before: int | None
) -> Conversation:
    """A conversation's newest PAGE entries before index `before` (None: the newest)."""
    length = int(await redis.llen(Keys.history(key)))
    end = length if before is None else max(0, min(before, length))
    start = max(0, end - PAGE)
    async with redis.pipeline(transaction=False) as pipe:
        pipe.lrange(Keys.history(key), start, end - 1) if end > start else pipe.echo("")
        pipe.lrange(Keys.inbox(key), 0, -1)
        pipe.lrange(Keys.segments(key), 0, -1)
        pipe.lrange(Keys.side_answers(key), 0, -1)
        pipe.get(Keys.live(key))
        pipe.exists(Keys.lease(key))
        pipe.hgetall(Keys.meta(key))
        pipe.zscore(Keys.session_index(key), key)
        history, inbox, segments, side, live, lease, meta, score = await pipe.execute()
    entries = [shown(e, start + i) for i, e in enumerate(parse_all(history or []))]
    if before is None:
        entries += [shown(e, length + i, waiting=True) for i, e in enumerate(parse_all(inbox))]
    waiting = [await approvals.by_id(key, name) for name in await approvals.pending(key)]
    return Conversation(
        key,
        score is not None or length > 0,
        length,
        start,
        entries,
        [s for s in parse_all(segments) if isinstance(s, dict)],
        [json.loads(item) for item in cast(list[str], side)][::-1],
        cast(str | None, live) if lease else None,
        bool(lease),
        [a for a in waiting if a is not None],
        cast(dict[str, str], meta),
    )

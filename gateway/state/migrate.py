"""Moving a database of an older key layout to this one (`gateway migrate`).

Version 1 (`gateway/state/keys.py`, "layout") named a session's keys `gw:{<session key>}:<part>`,
kept one job stream per platform (`gw:jobs:<platform>`, a console run's
`gw:jobs:console:<run>`) and one session index (`gw:sessions`), and left the global
keys untagged. Each key is moved on its own, in a step that is safe to repeat:

    a key that keeps its value    DUMP ─> RESTORE (REPLACE, its TTL) at its new name ─> DEL
    a job stream                  each job XADDed, with its id, to its session's shard's
                                  stream (one already there is skipped) ─> DEL
    the session index             each member ZADDed to its shard's index ─> DEL
    a queued-turn marker          rewritten to name its job's new stream
    a user's rate bucket          dropped (buckets are per workspace now; it refills)

So a run that stops midway (killed, Redis gone) is resumed by running it again: what
was moved is not there to move twice, and what was half moved is written again. The
layout is recorded only at the end. Jobs keep their ids, so the queued markers and
side questions that name them still do; a job a worker had read but not completed is
read again from its new stream. Keys that did not move (usage, pacing, names) keep
their names.

Version 2 differs from this one (3) only in the installations of a platform in many
workspaces (Slack's OAuth installs): version 2 left them untagged, this one tags an
owner's records with the owner (`Keys.installation`) and keeps the set of owners with
the global keys. Moving them is the same repeatable step; a version 1 database has
them under their version 2 names too.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, cast

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from gateway.state import keys
from gateway.state.keys import GLOBAL, GROUP, PREFIX, Keys

log = logging.getLogger(__name__)

# Version 1's global keys, by their names in this layout.
GLOBALS = {
    f"{PREFIX}:{name}": f"{GLOBAL}:{name}"
    for name in (
        "metrics",
        "health",
        "approvals",
        "prune",
        "paired",
        "pairing:codes",
        "pairing:pending",
        "pairing:failures",
        "settings",
        "settings:version",
        "feedback:log",
    )
}
V1_JOBS = f"{PREFIX}:jobs:"
V1_CONSOLE_JOBS = f"{PREFIX}:jobs:console:"
V1_SESSIONS = f"{PREFIX}:sessions"
V1_CONSOLES = f"{PREFIX}:consoles"
WORKER_SEEN_MS = 10_000  # a version 1 worker reads its streams every second


async def workers_connected(redis: Redis) -> list[str]:
    """The consumers that read a version 1 job stream within the last few seconds, and
    the workers of this version still counted alive (`Keys.WORKERS`)."""
    found: list[str] = []
    async for stream in redis.scan_iter(match=f"{V1_JOBS}*", _type="stream"):
        for group in await redis.xinfo_groups(stream):
            if group["name"] != GROUP:
                continue
            for consumer in await redis.xinfo_consumers(stream, GROUP):
                if int(consumer["idle"]) < WORKER_SEEN_MS:
                    found.append(str(consumer["name"]))
    seen = await redis.zrange(Keys.WORKERS, 0, -1)
    return sorted(set(found) | {str(name) for name in seen})


class Migration:
    """One run of the move, counting what it moved by kind."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis
        self.moved: Counter[str] = Counter()

    async def run(self) -> Counter[str]:
        """Move every version 1 key, then record this layout; what moved, by kind."""
        # The streams first: a queued marker is rewritten by its session's key, and the
        # index of sessions last, so that a resumed run still finds every session.
        await self._each(f"{V1_JOBS}*", self._move_stream)
        await self._each(f"{PREFIX}:{{*", self._move_session_key)
        await self._each(f"{PREFIX}:channel:*", self._move_channel)
        await self._each(f"{PREFIX}:spend:*", self._move_spend)
        await self._each(f"{PREFIX}:rate:*", self._drop, "user rate buckets")
        await self._each(f"{PREFIX}:feedback:reply:*", self._move_feedback)
        await self._each(f"{PREFIX}:installation:*", self._move_installation)
        await self._each(f"{PREFIX}:bot:*", self._move_bot)
        await self._each(f"{PREFIX}:installed:*", self._move_installed)
        for old, new in GLOBALS.items():
            if await self.redis.exists(old):
                await self._move(old, new, "global keys")
        if await self.redis.exists(V1_SESSIONS):
            await self._split_index()
        await self.redis.delete(V1_CONSOLES)  # runs register again; left jobs: below
        await keys.record_layout(self.redis)
        return self.moved

    async def _each(self, match: str, move: Callable[..., Awaitable[None]], *extra: str) -> None:
        keys = [str(key) async for key in self.redis.scan_iter(match=match, count=1000)]
        for key in keys:
            if _is_v1(key):
                await move(key, *extra)

    async def _move(self, old: str, new: str, kind: str) -> None:
        """One key to its new name, value and TTL kept (repeatable)."""
        dumped = await self.redis.dump(old)
        if dumped is None:
            return
        ttl = max(0, int(await self.redis.pttl(old)))
        await self.redis.restore(new, ttl, dumped, replace=True)
        await self.redis.delete(old)
        self.moved[kind] += 1

    async def _drop(self, key: str, kind: str) -> None:
        self.moved[kind] += await self.redis.delete(key)

    async def _move_session_key(self, key: str) -> None:
        session_key, _, part = key[len(PREFIX) + 2 :].partition("}:")
        if part == "rate":
            new = Keys.rate(session_key)
        else:
            new = Keys.session(session_key, part)
        if part == "queued":
            await self._move_marker(key, new, session_key)
        else:
            await self._move(key, new, "session keys")

    async def _move_marker(self, old: str, new: str, session_key: str) -> None:
        marker = await self.redis.get(old)
        if marker is None:
            return
        stream, _, job_id = str(marker).partition(" ")
        ttl = await self.redis.pttl(old)
        value = f"{_new_stream(stream, session_key)} {job_id}"
        await self.redis.set(new, value, px=ttl if ttl > 0 else None)
        await self.redis.delete(old)
        self.moved["session keys"] += 1

    async def _move_stream(self, stream: str) -> None:
        """Each job to its session's stream, with its id; the old stream removed."""
        consoles: set[str] = set()
        entries = cast(list[tuple[str, dict[str, str]]], await self.redis.xrange(stream))
        for job_id, fields in entries:
            target = _new_stream(stream, fields.get("session", ""))
            if stream.startswith(V1_CONSOLE_JOBS):
                consoles.add(target)
            try:
                await self.redis.xadd(target, cast(Any, fields), id=job_id)
                self.moved["jobs"] += 1
            except ResponseError as exc:  # moved by an earlier run
                if "equal or smaller" not in str(exc):
                    raise
            await _ensure_group(self.redis, target)
        for target in consoles:  # ended with jobs left: the next console run takes them
            session = entries[0][1].get("session", "")
            await self.redis.zadd(Keys.consoles(session), {target: 0})
        await self.redis.delete(stream)

    async def _move_channel(self, key: str) -> None:
        await self._move(key, Keys.channel_sessions(key[len(f"{PREFIX}:channel:") :]), "indexes")

    async def _move_spend(self, key: str) -> None:
        scope, _, rest = key[len(f"{PREFIX}:spend:") :].partition(":")
        ident, _, period = rest.rpartition(":")
        await self._move(key, Keys.spend(scope, ident, period), "spend keys")

    async def _move_feedback(self, key: str) -> None:
        new = f"{GLOBAL}:{key[len(PREFIX) + 1 :]}"
        await self._move(key, new, "feedback replies")

    async def _move_installation(self, key: str) -> None:
        platform, _, rest = key[len(f"{PREFIX}:installation:") :].partition(":")
        owner, _, user = rest.partition(":user:")
        await self._move(key, Keys.installation(platform, owner, user or None), "installations")

    async def _move_bot(self, key: str) -> None:
        platform, _, owner = key[len(f"{PREFIX}:bot:") :].partition(":")
        await self._move(key, Keys.installed_bot(platform, owner), "installations")

    async def _move_installed(self, key: str) -> None:
        await self._move(key, Keys.installed(key[len(f"{PREFIX}:installed:") :]), "installations")

    async def _split_index(self) -> None:
        rows = cast(
            list[tuple[str, float]], await self.redis.zrange(V1_SESSIONS, 0, -1, withscores=True)
        )
        for session_key, score in rows:
            await self.redis.zadd(Keys.session_index(session_key), {session_key: score})
        await self.redis.delete(V1_SESSIONS)
        self.moved["indexes"] += 1


def _is_v1(key: str) -> bool:
    """A key of version 1 (or 2): untagged, or tagged by a session key (this layout tags
    its own with a shard, `{gw}`, a workspace `{w:…}`, an installation's owner `{inst:…}`
    or a spend key's owner)."""
    if key.startswith(f"{PREFIX}:spend:"):
        return "{" not in key
    if key.startswith(f"{PREFIX}:{{"):
        tag = key[len(PREFIX) + 2 : key.index("}")] if "}" in key else ""
        return tag.count(":") >= 2 and not tag.startswith(("w:", "inst:"))
    return "{" not in key


def _new_stream(old: str, session_key: str) -> str:
    """The stream of this layout that takes a job of version 1 stream `old`."""
    if old.startswith(V1_CONSOLE_JOBS):
        return Keys.console_jobs(old[len(V1_CONSOLE_JOBS) :], session_key)
    return Keys.session_jobs(session_key, old[len(V1_JOBS) :])


async def _ensure_group(redis: Redis, stream: str) -> None:
    try:
        await redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise

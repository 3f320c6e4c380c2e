"""A session's state in Redis: history, inbox, metadata, lease, replies, injections.

A user message lands in the session's *inbox* together with a turn job (one
script, so neither exists without the other). A worker that takes the
session's lease moves the inbox into the *history* and answers everything past
the `answered` mark; finishing the turn appends the assistant entry and moves
the mark, all fenced by the lease token and the session's reset epoch, so a
turn is recorded once even when a slow worker and its replacement both finish.

Long because: every script a session's state goes through has its one method
on `SessionStore` (claim, finish, the tool loop's steps, enqueues, progress,
reset); splitting it would part the methods from the keys and fences they share.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, cast

from redis.asyncio import Redis

from gateway.messages import Inbound
from gateway.state.keys import DEDUPE_TTL, Keys
from gateway.state.scripts import Arg, load

Entry = dict[str, Any]

EARLY_ENTRY_MAX = 64 * 1024  # larger messages are not copied into their job
SIDE_ANSWERS_KEPT = 50  # the newest `/btw` answers of a session the console shows
LIVE_TTL = 600  # a running reply's text outlives a writer that died by this much at most


def new_entry_id() -> str:
    return secrets.token_hex(6)


def parse_all(raw: Sequence[str | bytes]) -> list[Any]:
    """Stored JSON items, parsed in one call.

    One call shares each key's string among all the items (the decoder keeps
    one copy of every key per call): a parsed history entry takes about half
    the memory it takes alone, and a worker's many turns in flight hold whole
    histories at once.
    """
    if not raw:
        return []
    joined = ",".join(cast(Sequence[str], raw))  # the client decodes responses
    return cast(list[Any], json.loads(f"[{joined}]"))


def user_entry(inbound: Inbound) -> Entry:
    """The history entry of an incoming user message."""
    entry: Entry = {
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
    if inbound.media_group:
        entry["media_group"] = inbound.media_group
    return entry


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
    # from, its deferred injections, and the platform ids of its reply so far with
    # the id of the user entry that reply answers ("" when not known).
    view: HistoryView | None = None
    injections: tuple[str, ...] = ()
    reply_ids: tuple[str, ...] = ()
    reply_to: str = ""
    wait: float = 0.0  # not taken: an album is still arriving for this long (seconds)
    settings_version: int = 0  # of the settings by scope, read in the same step

    def ids_for(self, user_entry_id: str) -> tuple[str, ...]:
        """The reply's messages so far when they answer `user_entry_id`.

        An earlier run may have answered an older message of the same turn (it
        lost its lease; the user, who saw its answer, wrote again): that message
        keeps its answer, and this run's reply goes under the newer one.
        """
        return self.reply_ids if self.reply_to in ("", user_entry_id) else ()

    @property
    def has_work(self) -> bool:
        return self.length > self.answered

    @property
    def rerun(self) -> bool:
        """Another run claimed this very turn before (it died, lost its lease, or let go
        to wait for an approval): what it posted may be on the platform unrecorded."""
        return self.view is not None and self.view.meta.get("started") == self.turn_id

    @property
    def turn_id(self) -> str:
        # Stable across re-runs of the same turn: it names where the turn starts.
        return f"{self.epoch}.{self.answered}"


class Finish(IntEnum):
    """What recording a turn did (the finish script's answer)."""

    LOST = 0  # another holder, or the history moved: nothing written, the job stays pending
    RECORDED = 1
    SUPERSEDED = 2  # a reset or another run moved past this turn: nothing to record


class SessionStore:
    """Every read and write of session state goes through here."""

    def __init__(self, redis: Redis, streams: Mapping[str, str] | None = None) -> None:
        self.redis = redis
        self.streams = dict(streams or {})
        self._ingest = load("ingest").bind(redis)
        self._first_delivery = load("first_delivery").bind(redis)
        self._enqueue = load("enqueue").bind(redis)
        self._claim = load("claim").bind(redis)
        self._finish = load("finish").bind(redis)
        self._step = load("step").bind(redis)
        self._enqueue_turn = load("enqueue_turn").bind(redis)
        self._reply_state = load("reply_state").bind(redis)
        self._reset = load("reset").bind(redis)

    async def append_user(
        self, inbound: Inbound, album_wait: float = 0.0
    ) -> tuple[bool, str | None]:
        """Dedupe, append to the inbox and enqueue a turn unless one is queued: one step.

        An album's item joins its album's waiting entry, and holds claims for
        `album_wait` seconds more. Returns (fresh, job id or None when a queued
        turn will pick it up).
        """
        key = inbound.session_key
        entry = json.dumps(user_entry(inbound), ensure_ascii=False)
        keys = {
            "seen": Keys.seen(key, inbound.event_id),
            "inbox": Keys.inbox(key),
            "meta": Keys.meta(key),
            "queued": Keys.queued(key),
            "stream": self.stream(inbound.platform, key),
            "sessions": Keys.session_index(key),
            "channel": Keys.channel_sessions(inbound.channel_key),
            "lease": Keys.lease(key),
            "history": Keys.history(key),
            "injections": Keys.injections(key),
            "album": Keys.album(key),
            "settings_version": Keys.settings_version(key),
        }
        args: dict[str, Arg] = {
            "dedupe_ttl": DEDUPE_TTL,
            "entry": entry,
            "session": key,
            "now": time.time(),
            "early": "1" if len(entry) <= EARLY_ENTRY_MAX and not inbound.media_group else "",
            "channel_key": inbound.channel_key,
            "media_group": inbound.media_group or "",
            "album_ms": int(album_wait * 1000),
        }
        fresh, job = await self._ingest(keys=keys, args=args)
        return bool(fresh), job or None

    def stream(self, platform: str, session_key: str) -> str:
        """The job stream of a session (its platform's, in its shard; a console routes
        to its own process's stream)."""
        return self.streams.get(platform) or Keys.session_jobs(session_key, platform)

    async def first_delivery(self, inbound: Inbound, *, mark: bool = True) -> bool:
        """Whether the platform event comes for the first time (False: a retry), by the
        rule `append_user` dedupes with too (`scripts/dedupe.lua`); marked seen now
        unless `mark` is False (a look before the step that writes it)."""
        keys = {"seen": Keys.seen(inbound.session_key, inbound.event_id)}
        args: dict[str, Arg] = {"dedupe_ttl": DEDUPE_TTL, "mark": "1" if mark else ""}
        return bool(await self._first_delivery(keys=keys, args=args))

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
        keys = {
            "stream": self.stream(inbound.platform, key),
            "meta": Keys.meta(key),
            "side_in_flight": Keys.side_in_flight(key),
            "sessions": Keys.session_index(key),
        }
        args = {
            "kind": kind,
            "session": key,
            "payload": json.dumps(payload, ensure_ascii=False),
            "side_limit": side_limit or "",
            "since": now - side_window,
            "now": now,
        }
        status, job = await self._enqueue(keys=keys, args=args)
        return ("busy" if int(status) == 2 else "ok"), job or None

    async def enqueue_turn(self, session_key: str, platform: str) -> str | None:
        """A turn job for the session without a new message (an approval decided,
        messages left behind a tool loop); None when one is queued already."""
        keys = {
            "queued": Keys.queued(session_key),
            "stream": self.stream(platform, session_key),
            "meta": Keys.meta(session_key),
            "sessions": Keys.session_index(session_key),
        }
        job = await self._enqueue_turn(keys=keys, args={"session": session_key, "now": time.time()})
        return str(job) if job else None

    async def claim(self, session_key: str, token: str, ttl: float, hold: bool = True) -> Claim:
        """Take the lease and, when there is work, read all a turn starts from: one step.

        The inbox moves into the history; the session's injections become this
        turn's (a re-run of the same turn sees them again). With `hold`, nothing
        is taken while an album is still arriving (`Claim.wait` says how long).
        """
        keys = {
            "lease": Keys.lease(session_key),
            "queued": Keys.queued(session_key),
            "inbox": Keys.inbox(session_key),
            "history": Keys.history(session_key),
            "meta": Keys.meta(session_key),
            "segments": Keys.segments(session_key),
            "injections": Keys.injections(session_key),
            "turn_injections": Keys.turn_injections(session_key),
            "replies": Keys.replies(session_key),
            "album": Keys.album(session_key),
            "settings_version": Keys.settings_version(session_key),
        }
        args: dict[str, Arg] = {
            "token": token,
            "ttl_ms": int(ttl * 1000),
            "hold": "1" if hold else "",
        }
        result = await self._claim(keys=keys, args=args)
        if int(result[0]) == 2:
            return Claim(ok=False, wait=int(result[1]) / 1000)
        if not int(result[0]):
            return Claim(ok=False)
        answered, length, epoch = int(result[1]), int(result[2]), str(result[3])
        version = int(result[4])
        if len(result) == 5:
            return Claim(True, answered, length, epoch, settings_version=version)
        flat_meta, raw_segments, raw_entries, injections, raw_ids = result[5:]
        meta = dict(zip(flat_meta[::2], flat_meta[1::2], strict=True))
        view = HistoryView(
            meta,
            parse_all(raw_segments),
            int(meta.get("history_start") or 0),
            parse_all(raw_entries),
        )
        stored = json.loads(raw_ids) if raw_ids else []
        if isinstance(stored, dict):  # {"to": user entry id, "ids": [...]}
            ids, reply_to = tuple(stored.get("ids") or ()), str(stored.get("to") or "")
        else:
            ids, reply_to = tuple(stored), ""
        return Claim(
            True,
            answered,
            length,
            epoch,
            view,
            tuple(injections),
            ids,
            reply_to,
            settings_version=version,
        )

    async def finish(
        self,
        session_key: str,
        token: str,
        claim: Claim,
        entry: Entry | None,
        meta_fields: dict[str, str] | None = None,
        length: int | None = None,
    ) -> Finish:
        """Record the turn (once) and release the lease.

        A turn that records no reply (nothing to answer, a failed or empty call)
        gives its injections back for the next turn. `meta_fields` are set in
        the same step (a stateful provider's chain: its response id and the
        cursor), so they never outlive a lost turn. `length` is the history's
        length as the turn last wrote it (past the claim's after tool steps).
        """
        keys = {
            "lease": Keys.lease(session_key),
            "meta": Keys.meta(session_key),
            "history": Keys.history(session_key),
            "live": Keys.live(session_key),
            "replies": Keys.replies(session_key),
            "turn_injections": Keys.turn_injections(session_key),
            "injections": Keys.injections(session_key),
            "sessions": Keys.session_index(session_key),
        }
        args: dict[str, Arg] = {
            "token": token,
            "epoch": claim.epoch,
            "answered": claim.answered,
            "length": claim.length if length is None else length,
            "entry": json.dumps(entry, ensure_ascii=False) if entry else "",
            "now": time.time(),
            "turn_id": claim.turn_id,
            "session": session_key,
        }
        rest = [part for pair in (meta_fields or {}).items() for part in pair]
        return Finish(int(await self._finish(keys=keys, args=args, rest=rest)))

    async def record_steps(
        self,
        session_key: str,
        token: str,
        claim: Claim,
        length: int,
        entries: list[Entry],
        *,
        loop_open: bool,
    ) -> int | None:
        """Append a tool loop's entries while `token` holds the lease in the claim's
        epoch and the history is `length` long; returns the new length, or None
        when fenced off (nothing written). `loop_open` keeps new messages in the
        inbox until the loop is closed (by this or by the turn's finish)."""
        keys = {
            "lease": Keys.lease(session_key),
            "meta": Keys.meta(session_key),
            "history": Keys.history(session_key),
        }
        args: dict[str, Arg] = {
            "token": token,
            "epoch": claim.epoch,
            "answered": claim.answered,
            "length": length,
            "loop": claim.turn_id if loop_open else "",
        }
        rest = [json.dumps(entry, ensure_ascii=False) for entry in entries]
        written = int(await self._step(keys=keys, args=args, rest=rest))
        return None if written < 0 else written

    async def show_progress(
        self,
        session_key: str,
        token: str,
        claim: Claim,
        *,
        text: str = "",
        ids: list[str] | None = None,
        reply_to: str = "",
    ) -> bool:
        """Write a running turn's text so far (for /btw) or its messages' platform ids
        (for a re-run), only while `token` holds the lease in the claim's epoch.

        `reply_to` is the id of the user entry those messages answer: a re-run that
        answers a newer one does not edit them (`Claim.ids_for`)."""
        keys = {
            "lease": Keys.lease(session_key),
            "meta": Keys.meta(session_key),
            "live": Keys.live(session_key),
            "replies": Keys.replies(session_key),
        }
        args: dict[str, Arg] = {
            "token": token,
            "epoch": claim.epoch,
            "turn_id": claim.turn_id,
            "live_text": text,
            "live_ttl_s": LIVE_TTL,
            "reply_ids": (
                json.dumps({"to": reply_to, "ids": ids} if reply_to else ids) if ids else ""
            ),
        }
        return bool(await self._reply_state(keys=keys, args=args))

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
        return HistoryView(meta, parse_all(raw_segments), start, entries)

    async def segments(self, session_key: str) -> list[dict[str, Any]]:
        """Every compression segment of the session, oldest first."""
        return parse_all(await self.redis.lrange(Keys.segments(session_key), 0, -1))

    async def history(self, session_key: str, start: int = 0) -> list[Entry]:
        return parse_all(await self.redis.lrange(Keys.history(session_key), start, -1))

    async def inbox(self, session_key: str) -> list[Entry]:
        return parse_all(await self.redis.lrange(Keys.inbox(session_key), 0, -1))

    async def meta(self, session_key: str) -> dict[str, str]:
        return cast(dict[str, str], await self.redis.hgetall(Keys.meta(session_key)))

    async def participated(self, session_key: str) -> bool:
        return bool(await self.redis.hexists(Keys.meta(session_key), "participated"))

    async def is_running(self, session_key: str) -> bool:
        return bool(await self.redis.exists(Keys.lease(session_key)))

    async def live(self, session_key: str) -> str | None:
        return cast(str | None, await self.redis.get(Keys.live(session_key)))

    async def note_side_answer(self, session_key: str, answer: Mapping[str, Any]) -> None:
        """A `/btw` answer given, for the operator console (never for a turn to read)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.rpush(Keys.side_answers(session_key), json.dumps(answer, ensure_ascii=False))
            pipe.ltrim(Keys.side_answers(session_key), -SIDE_ANSWERS_KEPT, -1)
            await pipe.execute()

    async def inject(self, session_key: str, text: str) -> None:
        """Queue a text for the next turn's reminder block (consumed once)."""
        await self.redis.rpush(Keys.injections(session_key), text)

    async def reset(self, session_key: str) -> int:
        """Start a fresh conversation; a turn still running cannot record into it."""
        keys = Keys.parts(session_key)
        return int(await self._reset(keys=keys, args={"now": time.time()}))

    async def owed(self, session_key: str) -> int:
        """Jobs of this session not yet completed (replies still owed)."""
        return int(await self.redis.hget(Keys.meta(session_key), "owed") or 0)

    async def latest_in_channel(self, channel_key: str) -> str | None:
        found = await self.redis.zrevrange(Keys.channel_sessions(channel_key), 0, 0)
        return str(found[0]) if found else None

    async def list_sessions(self, limit: int = 100) -> list[tuple[str, float]]:
        """The `limit` most recently active sessions, newest first (each shard's newest,
        merged)."""
        found: list[tuple[str, float]] = []
        for index in Keys.session_indexes():
            rows = await self.redis.zrevrange(index, 0, limit - 1, withscores=True)
            found += [(str(key), float(score)) for key, score in cast(list[Any], rows)]
        return sorted(found, key=lambda row: row[1], reverse=True)[:limit]

"""A console run's job stream, and the jobs that earlier console runs left behind.

Each `gateway run --console` reads a stream of its own (`Keys.console_jobs`), so
its replies print in its own terminal. A run that stops with jobs left (Ctrl-C
while a reply was written, a kill, a crash) must not leave them where nobody
reads: the session's queued-turn marker would point at its job, and every later
message would wait behind it unanswered. So each run keeps an entry in the
registry (`Keys.consoles`, in the console session's slot with the streams):

    start        ─> registered, alive for ALIVE_FOR s; renewed every BEAT_EVERY s
    every beat   ─> the streams of runs whose life ran out, or that ended with jobs
                    left, are taken over: their jobs move to this run's stream
                    (`console_adopt.lua`), the queued marker with them
    clean end    ─> an empty stream is removed with its entry; one with jobs left is
                    marked ended, for the next run to take over at once
    killed       ─> its entry runs out ALIVE_FOR s after its last beat

At the end of input a run is done when its own stream and every other console
run's are empty (they all serve the one console session: a message typed here may
wait in another run's queued turn).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from gateway.state.keys import GROUP, Keys
from gateway.state.scripts import load

log = logging.getLogger(__name__)

ALIVE_FOR = 5.0  # seconds a console run counts as alive after its last beat
BEAT_EVERY = 1.0  # seconds between beats (and looks for streams to take over)


class ConsoleJobs:
    """One console run's stream, its entry in the registry, and what it takes over."""

    def __init__(self, redis: Redis, session_key: str, stream: str | None = None) -> None:
        self.redis = redis
        self.session_key = session_key
        self.stream = stream or Keys.console_jobs(secrets.token_hex(4), session_key)
        self._beat = load("console_beat").bind(redis)
        self._adopt = load("console_adopt").bind(redis)
        self._release = load("console_release").bind(redis)

    async def register(self) -> None:
        """Count as alive, and take over what earlier runs left (before input is read,
        so a first message does not wait behind a job nobody reads)."""
        await self._renew()
        await self.adopt()

    async def keep_alive(self) -> None:
        """Beat and take over, every BEAT_EVERY seconds, until cancelled."""
        while True:
            await asyncio.sleep(BEAT_EVERY)
            try:
                await self.beat()
                await self.adopt()
            except RedisError as exc:  # tried again at the next beat
                log.warning("console stream %s not renewed: %s", self.stream, exc)

    async def beat(self) -> None:
        """Renew this run's life; a stream another run took over meanwhile is read anew."""
        if await self._renew():
            await self._ensure_group()

    async def _renew(self) -> bool:
        """Whether the entry was missing (this run's first beat, or its stream was
        taken over)."""
        args: dict[str, str | int] = {"stream": self.stream, "alive_ms": int(ALIVE_FOR * 1000)}
        return bool(await self._beat(keys={"consoles": Keys.consoles(self.session_key)}, args=args))

    async def adopt(self) -> int:
        """Move the jobs of every console stream whose run is gone into this one's."""
        moved = 0
        for stream in await self._others():
            keys = {
                "consoles": Keys.consoles(self.session_key),
                "from": stream,
                "into": self.stream,
                "queued": Keys.queued(self.session_key),
                "side_in_flight": Keys.side_in_flight(self.session_key),
            }
            taken = int(await self._adopt(keys=keys))
            if taken:
                log.info("took over %d job(s) an earlier console run left in %s", taken, stream)
            moved += taken
        return moved

    async def settled(self) -> bool:
        """Whether nothing is owed on any console stream (what can be taken over is,
        first): this run's replies are all written."""
        await self.adopt()
        for stream in [self.stream, *await self._others()]:
            if await self.redis.xlen(stream) > 0:
                return False
        return True

    async def release(self) -> int:
        """This run ends: how many of its jobs it leaves for the next run."""
        keys = {"consoles": Keys.consoles(self.session_key), "stream": self.stream}
        return int(await self._release(keys=keys))

    async def end(self, within: float) -> str | None:
        """Release, within `within` seconds: None when nothing is owed, else the line
        that says what is (the run then exits 1: not every message typed was answered).
        When Redis cannot say, the run's entry runs out and the next run takes over."""
        left = None
        with contextlib.suppress(RedisError, OSError, TimeoutError):
            async with asyncio.timeout(within):
                left = await self.release()
        if left is None:
            return "stopped; whether a console reply is owed could not be read"
        if left:
            replies = "reply" if left == 1 else "replies"
            return (
                f"stopped with {left} console {replies} owed; "
                "the next `gateway run --console` here writes them"
            )
        return None

    async def _others(self) -> list[str]:
        """Every other registered console stream, and the one the session's queued-turn
        marker names when no run registered it (left by a run of an earlier version)."""
        registered = [
            str(name) for name in await self.redis.zrange(Keys.consoles(self.session_key), 0, -1)
        ]
        marker = await self.redis.get(Keys.queued(self.session_key))
        named = str(marker).partition(" ")[0] if marker else ""
        if Keys.CONSOLE_JOBS_MARK in named and named not in registered:
            registered.append(named)
        return [stream for stream in registered if stream != self.stream]

    async def _ensure_group(self) -> None:
        """The stream was taken over (this run seemed gone): read it again from here."""
        log.warning("console stream %s was taken over by another run; reading it anew", self.stream)
        try:
            await self.redis.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

"""A turn's hold on its session: the claim, the turns running here, recording, giving up.

A turn claims its session by taking the lease (waiting while another turn holds
it), runs registered here so a `/stop` or a waiter can find it, and records
under the same lease. A turn that failed on every delivery is given up: what it
had to answer is marked answered with no reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from redis.exceptions import RedisError

from gateway.errors import LeaseLost
from gateway.messages import Address
from gateway.state.jobs import Job
from gateway.state.keys import Keys
from gateway.state.lease import Fence, Lease
from gateway.state.session import Claim, Entry, Finish, SessionStore
from gateway.turn.early_start import EarlyStart, EarlyStarts
from gateway.turn.types import RunningTurn, Turn

log = logging.getLogger(__name__)

# The longest a claim waits for an album's items (each refreshes the wait): a chat
# that keeps sending albums has its turn taken after this, with what has arrived.
ALBUM_HOLD_LIMIT = 10.0


class Claims:
    """Claims, holds and records sessions' turns; shared by all of one worker's jobs."""

    def __init__(self, sessions: SessionStore, ttl: float, early: EarlyStarts) -> None:
        self.sessions, self.ttl, self.early = sessions, ttl, early
        self.running: dict[str, RunningTurn] = {}  # by session, for /stop

    def lease(self, session_key: str) -> Lease:
        return Lease(self.sessions.redis, Keys.lease(session_key), self.ttl)

    async def claim(self, job: Job, lease: Lease, early: EarlyStart | None = None) -> Claim:
        """Take the session's lease, waiting while another turn holds it, and while an
        album's items are still arriving (up to ALBUM_HOLD_LIMIT).

        When the holder runs in this process, its end wakes the waiter at once;
        a holder elsewhere is polled, quickly at first. An early call does not
        wait with it: another turn's reply comes first. (The job is touched
        meanwhile by its owner, `JobQueue.owned`.)
        """
        delay = 0.005
        clock = asyncio.get_running_loop().time
        hold_until = clock() + ALBUM_HOLD_LIMIT
        while True:
            hold = clock() < hold_until
            claim = await self.sessions.claim(job.session_key, lease.token, self.ttl, hold)
            if claim.ok:
                lease.fence = Fence(Keys.meta(job.session_key), claim.epoch, claim.answered)
                return claim
            if early is not None and not early.call.cancelled:
                log.info("%s is busy; cancelled its early model call", job.session_key)
                await early.call.cancel()
            if claim.wait:
                await asyncio.sleep(claim.wait)  # the album key's time left: it may be renewed
                continue
            local = self.running.get(job.session_key)
            if local is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(local.done.wait(), self.ttl / 3)
                continue
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)

    @contextlib.asynccontextmanager
    async def turn_running(self, session_key: str, lease: Lease) -> AsyncIterator[RunningTurn]:
        """The claimed turn, running: found by `/stop` and by waiters while it runs,
        its lease kept alive, and given up on any exit but the finishing script's
        (which releases it as it records), so a re-run need not wait out its TTL."""
        running = self.running[session_key] = RunningTurn(session_key, lease)
        try:
            async with lease.kept(release=False):
                yield running
        except BaseException:
            with contextlib.suppress(RedisError):
                await lease.release()
            raise
        finally:
            if self.running.get(session_key) is running:
                del self.running[session_key]
            running.done.set()

    def stop(self, session_key: str) -> None:
        """A `/stop`: the turn running here for the session, if any, stops."""
        turn = self.running.get(session_key)
        if turn is not None:
            log.info("stop requested for %s", session_key)
            turn.request_stop("stopped by user")

    async def record(
        self,
        turn: Turn,
        entry: Entry | None,
        fields: dict[str, str] | None = None,
        length: int | None = None,
    ) -> bool:
        """Record the turn; True when recorded, False when a reset or another run of it
        got there first. Raises LeaseLost when it could not record (left for a re-run).
        `length` is the history's as the turn left it (past the claim's after tool steps)."""
        key, claim = turn.session_key, turn.claim
        # The script lets the lease go (or finds it lost): from the moment it is sent, a
        # heartbeat would find the key gone and cry "lost", and nothing after it needs
        # the lease (a run that cannot record is over, its job left pending).
        turn.lease.released = True
        outcome = await self.sessions.finish(key, turn.lease.token, claim, entry, fields, length)
        if outcome is Finish.LOST:
            raise LeaseLost(f"{key} turn {claim.turn_id} lost its lease before recording")
        return outcome is Finish.RECORDED

    async def give_up(self, job: Job) -> Address | None:
        """Mark what the session's turn had to answer as answered, recording no reply
        (a turn that failed on every delivery). Returns where to tell the user."""
        key = job.session_key
        lease = self.lease(key)
        claim = await self.claim(job, lease)
        if not claim.has_work or claim.view is None:
            await lease.release()
            return None
        user = last_user(claim.view.entries[max(0, claim.answered - claim.view.start) :])
        recorded = await self.record(Turn(key, lease, claim, RunningTurn(key, lease)), None)
        self.early.forget(key)
        return Address.model_validate(user["reply"]) if recorded and user else None


def last_user(entries: list[Entry]) -> Entry | None:
    """The newest user entry a reply can go to (the one a turn answers)."""
    return next((e for e in reversed(entries) if e.get("role") == "user" and e.get("reply")), None)

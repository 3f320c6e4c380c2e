"""Claims against a real Redis: waiting for the lease, recording under it, a /stop, giving up."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from gateway.errors import LeaseLost
from gateway.state.jobs import Job
from gateway.state.keys import Keys
from gateway.state.session import Entry, SessionStore, assistant_entry
from gateway.turn.claims import Turn, last_user
from gateway.turn.generation import RunningTurn
from gateway.turn.runner import TurnRunner
from tests.support.helpers import inbound


async def queued(sessions: SessionStore, text: str) -> Job:
    message = inbound(text)
    _, job_id = await sessions.append_user(message)
    assert job_id is not None
    return Job(Keys.jobs("test", 0), job_id, "turn", message.session_key)


async def test_a_claim_waits_for_the_turn_holding_the_session_and_takes_it_after(
    turns: TurnRunner,
) -> None:
    claims = turns.claims
    job = await queued(claims.sessions, "first")
    holder = claims.lease(job.session_key)
    assert (await claims.claim(job, holder)).ok
    waiter = claims.lease(job.session_key)
    waiting = asyncio.create_task(claims.claim(job, waiter))
    await asyncio.sleep(0.1)  # several polls: none may take the held lease
    assert not waiting.done()
    await holder.release()
    claim = await asyncio.wait_for(waiting, 5)
    assert claim.ok
    assert waiter.fence is not None and waiter.fence.epoch == claim.epoch


async def test_a_recorded_turn_is_true_and_a_turn_past_a_reset_is_false(
    turns: TurnRunner,
) -> None:
    claims = turns.claims
    job = await queued(claims.sessions, "hello")
    lease = claims.lease(job.session_key)
    claim = await claims.claim(job, lease)
    turn = Turn(job.session_key, lease, claim, RunningTurn(job.session_key, lease))
    assert await claims.record(turn, assistant_entry("hi", claim.turn_id, []))

    later = await queued(claims.sessions, "again")
    lease = claims.lease(later.session_key)
    claim = await claims.claim(later, lease)
    await claims.sessions.reset(later.session_key)
    turn = Turn(later.session_key, lease, claim, RunningTurn(later.session_key, lease))
    assert not await claims.record(turn, assistant_entry("too late", claim.turn_id, []))


async def test_recording_after_another_run_took_the_lease_raises_lease_lost(
    turns: TurnRunner, redis_client: aioredis.Redis
) -> None:
    claims = turns.claims
    job = await queued(claims.sessions, "slow one")
    lease = claims.lease(job.session_key)
    claim = await claims.claim(job, lease)
    await redis_client.set(Keys.lease(job.session_key), "another-run")
    turn = Turn(job.session_key, lease, claim, RunningTurn(job.session_key, lease))
    with pytest.raises(LeaseLost):
        await claims.record(turn, assistant_entry("late", claim.turn_id, []))
    assert [e["role"] for e in await claims.sessions.history(job.session_key)] == ["user"]


async def test_a_stop_reaches_the_turn_held_here_and_its_end_lets_the_lease_go(
    turns: TurnRunner,
) -> None:
    claims = turns.claims
    job = await queued(claims.sessions, "a long task")
    lease = claims.lease(job.session_key)
    await claims.claim(job, lease)
    with pytest.raises(RuntimeError):
        async with claims.turn_running(job.session_key, lease) as running:
            claims.stop(job.session_key)
            assert running.stop.is_set() and running.reason == "stopped by user"
            raise RuntimeError("the turn failed")
    assert running.done.is_set() and job.session_key not in claims.running
    assert not await claims.sessions.is_running(job.session_key)


async def test_giving_up_marks_the_message_answered_and_says_where_to_tell_the_user(
    turns: TurnRunner,
) -> None:
    claims = turns.claims
    message = inbound("this keeps failing")
    _, job_id = await claims.sessions.append_user(message)
    assert job_id is not None
    job = Job(Keys.jobs("test", 0), job_id, "turn", message.session_key)
    address = await claims.give_up(job)
    assert address == message.reply
    history = await claims.sessions.history(message.session_key)
    assert [e["role"] for e in history] == ["user"]
    again = await claims.sessions.claim(message.session_key, "next", 2.0)
    assert again.ok and not again.has_work


def test_last_user_is_the_newest_user_entry_with_a_reply_address() -> None:
    entries: list[Entry] = [
        {"role": "user", "text": "a", "reply": {"channel": "C1"}},
        {"role": "assistant", "text": "b"},
        {"role": "user", "text": "c", "reply": {"channel": "C1"}},
        {"role": "user", "text": "a note without an address"},
    ]
    found = last_user(entries)
    assert found is not None and found["text"] == "c"
    assert last_user([{"role": "assistant", "text": "only"}]) is None

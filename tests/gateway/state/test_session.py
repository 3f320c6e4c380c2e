"""SessionStore against a real Redis: the inbox and its job, the claim, the fenced finish,
a reset, the reply's ids kept for a re-run."""

from __future__ import annotations

import asyncio
import json

import redis.asyncio as aioredis

from gateway.state.keys import Keys
from gateway.state.session import SIDE_ANSWERS_KEPT, Finish, SessionStore, assistant_entry
from tests.support.helpers import inbound

TTL = 5.0


async def test_a_message_lands_in_the_inbox_with_one_job_and_its_retry_adds_nothing(
    redis_client: aioredis.Redis,
) -> None:
    sessions = SessionStore(redis_client)
    message = inbound("hello", event_id="ev-once")
    fresh, job = await sessions.append_user(message)
    again, second_job = await sessions.append_user(message)
    assert fresh and job is not None
    assert not again and second_job is None
    assert [e["text"] for e in await sessions.inbox(message.session_key)] == ["hello"]
    assert await redis_client.xlen(Keys.jobs("test", 0)) == 1
    assert await sessions.owed(message.session_key) == 1


async def test_a_second_message_while_a_turn_is_queued_joins_it_without_a_job(
    redis_client: aioredis.Redis,
) -> None:
    sessions = SessionStore(redis_client)
    first, second = inbound("one"), inbound("two")
    _, job = await sessions.append_user(first)
    _, joined = await sessions.append_user(second)
    assert job is not None and joined is None
    assert [e["text"] for e in await sessions.inbox(first.session_key)] == ["one", "two"]
    assert await redis_client.xlen(Keys.jobs("test", 0)) == 1


async def test_a_claim_moves_the_inbox_into_the_history_and_holds_out_another_token(
    redis_client: aioredis.Redis,
) -> None:
    sessions = SessionStore(redis_client)
    message = inbound("what is new?")
    key = message.session_key
    await sessions.append_user(message)
    claim = await sessions.claim(key, "token-a", TTL)
    assert claim.ok and claim.has_work and claim.answered == 0 and claim.length == 1
    assert claim.view is not None
    assert [e["text"] for e in claim.view.entries] == ["what is new?"]
    assert await sessions.inbox(key) == []
    assert await sessions.is_running(key)
    assert not (await sessions.claim(key, "token-b", TTL)).ok


async def test_a_finished_turn_is_recorded_once_and_moves_the_answered_mark(
    redis_client: aioredis.Redis,
) -> None:
    sessions = SessionStore(redis_client)
    message = inbound("hi")
    key = message.session_key
    await sessions.append_user(message)
    claim = await sessions.claim(key, "token-a", TTL)
    entry = assistant_entry("hello back", claim.turn_id, ["m1"])
    assert await sessions.finish(key, "token-a", claim, entry) is Finish.RECORDED
    # The same run finishing again (a retried script call) records nothing more.
    assert await sessions.finish(key, "token-a", claim, entry) is not Finish.RECORDED
    history = await sessions.history(key)
    assert [e["role"] for e in history] == ["user", "assistant"]
    assert not await sessions.is_running(key)
    next_claim = await sessions.claim(key, "token-b", TTL)
    assert next_claim.ok and not next_claim.has_work and next_claim.answered == 2


async def test_a_turn_running_across_a_reset_records_nothing_into_the_new_conversation(
    redis_client: aioredis.Redis,
) -> None:
    sessions = SessionStore(redis_client)
    message = inbound("remember this")
    key = message.session_key
    await sessions.append_user(message)
    claim = await sessions.claim(key, "token-a", TTL)
    await sessions.reset(key)
    entry = assistant_entry("remembered", claim.turn_id, [])
    assert await sessions.finish(key, "token-a", claim, entry) is Finish.SUPERSEDED
    assert await sessions.history(key) == []


async def test_a_rerun_finds_the_reply_ids_its_predecessor_stored_for_that_message(
    redis_client: aioredis.Redis,
) -> None:
    sessions = SessionStore(redis_client)
    message = inbound("tell me a story")
    key = message.session_key
    await sessions.append_user(message)
    first = await sessions.claim(key, "token-a", 0.2)
    assert first.view is not None and not first.rerun
    user_id = first.view.entries[0]["id"]
    assert await sessions.show_progress(key, "token-a", first, ids=["m7"], reply_to=user_id)
    assert await sessions.show_progress(key, "token-a", first, text="Once upon")
    assert await sessions.live(key) == "Once upon"
    async with asyncio.timeout(5):  # the first run dies: its lease runs out
        while await sessions.is_running(key):
            await asyncio.sleep(0.02)
    second = await sessions.claim(key, "token-b", TTL)
    assert second.ok and second.rerun and second.turn_id == first.turn_id
    assert second.ids_for(user_id) == ("m7",)
    assert second.ids_for("a-newer-message") == ()
    # The run that lost its lease shows no more text (its ids are still kept: a later
    # re-run edits what it posted).
    assert not await sessions.show_progress(key, "token-a", first, text="Once upon a stale")
    assert await sessions.live(key) != "Once upon a stale"


async def test_side_answers_are_kept_newest_last_capped_and_gone_with_a_reset(
    redis_client: aioredis.Redis,
) -> None:
    sessions = SessionStore(redis_client)
    key = "test:W:C1"
    for n in range(SIDE_ANSWERS_KEPT + 2):
        await sessions.note_side_answer(key, {"question": f"q{n}", "answer": "a"})
    kept = [
        json.loads(item)["question"]
        for item in await redis_client.lrange(Keys.side_answers(key), 0, -1)
    ]
    assert kept == [f"q{n}" for n in range(2, SIDE_ANSWERS_KEPT + 2)]
    assert await sessions.history(key) == []
    await sessions.reset(key)
    assert not await redis_client.exists(Keys.side_answers(key))

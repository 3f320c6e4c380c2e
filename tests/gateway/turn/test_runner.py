"""One main turn (gateway.turn.runner) through the worker, against a real Redis and the fake model.

Claim, stop, reset, a lost lease, a failed call and the injections a turn hands on.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from gateway.state.keys import Keys
from gateway.state.session import SessionStore
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import Harness, start_workers, texts
from tests.support.helpers import inbound
from tests.support.model_turns import (  # noqa: F401  (collected here)
    test_a_failed_model_call_tells_the_user_once_and_records_no_half_reply,
    test_a_turn_that_loses_its_lease_is_run_again_into_the_same_message,
    test_stop_cancels_the_running_turn,
)


async def test_messages_during_a_turn_are_answered_together_by_the_next(harness: Harness) -> None:
    harness.llm.duration = 0.6
    first = inbound("first question")
    await harness.ingest.receive(first)
    await harness.llm.await_requests(1)
    await harness.ingest.receive(inbound("second"))
    await harness.ingest.receive(inbound("third"))
    await harness.idle(first.session_key)
    roles = [
        (e["role"], e["text"] if e["role"] == "user" else "")
        for e in await harness.history(first.session_key)
    ]
    assert roles == [
        ("user", "first question"),
        ("assistant", ""),
        ("user", "second"),
        ("user", "third"),
        ("assistant", ""),
    ]
    second_request = harness.llm.requests[1]["messages"]
    assert [m["role"] for m in second_request] == ["system", "user", "assistant", "user", "user"]
    assert len(harness.llm.requests) == 2


async def test_a_transient_failure_is_retried_before_the_first_token(harness: Harness) -> None:
    harness.llm.fail_next(429, times=1, retry_after=0.1)
    harness.llm.reply = "made it"
    message = inbound("hello")
    await harness.ingest.receive(message)
    await harness.idle(message.session_key)
    assert texts(harness.sender) == ["made it"]
    assert len(harness.llm.requests) == 2


async def test_reset_during_a_turn_keeps_the_old_reply_out_of_the_new_session(
    harness: Harness,
) -> None:
    harness.llm.duration = 1.0
    message = inbound("old topic")
    await harness.ingest.receive(message)
    await harness.llm.await_requests(1)
    await harness.ingest.receive(inbound("/reset"))
    await harness.idle(message.session_key)
    assert await harness.history(message.session_key) == []


def reminder_of(request: Any) -> str:
    return str(request["messages"][-1]["content"]).partition("<system-reminder>")[2]


async def test_an_injection_reaches_one_turn_and_its_rerun_but_not_the_next(
    harness: Harness,
) -> None:
    harness.llm.reply = "the answer"
    harness.llm.duration = 2.0
    message = inbound("first")
    key = message.session_key
    await harness.sessions.inject(key, "the deploy finished at noon")
    await harness.ingest.receive(message)
    await harness.sender.wait_for(lambda: harness.sender.messages)
    await harness.take_over(key)  # the turn runs again
    await harness.idle(key, timeout=30)
    harness.llm.duration = 0.0
    await harness.ingest.receive(inbound("second"))
    await harness.idle(key)
    first, rerun, second = harness.llm.requests
    assert "the deploy finished at noon" in reminder_of(first)
    assert "the deploy finished at noon" in reminder_of(rerun)
    assert "the deploy finished at noon" not in reminder_of(second)
    assert await harness.sessions.redis.llen(Keys.session(key, "injections")) == 0


async def test_a_rerun_that_cannot_know_the_posted_message_posts_it_under_the_same_key(
    harness: Harness,
) -> None:
    """The run died after the platform took its post but before the id was stored: the
    re-run posts again, under the key the dead run used, so a platform that makes posts
    idempotent (Discord) hands back the first message instead of showing a second."""
    harness.llm.reply = "the answer"
    harness.llm.duration = 2.0
    first, second = inbound("first"), inbound("second")
    key = first.session_key
    await harness.ingest.receive(first)
    await harness.lose_reply_ids(key)
    await harness.idle(key, timeout=30)
    harness.llm.duration = 0.0
    await harness.ingest.receive(second)
    await harness.idle(key)
    dead, rerun, later = [call.key for call in harness.sender.calls if call.op == "send"]
    assert dead is not None and dead == rerun
    assert later is not None and later != dead  # another message's answer, another key


async def test_a_turn_with_nothing_to_answer_leaves_the_injections_for_the_next(
    harness: Harness,
) -> None:
    message = inbound("hello")
    key = message.session_key
    await harness.sessions.inject(key, "note for later")
    # An entry with no reply address (nothing to answer), as if written by another part.
    await harness.sessions.redis.rpush(
        Keys.session(key, "inbox"), '{"id": "x1", "role": "user", "text": "no address"}'
    )
    await harness.sessions.enqueue(message, "turn", {})
    await harness.idle(key)
    assert harness.llm.requests == []
    await harness.ingest.receive(message)
    await harness.idle(key)
    (request,) = harness.llm.requests
    assert "note for later" in reminder_of(request)


async def test_a_turn_whose_model_call_fails_gives_its_injections_to_the_next(
    harness: Harness,
) -> None:
    harness.llm.fail_next(500, times=2)  # the first try and its one retry
    message = inbound("first")
    key = message.session_key
    await harness.sessions.inject(key, "the deploy finished at noon")
    await harness.ingest.receive(message)
    await harness.idle(key)
    assert texts(harness.sender)[0].startswith("⚠️ Sorry, I could not answer")
    await harness.sessions.inject(key, "and the tests passed")
    await harness.ingest.receive(inbound("second"))
    await harness.idle(key)
    reminder = reminder_of(harness.llm.requests[-1])
    assert "the deploy finished at noon" in reminder and "and the tests passed" in reminder
    assert reminder.index("the deploy finished") < reminder.index("and the tests passed")
    assert await harness.sessions.redis.llen(Keys.session(key, "injections")) == 0


async def test_a_rerun_answering_a_newer_message_leaves_the_first_runs_reply_alone(
    redis_url: str, redis_client: aioredis.Redis, llm: FakeLLM
) -> None:
    """A run posts its whole answer to one message and loses its lease before recording
    (Redis restarted under it, say); the user, seeing the answer, writes again. The
    re-run of that turn answers the newer message: its reply goes under that message,
    and the answer the user already saw stays as it is."""
    llm.reply = "the answer to both"
    sessions = SessionStore(redis_client)
    first, second = inbound("first question"), inbound("second question")
    key = first.session_key
    await sessions.append_user(first)
    claim = await sessions.claim(key, "first-run", 30)
    assert claim.view is not None
    answers = claim.view.entries[-1]["id"]
    await sessions.show_progress(key, "first-run", claim, ids=["first-reply"], reply_to=answers)
    await redis_client.delete(Keys.session(key, "lease"))  # expired while Redis was away
    await sessions.append_user(second)
    async with start_workers(redis_url, llm, 1) as h:
        await h.idle(key)
        history = await h.history(key)
        calls = [c for c in h.sender.calls if c.op in ("send", "edit")]
    assert [e["role"] for e in history] == ["user", "user", "assistant"]
    assert not any(c.message_id == "first-reply" for c in calls), "the first answer was edited"
    assert calls and calls[0].op == "send"
    assert calls[0].address is not None and calls[0].address.reply_to == second.reply.reply_to
    assert history[-1]["platform_message_ids"] == [calls[0].message_id]

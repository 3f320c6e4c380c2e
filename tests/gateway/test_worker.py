"""The worker, in process, against a real Redis and litellm talking to the fake model."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.ingest import Ingest
from gateway.session import SessionStore
from gateway.worker import Worker
from tests.fakes.llm_server import FakeLLM
from tests.gateway.helpers import inbound, settings
from tests.gateway.recording_sender import RecordingSender


@dataclass
class Harness:
    ingest: Ingest
    sessions: SessionStore
    sender: RecordingSender
    llm: FakeLLM
    workers: list[Worker]

    async def idle(self, session_key: str, timeout: float = 15.0) -> None:
        """Wait until every job of the session is done."""
        try:
            async with asyncio.timeout(timeout):
                while await self.sessions.owed(session_key) > 0:
                    await asyncio.sleep(0.02)
        except TimeoutError:
            redis = self.sessions.redis
            print(
                "STATE",
                await self.sessions.meta(session_key),
                await redis.xpending("gw:jobs:test", "gw-workers"),
                await redis.xrange("gw:jobs:test"),
                await self.sessions.inbox(session_key),
                await redis.get(f"gw:{{{session_key}}}:lease"),
            )
            import io

            for task in asyncio.all_tasks():
                buf = io.StringIO()
                task.print_stack(limit=8, file=buf)
                if "turn" in buf.getvalue() or "delivery" in buf.getvalue():
                    print("TASK", buf.getvalue())
            raise

    async def history(self, session_key: str) -> list[dict[str, Any]]:
        return await self.sessions.history(session_key)


async def start_workers(
    redis_url: str, llm: FakeLLM, count: int, **values: Any
) -> AsyncIterator[Harness]:
    config = settings(
        redis_url,
        GATEWAY_MODEL="openai/main-model",
        GATEWAY_SIDE_MODEL="openai/side-model",
        GATEWAY_API_BASE=llm.api_base,
        GATEWAY_API_KEY="sk-test-key",
        GATEWAY_MODEL_RETRIES=1,
        **values,
    )
    clients = [aioredis.Redis.from_url(redis_url, decode_responses=True) for _ in range(count + 1)]
    sender = RecordingSender()
    workers = [Worker(config, client, {"test": sender}) for client in clients[1:]]
    stop = asyncio.Event()
    runs = [asyncio.create_task(w.run(stop)) for w in workers]
    await asyncio.gather(*(w.ready.wait() for w in workers))
    try:
        yield Harness(Ingest(config, clients[0]), SessionStore(clients[0]), sender, llm, workers)
    finally:
        stop.set()
        llm.release_hangs()
        await asyncio.gather(*runs, return_exceptions=True)
        for client in clients:
            await client.aclose()


@pytest.fixture
async def harness(redis_url: str, llm: FakeLLM) -> AsyncIterator[Harness]:
    async for h in start_workers(redis_url, llm, 1):
        yield h


@pytest.fixture
async def two_workers(redis_url: str, llm: FakeLLM) -> AsyncIterator[Harness]:
    async for h in start_workers(redis_url, llm, 2):
        yield h


def texts(sender: RecordingSender) -> list[str]:
    return list(sender.messages.values())


async def test_a_message_gets_a_streamed_reply_recorded_once(harness: Harness) -> None:
    harness.llm.reply = "Hi Alice, nice to meet you."
    message = inbound("hello there")
    await harness.ingest.receive(message)
    await harness.idle(message.session_key)
    history = await harness.history(message.session_key)
    assert [(e["role"], e["text"]) for e in history] == [
        ("user", "hello there"),
        ("assistant", "Hi Alice, nice to meet you."),
    ]
    assert texts(harness.sender) == ["Hi Alice, nice to meet you."]
    (request,) = harness.llm.requests
    body = request["body"] if "body" in request else request
    messages = body["messages"]
    assert messages[0]["role"] == "system"
    assert messages[-1]["content"].startswith("hello there\n\n<system-reminder>\n")
    assert "This reply goes to Alice" in messages[-1]["content"]
    assert history[-1]["platform_message_ids"] == ["1"]


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


async def test_many_sessions_run_at_once(harness: Harness) -> None:
    harness.llm.duration = 0.5
    messages = [inbound(f"q{i}", channel=f"C{i}") for i in range(10)]
    started = asyncio.get_running_loop().time()
    for message in messages:
        await harness.ingest.receive(message)
    for message in messages:
        await harness.idle(message.session_key)
    assert asyncio.get_running_loop().time() - started < 3.0  # ten 0.5 s turns overlapped


async def test_invariant_holds_with_two_workers_and_messages_landing_as_turns_end(
    two_workers: Harness,
) -> None:
    """Every user message is answered, and every turn recorded once, however messages land."""
    h = two_workers
    h.llm.duration = 0.05
    rng = random.Random(7)
    keys = [inbound("x", channel=f"S{i}").session_key for i in range(4)]
    sent = {key: 0 for key in keys}

    async def chatter(channel: int) -> None:
        for n in range(12):
            await h.ingest.receive(inbound(f"m{n}", channel=f"S{channel}"))
            sent[keys[channel]] += 1
            # land close to the end of the turn that is running (~50 ms)
            await asyncio.sleep(rng.choice([0.0, 0.045, 0.05, 0.055, 0.1]))

    await asyncio.gather(*(chatter(i) for i in range(4)))
    for key in keys:
        await h.idle(key, timeout=30)
        history = await h.history(key)
        meta = await h.sessions.meta(key)
        users = [e for e in history if e["role"] == "user"]
        assistants = [e for e in history if e["role"] == "assistant"]
        assert len(users) == sent[key]
        assert await h.sessions.inbox(key) == []
        assert int(meta["answered"]) == len(history)
        assert history[-1]["role"] == "assistant"
        assert len(assistants) == int(meta["turns"])
        assert len({e["turn_id"] for e in assistants}) == len(assistants)


async def test_a_failed_model_call_tells_the_user_once_and_records_no_half_reply(
    harness: Harness,
) -> None:
    harness.llm.fail_next(500, times=2)  # the first try and its one retry
    message = inbound("are you there?")
    await harness.ingest.receive(message)
    await harness.idle(message.session_key)
    assert len(harness.sender.messages) == 1
    (shown,) = texts(harness.sender)
    assert shown.startswith("⚠️ Sorry, I could not answer") and "sk-test-key" not in shown
    history = await harness.history(message.session_key)
    assert [e["role"] for e in history] == ["user"]
    harness.llm.reply = "back again"
    await harness.ingest.receive(inbound("retry"))
    await harness.idle(message.session_key)
    assert [e["role"] for e in await harness.history(message.session_key)] == [
        "user",
        "user",
        "assistant",
    ]


async def test_a_transient_failure_is_retried_before_the_first_token(harness: Harness) -> None:
    harness.llm.fail_next(429, times=1, retry_after=0.1)
    harness.llm.reply = "made it"
    message = inbound("hello")
    await harness.ingest.receive(message)
    await harness.idle(message.session_key)
    assert texts(harness.sender) == ["made it"]
    assert len(harness.llm.requests) == 2


async def test_stop_cancels_the_running_turn(harness: Harness) -> None:
    harness.llm.reply = "word " * 200
    harness.llm.duration = 20.0
    message = inbound("write a lot")
    await harness.ingest.receive(message)
    await harness.sender.wait_for(lambda: harness.sender.messages)
    await harness.ingest.receive(inbound("/stop"))
    await harness.idle(message.session_key, timeout=8)
    history = await harness.history(message.session_key)
    assert history[-1]["role"] == "assistant"
    assert len(history[-1]["text"].split()) < 200
    assert any(t.endswith("_(stopped)_") for t in texts(harness.sender))
    assert "Stopping the reply." in texts(harness.sender)


async def test_a_turn_that_loses_its_lease_is_run_again_into_the_same_message(
        harness: Harness) -> None:
    harness.llm.reply = "the complete answer"
    harness.llm.duration = 2.0
    message = inbound("hello")
    await harness.ingest.receive(message)
    await harness.sender.wait_for(lambda: harness.sender.messages)
    await harness.sessions.redis.delete(f"gw:{{{message.session_key}}}:lease")  # expired
    await harness.idle(message.session_key, timeout=30)
    history = await harness.history(message.session_key)
    assert [e["role"] for e in history] == ["user", "assistant"]
    assert harness.sender.messages == {"1": "the complete answer"}
    assert not any("stopped" in c.text for c in harness.sender.calls)
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


async def test_status_and_help_answer_at_once(harness: Harness) -> None:
    message = inbound("hello")
    await harness.ingest.receive(message)
    await harness.idle(message.session_key)
    await harness.ingest.receive(inbound("/status"))
    await harness.ingest.receive(inbound("/help"))
    await harness.idle(message.session_key)
    status = next(t for t in texts(harness.sender) if t.startswith("Model:"))
    assert "openai/main-model" in status and "2 messages" in status
    assert any("/btw <question>" in t for t in texts(harness.sender))


def reminder_of(request: Any) -> str:
    return str(request["messages"][-1]["content"]).partition("<system-reminder>")[2]


async def test_an_injection_reaches_one_turn_and_its_rerun_but_not_the_next(
        harness: Harness) -> None:
    harness.llm.reply = "the answer"
    harness.llm.duration = 2.0
    message = inbound("first")
    key = message.session_key
    await harness.sessions.inject(key, "the deploy finished at noon")
    await harness.ingest.receive(message)
    await harness.sender.wait_for(lambda: harness.sender.messages)
    await harness.sessions.redis.delete(f"gw:{{{key}}}:lease")  # expired: the turn runs again
    await harness.idle(key, timeout=30)
    harness.llm.duration = 0.0
    await harness.ingest.receive(inbound("second"))
    await harness.idle(key)
    first, rerun, second = harness.llm.requests
    assert "the deploy finished at noon" in reminder_of(first)
    assert "the deploy finished at noon" in reminder_of(rerun)
    assert "the deploy finished at noon" not in reminder_of(second)
    assert await harness.sessions.redis.llen(f"gw:{{{key}}}:injections") == 0


async def test_a_turn_with_nothing_to_answer_leaves_the_injections_for_the_next(
        harness: Harness) -> None:
    message = inbound("hello")
    key = message.session_key
    await harness.sessions.inject(key, "note for later")
    # An entry with no reply address (nothing to answer), as if written by another part.
    await harness.sessions.redis.rpush(
        f"gw:{{{key}}}:inbox", '{"id": "x1", "role": "user", "text": "no address"}')
    await harness.sessions.enqueue(message, "turn", {})
    await harness.idle(key)
    assert harness.llm.requests == []
    await harness.ingest.receive(message)
    await harness.idle(key)
    (request,) = harness.llm.requests
    assert "note for later" in reminder_of(request)


async def test_a_turn_whose_model_call_fails_gives_its_injections_to_the_next(
        harness: Harness) -> None:
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
    assert await harness.sessions.redis.llen(f"gw:{{{key}}}:injections") == 0


async def test_a_rerun_answering_a_newer_message_leaves_the_first_runs_reply_alone(
        redis_url: str, redis_client: aioredis.Redis, llm: FakeLLM) -> None:
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
    await redis_client.delete(f"gw:{{{key}}}:lease")  # expired while Redis was away
    await sessions.append_user(second)
    async for h in start_workers(redis_url, llm, 1):
        await h.idle(key)
        history = await h.history(key)
        calls = [c for c in h.sender.calls if c.op in ("send", "edit")]
    assert [e["role"] for e in history] == ["user", "user", "assistant"]
    assert not any(c.message_id == "first-reply" for c in calls), "the first answer was edited"
    assert calls and calls[0].op == "send"
    assert calls[0].address is not None and calls[0].address.reply_to == second.reply.reply_to
    assert history[-1]["platform_message_ids"] == [calls[0].message_id]

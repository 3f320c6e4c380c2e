"""The worker, in process, against a real Redis and litellm talking to the fake model."""

from __future__ import annotations

import asyncio
import random

from tests.support.harness import Harness, texts
from tests.support.helpers import inbound
from tests.support.model_turns import test_many_sessions_run_at_once  # noqa: F401  (collected here)


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

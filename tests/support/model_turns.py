"""Worker tests that involve the model, written once and collected twice.

tests/gateway/test_worker.py and turn/test_runner.py import them to run with litellm in the
test's process; tests/gateway/models/test_pool.py imports them again, where its own
`harness` fixture puts the model calls in a model process. This module's name keeps
pytest from collecting it on its own.
"""

from __future__ import annotations

from gateway.state.keys import Keys
from tests.support.harness import Harness, texts
from tests.support.helpers import inbound


async def test_many_sessions_run_at_once(harness: Harness) -> None:
    """Ten sessions' turns are in the model at the same time: the last call arrives
    before the first one ends (a call lasts 3 s, long beside queueing ten messages)."""
    harness.llm.duration = 3.0
    messages = [inbound(f"q{i}", channel=f"C{i}") for i in range(10)]
    for message in messages:
        await harness.ingest.receive(message)
    for message in messages:
        await harness.idle(message.session_key)
    calls = harness.llm.requests
    assert len(calls) == 10
    assert max(c.received_at for c in calls) < min(c.finished_at or 0.0 for c in calls)


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


async def test_a_turn_whose_lease_expired_untaken_goes_on_without_a_rerun(
    harness: Harness,
) -> None:
    """As after an event loop stalled past the TTL: nobody took the key, so the
    heartbeat takes it again and the one run answers."""
    harness.llm.reply = "the one answer"
    harness.llm.duration = 2.0
    message = inbound("hello")
    await harness.ingest.receive(message)
    await harness.sender.wait_for(lambda: harness.sender.messages)
    await harness.sessions.redis.delete(Keys.session(message.session_key, "lease"))  # expired
    await harness.idle(message.session_key, timeout=30)
    history = await harness.history(message.session_key)
    assert [e["role"] for e in history] == ["user", "assistant"]
    assert harness.sender.messages == {"1": "the one answer"}
    assert len(harness.llm.requests) == 1


async def test_a_turn_that_loses_its_lease_is_run_again_into_the_same_message(
    harness: Harness,
) -> None:
    harness.llm.reply = "the complete answer"
    harness.llm.duration = 2.0
    message = inbound("hello")
    await harness.ingest.receive(message)
    await harness.sender.wait_for(lambda: harness.sender.messages)
    await harness.take_over(message.session_key)
    await harness.idle(message.session_key, timeout=30)
    history = await harness.history(message.session_key)
    assert [e["role"] for e in history] == ["user", "assistant"]
    assert harness.sender.messages == {"1": "the complete answer"}
    assert not any("stopped" in c.text for c in harness.sender.calls)
    assert len(harness.llm.requests) == 2

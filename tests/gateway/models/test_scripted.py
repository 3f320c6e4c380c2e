"""Turns answered by a ScriptedBackend: the worker, compiler and delivery against a real
Redis, with no model server and no litellm in the way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from gateway.errors import ModelStalled, ModelUnavailable
from gateway.inbound.ingest import Ingest
from gateway.models import ModelCall, Models, Usage
from gateway.models.scripted import ScriptedBackend
from gateway.state.session import SessionStore
from gateway.worker import Worker
from tests.support.helpers import inbound, settings
from tests.support.recording_sender import RecordingSender
from tests.support.redis_servers import client_for

MAIN, SIDE = "scripted/main", "scripted/side"
CUT_NOTE = "_(the answer was cut off: the model stopped responding)_"


@dataclass
class Scripted:
    backend: ScriptedBackend
    ingest: Ingest
    sessions: SessionStore
    sender: RecordingSender

    async def say(self, text: str) -> str:
        """Send `text` and wait until its session owes nothing; the session's key."""
        message = inbound(text)
        await self.ingest.receive(message)
        async with asyncio.timeout(15):
            while await self.sessions.owed(message.session_key) > 0:
                await asyncio.sleep(0.02)
        return message.session_key

    def texts(self) -> list[str]:
        return list(self.sender.messages.values())

    async def roles(self, session_key: str) -> list[str]:
        return [entry["role"] for entry in await self.sessions.history(session_key)]


def reply(call: ModelCall) -> str:
    return "the side answer" if call.model == SIDE else "one two three four"


@pytest.fixture
async def scripted(redis_url: str) -> AsyncIterator[Scripted]:
    backend = ScriptedBackend(reply)
    config = settings(redis_url, GATEWAY_MODEL=MAIN, GATEWAY_SIDE_MODEL=SIDE)
    client = client_for(redis_url)
    sender = RecordingSender()
    worker = Worker(config, client, {"test": sender}, Models(backend))
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    await worker.ready.wait()
    try:
        yield Scripted(backend, Ingest(config, client), SessionStore(client), sender)
    finally:
        stop.set()
        await running
        await client.aclose()


async def test_a_turn_is_answered_by_the_script_and_recorded_once(scripted: Scripted) -> None:
    key = await scripted.say("hello there")
    assert scripted.texts() == ["one two three four"]
    history = await scripted.sessions.history(key)
    assert [(e["role"], e["text"]) for e in history] == [
        ("user", "hello there"),
        ("assistant", "one two three four"),
    ]
    (call,) = scripted.backend.calls
    assert call.model == MAIN
    assert call.messages[0]["role"] == "system"
    assert call.messages[-1]["content"].startswith("hello there\n\n<system-reminder>\n")


async def test_a_failure_before_any_text_tells_the_user_and_records_no_reply(
    scripted: Scripted,
) -> None:
    scripted.backend.fail_next(ModelUnavailable("the script is down"))
    key = await scripted.say("are you there?")
    (shown,) = scripted.texts()
    assert shown.startswith("⚠️ Sorry, I could not answer: the model provider could not be")
    assert await scripted.roles(key) == ["user"]
    await scripted.say("again")
    assert await scripted.roles(key) == ["user", "user", "assistant"]


async def test_a_stall_after_some_text_keeps_the_text_shown_with_a_note(scripted: Scripted) -> None:
    scripted.backend.fail_next(ModelStalled("silent"), after_pieces=2)
    key = await scripted.say("tell me a story")
    assert scripted.texts() == [f"one two\n\n{CUT_NOTE}"]
    history = await scripted.sessions.history(key)
    assert [(e["role"], e["text"]) for e in history] == [
        ("user", "tell me a story"),
        ("assistant", "one two"),
    ]


async def test_a_side_question_is_one_call_to_the_side_model(scripted: Scripted) -> None:
    key = await scripted.say("/btw what did we decide?")
    (answer,) = scripted.texts()
    assert answer.endswith("the side answer")
    (call,) = scripted.backend.calls
    assert call.model == SIDE
    assert await scripted.roles(key) == []


async def test_a_calls_usage_is_written_only_once_its_reader_has_gone_on() -> None:
    """The usage write is a few hundred microseconds of the event loop: started as the
    stream ends, it would run before the code the stream's end wakes (a turn's reply
    delivery, woken by its reading task's end as here), not after it."""
    models = Models(ScriptedBackend("one two three"))
    order: list[str] = []

    async def meter(call: ModelCall, usage: Usage) -> None:
        order.append("usage written")

    async def read() -> None:
        async for _ in models.stream(ModelCall(MAIN, (), 5.0), Usage()):
            pass
        order.append("stream ended")

    models.meter = meter
    reading = asyncio.create_task(read())
    await asyncio.wait({reading})  # as `generation.generate` waits for its reading task
    order.append("reader went on")
    await models.metered()
    assert order == ["stream ended", "reader went on", "usage written"]

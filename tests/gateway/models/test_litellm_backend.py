"""The model boundary against the loopback model server, through the real litellm.

A stream that goes silent is cut off after the idle timeout
(GATEWAY_STREAM_IDLE_TIMEOUT), in this process and through a model process:
retried while nothing was shown, ended with ModelStalled once text was, and
never cut while it keeps sending. The turn then finishes the visible reply
with the text shown and a note that it was cut off.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from gateway.errors import ModelStalled
from gateway.models import ModelCall, Models, ResponseChain, Usage
from tests.fakes.llm_server import FakeLLM
from tests.gateway.harness import start_workers, texts
from tests.gateway.helpers import inbound, settings

IDLE = 0.5
# Far above the idle timeout: a test that waits for it would fail its time bound.
TOTAL = 20.0
QUICK = 8.0  # a stalled call is over well within this (a model process starts apart)
REPLY = "one two three four five six"
CUT_NOTE = "_(the answer was cut off: the model stopped responding)_"
MODES = pytest.mark.parametrize("processes", [0, 1], ids=["in-process", "model-process"])
# litellm streams the Responses API only for a model its map says can; for any
# other it makes one whole call and replays it as a stream.
RESPONSES_MODEL = "openai/responses/gpt-4.1-mini"


@asynccontextmanager
async def boundary(llm: FakeLLM, processes: int, idle: float = IDLE) -> AsyncIterator[Models]:
    """Models as a worker builds them, with `processes` model processes (0: here)."""
    config = settings(
        "redis://127.0.0.1:1",  # never used: the boundary does not touch Redis
        GATEWAY_API_BASE=llm.api_base,
        GATEWAY_API_KEY="sk-test-key",
        GATEWAY_MODEL_RETRIES=1,
        GATEWAY_MODEL_TIMEOUT=TOTAL,
        GATEWAY_STREAM_IDLE_TIMEOUT=idle,
    )
    models = Models.for_settings(config, processes=processes)
    await models.start()  # litellm's import takes seconds: not part of what a test times
    try:
        yield models
    finally:
        await models.aclose()


def call(model: str = "openai/main-model") -> ModelCall:
    return ModelCall(model, [{"role": "user", "content": "hi"}], TOTAL)


async def collect(pieces: AsyncIterator[str], into: list[str]) -> float:
    """Read every piece into `into`; the seconds it took."""
    started = time.monotonic()
    async for piece in pieces:
        into.append(piece)
    return time.monotonic() - started


def responses(models: Models, usage: Usage, chain: ResponseChain) -> AsyncIterator[str]:
    return models.stream_response(call(RESPONSES_MODEL), usage, chain)


@MODES
async def test_a_stream_silent_after_its_headers_is_retried_and_answered(
    llm: FakeLLM, processes: int
) -> None:
    llm.reply = REPLY
    llm.hang_next(after_headers=True)
    async with boundary(llm, processes) as models:
        pieces: list[str] = []
        seconds = await collect(models.stream(call(), Usage()), pieces)
    assert "".join(pieces) == REPLY
    assert len(llm.requests) == 2
    assert seconds < QUICK


@MODES
async def test_a_stream_that_stalls_after_some_text_ends_with_model_stalled(
    llm: FakeLLM, processes: int
) -> None:
    llm.reply = REPLY
    llm.hang_next(after_tokens=3)
    async with boundary(llm, processes) as models:
        pieces: list[str] = []
        started = time.monotonic()
        with pytest.raises(ModelStalled):
            await collect(models.stream(call(), Usage()), pieces)
        seconds = time.monotonic() - started
    assert pieces == ["one ", "two ", "three "]
    assert len(llm.requests) == 1  # what was shown cannot be asked for again
    assert seconds < QUICK


async def test_a_stream_that_never_speaks_fails_as_stalled_after_its_retries(llm: FakeLLM) -> None:
    llm.hang_next(times=2, after_headers=True)
    async with boundary(llm, 0) as models:
        started = time.monotonic()
        with pytest.raises(ModelStalled):
            await collect(models.stream(call(), Usage()), [])
        seconds = time.monotonic() - started
    assert len(llm.requests) == 2  # the call and its one retry, each cut at the idle bound
    assert seconds < QUICK


@MODES
async def test_a_slow_but_steady_stream_is_not_cut_off(llm: FakeLLM, processes: int) -> None:
    idle = 1.0
    llm.reply = REPLY
    llm.token_delay = 0.3  # the whole stream takes about twice the idle timeout
    async with boundary(llm, processes, idle=idle) as models:
        pieces: list[str] = []
        seconds = await collect(models.stream(call(), Usage()), pieces)
    assert "".join(pieces) == REPLY
    assert len(llm.requests) == 1
    assert seconds > idle


@MODES
async def test_a_responses_stream_is_retried_while_silent_and_cut_off_once_it_spoke(
    llm: FakeLLM, processes: int
) -> None:
    llm.reply = REPLY
    llm.hang_next(after_headers=True)
    async with boundary(llm, processes) as models:
        pieces: list[str] = []
        chain = ResponseChain()
        seconds = await collect(responses(models, Usage(), chain), pieces)
        assert "".join(pieces) == REPLY and seconds < QUICK
        assert chain.response_id  # the answering attempt's response continues the chain
        assert len(llm.requests) == 2

        llm.hang_next(after_tokens=2)
        pieces.clear()
        started = time.monotonic()
        with pytest.raises(ModelStalled):
            await collect(responses(models, Usage(), ResponseChain()), pieces)
        assert pieces == ["one ", "two "]
        assert time.monotonic() - started < QUICK
        assert len(llm.requests) == 3


# -- the turn ----------------------------------------------------------------------


@MODES
async def test_a_reply_that_stalls_is_finished_with_its_text_and_a_cut_off_note(
    redis_url: str, llm: FakeLLM, processes: int
) -> None:
    values: dict[str, Any] = {
        "GATEWAY_STREAM_IDLE_TIMEOUT": IDLE,
        "GATEWAY_MODEL_TIMEOUT": TOTAL,
        "GATEWAY_MODEL_PROCESSES": processes,
    }
    async for harness in start_workers(redis_url, llm, 1, **values):
        llm.reply = REPLY
        llm.hang_next(after_tokens=3)
        message = inbound("tell me a story")
        started = time.monotonic()
        await harness.ingest.receive(message)
        await harness.idle(message.session_key, timeout=QUICK)
        assert time.monotonic() - started < QUICK
        assert texts(harness.sender) == [f"one two three\n\n{CUT_NOTE}"]
        history = await harness.history(message.session_key)
        assert [(e["role"], e["text"]) for e in history] == [
            ("user", "tell me a story"),
            ("assistant", "one two three"),
        ]

        await harness.ingest.receive(inbound("go on"))
        await harness.idle(message.session_key, timeout=QUICK)
        assert texts(harness.sender)[-1] == REPLY
        assert [m["role"] for m in llm.requests[-1]["messages"]] == [
            "system",
            "user",
            "assistant",
            "user",
        ]


async def test_a_reply_that_never_started_says_the_model_stopped_responding(
    redis_url: str, llm: FakeLLM
) -> None:
    values: dict[str, Any] = {"GATEWAY_STREAM_IDLE_TIMEOUT": IDLE, "GATEWAY_MODEL_TIMEOUT": TOTAL}
    async for harness in start_workers(redis_url, llm, 1, **values):
        llm.hang_next(times=2, after_headers=True)
        message = inbound("hello?")
        await harness.ingest.receive(message)
        await harness.idle(message.session_key, timeout=QUICK)
        (shown,) = texts(harness.sender)
        assert shown.startswith("⚠️ Sorry, I could not answer: the model stopped responding")
        assert [e["role"] for e in await harness.history(message.session_key)] == ["user"]

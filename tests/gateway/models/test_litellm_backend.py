"""The model boundary against the loopback model server, through the real litellm.

A stream that goes silent is cut off after the idle timeout
(GATEWAY_STREAM_IDLE_TIMEOUT), in this process and through a model process:
retried while nothing was shown, ended with ModelStalled once text was, and
never cut while it keeps sending. The turn then finishes the visible reply
with the text shown and a note that it was cut off. The silence counts from
the request, so an endpoint that never sends its headers is cut off too; the
attempts before any text, and a one-shot call's, share the call's timeout. A
provider whose connection breaks midway ends the stream unretried, and the reply
keeps its text with a note that says why, as after a stall.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from gateway.errors import ModelStalled, ModelTimeout, ModelUnavailable
from gateway.models import ModelCall, Models, ResponseChain, Usage
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import start_workers, texts
from tests.support.helpers import inbound, settings

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
RESPONSES_IDLE = 1.5


@asynccontextmanager
async def boundary(
    llm: FakeLLM, processes: int, idle: float = IDLE, retries: int = 1
) -> AsyncIterator[Models]:
    """Models as a worker builds them, with `processes` model processes (0: here)."""
    config = settings(
        "redis://127.0.0.1:1",  # never used: the boundary does not touch Redis
        GATEWAY_API_BASE=llm.api_base,
        GATEWAY_API_KEY="sk-test-key",
        GATEWAY_MODEL_RETRIES=retries,
        GATEWAY_MODEL_TIMEOUT=TOTAL,
        GATEWAY_STREAM_IDLE_TIMEOUT=idle,
    )
    models = Models.for_settings(config, processes=processes)
    await models.start()  # litellm's import takes seconds: not part of what a test times
    try:
        yield models
    finally:
        await models.aclose()


def call(model: str = "openai/main-model", timeout: float = TOTAL) -> ModelCall:
    return ModelCall(model, [{"role": "user", "content": "hi"}], timeout)


async def collect(pieces: AsyncIterator[str], into: list[str]) -> float:
    """Read every piece into `into`; the seconds it took."""
    started = time.monotonic()
    async for piece in pieces:
        into.append(piece)
    return time.monotonic() - started


async def stalled_after_three(
    llm: FakeLLM, processes: int, idle: float = IDLE, timeout: float = TOTAL
) -> tuple[list[str], float]:
    """A stream that goes silent after three tokens, read until it raises ModelStalled:
    the pieces shown, and the seconds it took."""
    llm.reply = REPLY
    llm.hang_next(after_tokens=3)
    async with boundary(llm, processes, idle=idle) as models:
        pieces: list[str] = []
        started = time.monotonic()
        with pytest.raises(ModelStalled):
            await collect(models.stream(call(timeout=timeout), Usage()), pieces)
        return pieces, time.monotonic() - started


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
    pieces, seconds = await stalled_after_three(llm, processes)
    assert "".join(pieces) == "one two three "  # (a model process sends them in batches)
    assert len(llm.requests) == 1  # what was shown cannot be asked for again
    assert seconds < QUICK


@MODES
async def test_a_stall_after_some_text_is_a_stall_when_the_calls_timeout_comes_first(
    llm: FakeLLM, processes: int
) -> None:
    """With the call's timeout not above the idle timeout, litellm's own read timeout
    ends the silence (it comes due first): the shown text is kept all the same."""
    pieces, seconds = await stalled_after_three(llm, processes, idle=TOTAL, timeout=1.0)
    assert "".join(pieces) == "one two three "
    assert len(llm.requests) == 1
    assert seconds < QUICK


@MODES
async def test_a_connection_cut_after_some_text_ends_the_stream_unretried(
    llm: FakeLLM, processes: int
) -> None:
    """A provider that dies midway (no closing events, no end to the body): the stream
    ends with ModelUnavailable, and what was shown is not asked for again."""
    llm.reply = REPLY
    llm.drop_next(after_tokens=3)
    async with boundary(llm, processes) as models:
        pieces: list[str] = []
        with pytest.raises(ModelUnavailable):
            await collect(models.stream(call(), Usage()), pieces)
    assert "".join(pieces) == "one two three "
    assert len(llm.requests) == 1


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
async def test_an_endpoint_that_never_sends_its_headers_is_cut_at_the_idle_bound(
    llm: FakeLLM, processes: int
) -> None:
    """The wait for the headers is silence too: each attempt is cut at the idle timeout
    from its request, not at the call's timeout."""
    llm.hang_next(times=2)  # the call and its one retry: accepted, then not one byte
    async with boundary(llm, processes) as models:
        started = time.monotonic()
        with pytest.raises(ModelStalled):
            await collect(models.stream(call(), Usage()), [])
        seconds = time.monotonic() - started
    assert len(llm.requests) == 2
    assert seconds < QUICK, f"the header-less stream took {seconds:.1f}s to fail"


async def test_the_retries_before_any_text_share_the_calls_one_deadline(llm: FakeLLM) -> None:
    """Many retries of a silent endpoint: no attempt starts past the call's timeout."""
    idle, timeout = 1.0, 2.5
    llm.hang_next(times=6)
    async with boundary(llm, 0, idle=idle, retries=5) as models:
        started = time.monotonic()
        with pytest.raises(ModelTimeout):  # a silence (ModelStalled), or the deadline
            await collect(models.stream(call(timeout=timeout), Usage()), [])
        seconds = time.monotonic() - started
    assert seconds < timeout + 2.0, f"gave up after {seconds:.1f}s, past the {timeout}s deadline"
    assert len(llm.requests) <= 3, "retries went on past the deadline"  # 1 s each, and a wait


@MODES
async def test_a_one_shot_call_to_a_silent_endpoint_ends_within_its_timeout(
    llm: FakeLLM, processes: int
) -> None:
    """A side question's or a summary's call: its timeout bounds it, retries included."""
    timeout = 2.0
    llm.hang_next(times=3)
    async with boundary(llm, processes, retries=2) as models:
        started = time.monotonic()
        with pytest.raises(ModelTimeout):
            await models.complete(call(timeout=timeout))
        seconds = time.monotonic() - started
    assert seconds < timeout + 2.0, f"the one-shot call took {seconds:.1f}s, over {timeout}s"
    assert len(llm.requests) == 1  # no time was left for a retry


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
    # A process's first Responses stream spends a while in litellm before its first
    # event (modules its first call of that API loads), more on a loaded machine.
    async with boundary(llm, processes, idle=RESPONSES_IDLE) as models:
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
        assert "".join(pieces) == "one two "
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
    async with start_workers(redis_url, llm, 1, **values) as harness:
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


@MODES
async def test_a_reply_whose_connection_is_cut_midway_keeps_its_text_with_a_note(
    redis_url: str, llm: FakeLLM, processes: int
) -> None:
    values = {"GATEWAY_MODEL_TIMEOUT": TOTAL, "GATEWAY_MODEL_PROCESSES": processes}
    async with start_workers(redis_url, llm, 1, **values) as harness:
        llm.reply = REPLY
        llm.drop_next(after_tokens=3)
        message = inbound("tell me a story")
        await harness.ingest.receive(message)
        await harness.idle(message.session_key, timeout=QUICK)
        note = "_(the answer was cut off: the model provider could not be reached)_"
        assert texts(harness.sender) == [f"one two three\n\n{note}"]
        assert len(llm.requests) == 1  # what was shown is not asked for again
        history = await harness.history(message.session_key)
        assert [(e["role"], e["text"]) for e in history] == [
            ("user", "tell me a story"),
            ("assistant", "one two three"),
        ]


async def test_a_reply_that_never_started_says_the_model_stopped_responding(
    redis_url: str, llm: FakeLLM
) -> None:
    values: dict[str, Any] = {"GATEWAY_STREAM_IDLE_TIMEOUT": IDLE, "GATEWAY_MODEL_TIMEOUT": TOTAL}
    async with start_workers(redis_url, llm, 1, **values) as harness:
        llm.hang_next(times=2, after_headers=True)
        message = inbound("hello?")
        await harness.ingest.receive(message)
        await harness.idle(message.session_key, timeout=QUICK)
        (shown,) = texts(harness.sender)
        assert shown.startswith("⚠️ Sorry, I could not answer: the model stopped responding")
        assert [e["role"] for e in await harness.history(message.session_key)] == ["user"]


async def test_a_turn_against_an_endpoint_that_never_answers_is_told_once_within_its_retries(
    redis_url: str, llm: FakeLLM
) -> None:
    """No headers, ever: each attempt is cut at the idle timeout, the user told once after
    the last retry, long before the call's own timeout."""
    idle, retries = 1.0, 2
    values: dict[str, Any] = {
        "GATEWAY_STREAM_IDLE_TIMEOUT": idle,
        "GATEWAY_MODEL_TIMEOUT": TOTAL,
        "GATEWAY_MODEL_RETRIES": retries,
    }
    async with start_workers(redis_url, llm, 1, **values) as harness:
        llm.hang_next(times=retries + 1)
        message = inbound("anyone there?")
        started = time.monotonic()
        await harness.ingest.receive(message)
        await harness.idle(message.session_key, timeout=TOTAL)
        seconds = time.monotonic() - started
        # Each attempt's silence, the backoffs between them (at most 0.75 s and 1.5 s),
        # and room for a loaded machine.
        bound = idle * (1 + retries) + 2.25 + 3.0
        assert seconds < bound, f"the user was told after {seconds:.1f}s (bound {bound:g}s)"
        (shown,) = texts(harness.sender)
        assert shown.startswith("⚠️ Sorry, I could not answer: the model stopped responding")
        assert len(llm.requests) == retries + 1  # the call and its retries, no more
        assert [e["role"] for e in await harness.history(message.session_key)] == ["user"]


async def test_a_side_question_to_an_endpoint_that_never_answers_fails_within_its_timeout(
    redis_url: str, llm: FakeLLM
) -> None:
    """GATEWAY_SIDE_TIMEOUT bounds a side question's whole call, its retries included."""
    timeout = 2.0
    values: dict[str, Any] = {"GATEWAY_SIDE_TIMEOUT": timeout, "GATEWAY_MODEL_RETRIES": 2}
    async with start_workers(redis_url, llm, 1, **values) as harness:
        llm.hang_next(times=3, model="side-model")
        started = time.monotonic()
        await harness.ingest.receive(inbound("/btw what was decided?"))
        await harness.sender.wait_for(functools.partial(texts, harness.sender), timeout=TOTAL)
        seconds = time.monotonic() - started
        assert seconds < timeout + 3.0, f"the side question failed after {seconds:.1f}s"
        (shown,) = texts(harness.sender)
        assert shown.startswith("> btw: “what was decided?”\n\n⚠️ The side question failed: ")
        assert "the model took too long to answer" in shown
        assert len(llm.requests_for("side-model")) == 1

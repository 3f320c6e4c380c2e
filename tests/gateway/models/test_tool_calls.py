"""Tools offered to a model and the tool calls it asks for, across the model boundary.

Through the real litellm over loopback HTTP to the fake model server (chat
completions and the Responses API), through a model process, and from a
script: the calls come back whole from their streamed fragments, the tool
results of the next call reach the model, a malformed answer fails as
ModelBadResponse, and the idle timeout still holds after a tool call's first
fragment.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import pytest

from gateway.errors import ModelBadResponse, ModelStalled
from gateway.models import Message, ModelCall, Models, ResponseChain, ToolCall, Usage
from gateway.models.scripted import ScriptedAnswer, ScriptedBackend
from gateway.models.tool_calls import ToolCallParts
from tests.fakes.llm_server import FakeLLM
from tests.fakes.llm_tools import Answer, FakeToolCall, tools_then_text
from tests.support.helpers import settings

TOTAL = 20.0
IDLE = 0.5
QUICK = 8.0  # a stalled call is over well within this
MODES = pytest.mark.parametrize("processes", [0, 1], ids=["in-process", "model-process"])
CHAT_MODEL = "openai/main-model"
# litellm streams the Responses API for a model its map says can; any other it asks
# for whole and replays as a stream (the calls then come from `response.completed`).
RESPONSES_MODELS = pytest.mark.parametrize(
    "model", ["openai/responses/gpt-4.1-mini", "openai/responses/fake-model"]
)
SEARCH: Message = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the notes.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}
CLOCK: Message = {
    "type": "function",
    "function": {"name": "clock", "parameters": {"type": "object", "properties": {}}},
}
LONG_ARGUMENTS = '{"q": "how do redis streams keep a consumer group\'s pending list"}'


@asynccontextmanager
async def boundary(llm: FakeLLM, processes: int = 0, retries: int = 1) -> AsyncIterator[Models]:
    """Models as a worker builds them, with `processes` model processes (0: here)."""
    config = settings(
        "redis://127.0.0.1:1",  # never used: the boundary does not touch Redis
        GATEWAY_API_BASE=llm.api_base,
        GATEWAY_API_KEY="sk-test-key",
        GATEWAY_MODEL_RETRIES=retries,
        GATEWAY_MODEL_TIMEOUT=TOTAL,
        GATEWAY_STREAM_IDLE_TIMEOUT=IDLE,
    )
    models = Models.for_settings(config, processes=processes)
    await models.start()
    try:
        yield models
    finally:
        await models.aclose()


def call(
    messages: Sequence[Message] | None = None,
    tools: Sequence[Message] | None = (SEARCH, CLOCK),
    model: str = CHAT_MODEL,
) -> ModelCall:
    messages = messages or [{"role": "user", "content": "look it up"}]
    return ModelCall(model, messages, TOTAL, tools=tools)


async def stream(models: Models, model_call: ModelCall) -> tuple[list[str], list[ToolCall]]:
    pieces, calls = [], list[ToolCall]()
    async for piece in models.stream(model_call, Usage(), calls):
        pieces.append(piece)
    return pieces, calls


async def respond(
    models: Models, model_call: ModelCall, chain: ResponseChain
) -> tuple[list[str], list[ToolCall]]:
    pieces, calls = [], list[ToolCall]()
    async for piece in models.stream_response(model_call, Usage(), chain, calls):
        pieces.append(piece)
    return pieces, calls


def as_found(fake: FakeToolCall) -> ToolCall:
    assert fake.name is not None
    return ToolCall(fake.id, fake.name, fake.arguments)


def history_after(
    question: str, calls: list[ToolCall], outputs: dict[str, str]
) -> list[dict[str, Any]]:
    """The conversation a turn sends back: the question, the calls, each one's result."""
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ],
    }
    results = [{"role": "tool", "tool_call_id": c.id, "content": outputs[c.name]} for c in calls]
    return [{"role": "user", "content": question}, assistant, *results]


# -- chat completions ----------------------------------------------------------------


@MODES
async def test_a_call_split_in_fragments_comes_back_whole(llm: FakeLLM, processes: int) -> None:
    search = FakeToolCall("search", LONG_ARGUMENTS)
    assert len(search.pieces()) >= 5  # the arguments really arrive in several chunks
    llm.reply = Answer(calls=[search])
    async with boundary(llm, processes) as models:
        pieces, calls = await stream(models, call())
    assert pieces == []  # an answer of calls alone shows nothing
    assert calls == [as_found(search)]
    (request,) = llm.requests
    assert request["tools"] == [SEARCH, CLOCK]


async def test_several_calls_after_some_text_keep_their_order(llm: FakeLLM) -> None:
    search, clock = FakeToolCall("search", LONG_ARGUMENTS), FakeToolCall("clock")
    llm.reply = Answer("Let me check two things.", [search, clock])
    async with boundary(llm) as models:
        pieces, calls = await stream(models, call())
    assert pieces == ["Let ", "me ", "check ", "two ", "things."]
    assert calls == [as_found(search), as_found(clock)]


async def test_a_call_without_tools_sends_none(llm: FakeLLM) -> None:
    async with boundary(llm) as models:
        await stream(models, call(tools=None))
        await stream(models, call(tools=[]))
    assert ["tools" in request for request in llm.requests] == [False, False]


async def test_a_plain_text_answer_to_tools_has_no_calls(llm: FakeLLM) -> None:
    llm.reply = "no tool needed"
    async with boundary(llm) as models:
        pieces, calls = await stream(models, call())
    assert "".join(pieces) == "no tool needed" and calls == []


async def test_the_tool_results_reach_the_model(llm: FakeLLM) -> None:
    llm.reply = tools_then_text([FakeToolCall("search", '{"q": "x"}'), FakeToolCall("clock")])
    async with boundary(llm) as models:
        _, calls = await stream(models, call())
        outputs = {"search": "three notes", "clock": "12:00"}
        pieces, again = await stream(models, call(history_after("look it up", calls, outputs)))
    first, second = calls
    assert "".join(pieces) == f"results: {first.id}=three notes; {second.id}=12:00"
    assert again == []
    sent = llm.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in sent[1]["tool_calls"]] == [first.id, second.id]


async def test_a_one_shot_answer_is_offered_no_tools(llm: FakeLLM) -> None:
    llm.reply = "a summary"
    async with boundary(llm) as models:
        text, _ = await models.complete(call())
    assert text == "a summary"
    assert "tools" not in llm.requests[-1]


async def test_a_call_that_names_no_tool_is_a_bad_response(llm: FakeLLM) -> None:
    llm.reply = Answer(calls=[FakeToolCall(None, '{"q": "x"}')])
    async with boundary(llm) as models:
        with pytest.raises(ModelBadResponse):
            await stream(models, call())
    assert len(llm.requests) == 1  # a malformed answer is not asked for again


async def test_a_garbled_tool_delta_is_dropped_with_a_log_line(
    llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeToolCall("clock")
    llm.reply = Answer("ok", [clock], raw_deltas=[{"tool_calls": "garbage"}])
    async with boundary(llm) as models:
        with caplog.at_level(logging.WARNING, "gateway.models.tool_calls"):
            pieces, calls = await stream(models, call())
    assert pieces == ["ok"] and calls == [as_found(clock)]
    assert "dropped a tool call delta" in caplog.text


@MODES
async def test_a_stall_after_a_tool_fragment_is_retried_without_repeating_the_call(
    llm: FakeLLM, processes: int
) -> None:
    search = FakeToolCall("search", LONG_ARGUMENTS)
    llm.reply = Answer(calls=[search])
    llm.hang_next(after_tokens=2)  # the call's opening fragment and one piece, then silence
    async with boundary(llm, processes) as models:
        started = time.monotonic()
        pieces, calls = await stream(models, call())
    assert time.monotonic() - started < QUICK
    assert pieces == [] and calls == [as_found(search)]
    assert len(llm.requests) == 2


async def test_a_tool_call_that_keeps_stalling_fails_as_stalled(llm: FakeLLM) -> None:
    llm.reply = Answer(calls=[FakeToolCall("search", LONG_ARGUMENTS)])
    llm.hang_next(times=2, after_tokens=1)
    async with boundary(llm) as models:
        started = time.monotonic()
        calls: list[ToolCall] = []
        with pytest.raises(ModelStalled):
            async for _ in models.stream(call(), Usage(), calls):
                pass
    assert time.monotonic() - started < QUICK
    assert calls == [] and len(llm.requests) == 2


# -- the Responses API ---------------------------------------------------------------


@RESPONSES_MODELS
async def test_responses_function_calls_come_back_and_their_outputs_go_in(
    llm: FakeLLM, model: str
) -> None:
    search = FakeToolCall("search", LONG_ARGUMENTS)
    llm.reply = tools_then_text([search], text="Checking.")
    async with boundary(llm) as models:
        chain = ResponseChain()
        pieces, calls = await respond(models, call(model=model), chain)
        assert "".join(pieces) == "Checking." and calls == [as_found(search)]
        follow = history_after("look it up", calls, {"search": "three notes"})
        pieces, again = await respond(models, call(follow, model=model), chain)
    assert "".join(pieces) == f"results: {search.id}=three notes" and again == []
    first, second = llm.requests
    assert first["tools"][0] == {"type": "function", **SEARCH["function"]}
    assert second["input"][-2:] == [
        {
            "type": "function_call",
            "call_id": search.id,
            "name": "search",
            "arguments": search.arguments,
        },
        {"type": "function_call_output", "call_id": search.id, "output": "three notes"},
    ]


async def test_a_responses_stall_after_a_function_call_began_is_retried(llm: FakeLLM) -> None:
    clock = FakeToolCall("clock", '{"zone": "Europe/Paris"}')
    llm.reply = Answer(calls=[clock])
    llm.hang_next(after_tokens=1)
    async with boundary(llm) as models:
        pieces, calls = await respond(
            models, call(model="openai/responses/gpt-4.1-mini"), ResponseChain()
        )
    assert pieces == [] and calls == [as_found(clock)]
    assert len(llm.requests) == 2


# -- through a model process -----------------------------------------------------------


async def test_tools_and_calls_cross_to_a_model_process(llm: FakeLLM) -> None:
    search, clock = FakeToolCall("search", LONG_ARGUMENTS), FakeToolCall("clock")
    llm.answer_next(
        Answer(calls=[search]), Answer("then", [clock]), Answer(calls=[FakeToolCall(None)])
    )
    async with boundary(llm, processes=1) as models:
        assert await stream(models, call()) == ([], [as_found(search)])
        chain = ResponseChain()
        responses_call = call(model="openai/responses/gpt-4.1-mini")
        assert await respond(models, responses_call, chain) == (["then"], [as_found(clock)])
        with pytest.raises(ModelBadResponse):
            await stream(models, call())
    assert [request["tools"][0].get("name") for request in llm.requests] == [None, "search", None]
    assert chain.response_id


# -- from a script -------------------------------------------------------------------


async def test_a_script_answers_with_calls_then_with_text() -> None:
    clock = ToolCall("c1", "clock", "{}")

    def reply(model_call: ModelCall) -> str | ScriptedAnswer:
        last = model_call.messages[-1]
        return (
            f"it is {last['content']}" if last["role"] == "tool" else ScriptedAnswer(calls=[clock])
        )

    models = Models(ScriptedBackend(reply))
    pieces, calls = await stream(models, call(model="scripted/main"))
    assert pieces == [] and calls == [clock]
    pieces, calls = await stream(models, call(history_after("time?", calls, {"clock": "noon"})))
    assert "".join(pieces) == "it is noon" and calls == []
    text, _ = await models.complete(
        ModelCall("scripted/main", [{"role": "user", "content": "x"}], 1)
    )
    assert text == ""  # a one-shot answer leaves the calls out


# -- putting fragments together --------------------------------------------------------


def test_interleaved_fragments_are_put_together_by_index() -> None:
    parts = ToolCallParts()
    parts.add([{"index": 1, "id": "b", "function": {"name": "clock", "arguments": ""}}])
    parts.add([{"index": 0, "id": "a", "function": {"name": "search", "arguments": '{"q":'}}])
    parts.add(
        [
            {"index": 1, "function": {"arguments": "{}"}},
            {"index": 0, "function": {"arguments": ' "x"}'}},
        ]
    )
    parts.add([{"function": {"arguments": "lost"}}, 7])  # no index: dropped
    parts.add([{"index": 2, "function": {"name": "noid", "arguments": {"n": 1}}}])
    assert parts.calls() == [
        ToolCall("a", "search", '{"q": "x"}'),
        ToolCall("b", "clock", "{}"),
        ToolCall("call_2", "noid", '{"n": 1}'),
    ]

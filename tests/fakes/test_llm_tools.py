"""The fake model server's tool calls, in the shapes OpenAI's APIs send them.

The streams are read raw (server-sent events over urllib) where their exact
shape is the point, and through the real litellm where the parsed answer is.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

import litellm

from tests.fakes.llm_server import FakeLLM
from tests.fakes.llm_tools import Answer, FakeToolCall, tools_then_text

SEARCH = FakeToolCall("search", '{"q": "how do consumer groups work"}')
CLOCK = FakeToolCall("clock")
TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]


def events(url: str, body: dict[str, Any]) -> list[Any]:
    """The `data:` payloads of a streamed answer, parsed (the last is "[DONE]" for chat)."""
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        lines = response.read().decode().splitlines()
    data = [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
    return [item if item == "[DONE]" else json.loads(item) for item in data]


def chat_body(**fields: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": "hi"}]
    return {"model": "fake-model", "messages": messages, "tools": TOOLS, **fields}


def test_a_streamed_chat_answer_sends_each_call_in_fragments(llm: FakeLLM) -> None:
    llm.reply = Answer("one moment", [SEARCH, CLOCK])
    body = chat_body(stream=True, stream_options={"include_usage": True})
    *chunks, done = events(f"{llm.api_base}/chat/completions", body)
    assert done == "[DONE]"
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]
    assert "".join(d.get("content") or "" for d in deltas) == "one moment"
    fragments = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    openings = [f for f in fragments if "id" in f]
    assert openings == [
        {
            "index": 0,
            "id": SEARCH.id,
            "type": "function",
            "function": {"name": "search", "arguments": ""},
        },
        {
            "index": 1,
            "id": CLOCK.id,
            "type": "function",
            "function": {"name": "clock", "arguments": ""},
        },
    ]
    search_pieces = [f["function"]["arguments"] for f in fragments if f["index"] == 0]
    assert len(search_pieces) > 3 and "".join(search_pieces) == SEARCH.arguments
    assert all(set(f) == {"index", "function"} for f in fragments if f not in openings)
    finishes = [chunk["choices"][0]["finish_reason"] for chunk in chunks if chunk["choices"]]
    assert finishes[-1] == "tool_calls" and set(finishes[:-1]) == {None}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert llm.requests[0]["tools"] == TOOLS


async def test_a_whole_chat_answer_carries_its_calls(llm: FakeLLM) -> None:
    llm.reply = Answer(calls=[SEARCH])
    response = await litellm.acompletion(
        model="openai/fake-model",
        api_base=llm.api_base,
        api_key="sk-test",
        messages=[{"role": "user", "content": "hi"}],
        tools=TOOLS,
    )
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    (found,) = choice.message.tool_calls
    assert (found.id, found.function.name, found.function.arguments) == (
        SEARCH.id,
        "search",
        SEARCH.arguments,
    )


def test_a_streamed_responses_answer_sends_function_call_items(llm: FakeLLM) -> None:
    llm.reply = Answer(calls=[SEARCH])
    body = {"model": "fake-model", "input": "hi", "stream": True}
    stream = events(f"{llm.api_base}/responses", body)
    assert [event["type"] for event in stream[:3]] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
    ]
    added = stream[2]["item"]
    assert (added["type"], added["call_id"], added["arguments"]) == ("function_call", SEARCH.id, "")
    deltas = [e for e in stream if e["type"] == "response.function_call_arguments.delta"]
    assert len(deltas) > 3 and "".join(e["delta"] for e in deltas) == SEARCH.arguments
    assert {e["item_id"] for e in deltas} == {added["id"]}
    kinds = [event["type"] for event in stream[-3:]]
    assert kinds == [
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert stream[-3]["arguments"] == SEARCH.arguments and stream[-3]["name"] == "search"
    (item,) = stream[-1]["response"]["output"]
    assert item == stream[-2]["item"] and item["status"] == "completed"
    assert (item["call_id"], item["name"], item["arguments"]) == (
        SEARCH.id,
        "search",
        SEARCH.arguments,
    )
    numbers = [event["sequence_number"] for event in stream]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers)


def test_queued_answers_come_first_one_per_request(llm: FakeLLM) -> None:
    llm.reply = "the default"
    llm.answer_next(Answer(calls=[CLOCK]), "second", model="fake-model")
    llm.answer_next("for the side model", model="side-model")
    url = f"{llm.api_base}/chat/completions"
    answers = [post(url, chat_body())["choices"][0]["message"] for _ in range(3)]
    side = post(url, chat_body(model="side-model"))["choices"][0]["message"]
    assert answers[0]["tool_calls"][0]["id"] == CLOCK.id
    assert [a["content"] for a in answers[1:]] == ["second", "the default"]
    assert side["content"] == "for the side model"


def test_tools_then_text_answers_the_results_it_was_sent(llm: FakeLLM) -> None:
    llm.reply = tools_then_text([CLOCK], lambda results: f"it is {results[0].output}")
    url = f"{llm.api_base}/chat/completions"
    first = post(url, chat_body())["choices"][0]["message"]
    assert first["tool_calls"][0]["function"]["name"] == "clock"
    history = [
        {"role": "user", "content": "time?"},
        {"role": "assistant", "content": None, "tool_calls": first["tool_calls"]},
        {"role": "tool", "tool_call_id": CLOCK.id, "content": "noon"},
    ]
    second = post(url, chat_body(messages=history))["choices"][0]["message"]
    assert second["content"] == "it is noon"
    items = [{"type": "function_call_output", "call_id": CLOCK.id, "output": "one"}]
    answer = post(f"{llm.api_base}/responses", {"model": "fake-model", "input": items})
    assert answer["output"][0]["content"][0]["text"] == "it is one"
    assert llm.requests[1]["messages"][-1]["content"] == "noon"


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return dict(json.load(response))

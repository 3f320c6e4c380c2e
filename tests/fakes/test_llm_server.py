"""The fake model server, driven by the real litellm over loopback HTTP."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import litellm
import pytest

from tests.fakes.llm_server import FakeLLM

ROOT = Path(__file__).resolve().parents[2]


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def chat(llm: FakeLLM, text: str, **kwargs: Any) -> Any:
    return await litellm.acompletion(
        model=kwargs.pop("model", "openai/fake-model"),
        api_base=llm.api_base,
        api_key="sk-test",
        messages=user(text),
        **kwargs,
    )


async def streamed_text(llm: FakeLLM, text: str, **kwargs: Any) -> tuple[list[str], Any]:
    stream = await chat(llm, text, stream=True, stream_options={"include_usage": True}, **kwargs)
    pieces: list[str] = []
    usage = None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        usage = getattr(chunk, "usage", None) or usage
    return pieces, usage


async def respond(llm: FakeLLM, text: str, **kwargs: Any) -> Any:
    return await litellm.aresponses(
        model=kwargs.pop("model", "openai/fake-model"),
        api_base=llm.api_base,
        api_key="sk-test",
        input=text,
        **kwargs,
    )


def response_text(response: Any) -> str:
    return "".join(part.text for item in response.output for part in item.content)


async def test_whole_chat_completion(llm: FakeLLM) -> None:
    response = await chat(llm, "hello there friend")
    assert response.choices[0].message.content == "fake reply to: hello there friend"
    # The prompt counted as OpenAI (and litellm, for a model it does not know) counts it.
    assert response.usage.prompt_tokens == 10
    assert litellm.token_counter(model="fake-model", messages=user("hello there friend")) == 10
    assert response.usage.completion_tokens == 6
    [received] = llm.requests
    assert received.path == "/v1/chat/completions"
    assert received["model"] == "fake-model"
    assert received["messages"] == user("hello there friend")
    assert received.headers["Authorization"] == "Bearer sk-test"


async def test_streamed_chat_completion_in_several_chunks_with_usage(llm: FakeLLM) -> None:
    llm.reply = "one two three four"
    pieces, usage = await streamed_text(llm, "count please")
    assert pieces == ["one ", "two ", "three ", "four"]
    assert usage.prompt_tokens == 9 and usage.completion_tokens == 4
    assert llm.requests[0]["stream"] is True


async def test_reply_callable_sees_the_body(llm: FakeLLM) -> None:
    llm.reply = lambda body: f"{len(body['messages'])} messages"
    response = await chat(llm, "hi")
    assert response.choices[0].message.content == "1 messages"


async def test_delays_pace_the_stream(llm: FakeLLM) -> None:
    llm.first_token_delay, llm.token_delay, llm.reply = 0.3, 0.1, "a b c"
    started = time.monotonic()
    stream = await chat(llm, "x", stream=True)
    arrivals = []
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            arrivals.append(time.monotonic() - started)
    assert len(arrivals) == 3
    # Bounds the server guarantees whatever the client's own scheduling jitter:
    # nothing before the first-token delay, the last not before both gaps more.
    assert arrivals[0] >= 0.29
    assert arrivals[-1] >= 0.49
    assert llm.requests[0].duration is not None and llm.requests[0].duration >= 0.49


async def test_per_model_behaviour(llm: FakeLLM) -> None:
    llm.set_model_behaviour("openai/side-model", reply="side answer", delay=0.2)
    started = time.monotonic()
    side = await chat(llm, "q", model="openai/side-model")
    assert time.monotonic() - started >= 0.19
    main = await chat(llm, "q")
    assert side.choices[0].message.content == "side answer"
    assert main.choices[0].message.content == "fake reply to: q"
    assert [req.model for req in llm.requests_for("side-model")] == ["side-model"]


async def test_rate_limit_carries_openai_error_and_retry_after(llm: FakeLLM) -> None:
    llm.fail_next(429, retry_after=7)
    with pytest.raises(litellm.RateLimitError) as caught:
        await chat(llm, "x", max_retries=0)
    assert caught.value.status_code == 429
    assert caught.value.response.json()["error"]["code"] == "rate_limit_exceeded"
    assert caught.value.response.headers["retry-after"] == "7"
    assert llm.requests[0].status == 429
    response = await chat(llm, "x", max_retries=0)  # only the next one failed
    assert response.choices[0].message.content


async def test_bad_request_for_one_model_only(llm: FakeLLM) -> None:
    llm.fail_next(400, message="bad thing", model="side-model")
    assert (await chat(llm, "main first")).choices[0].message.content
    with pytest.raises(litellm.BadRequestError, match="bad thing"):
        await chat(llm, "x", model="openai/side-model")


async def test_server_error_twice(llm: FakeLLM) -> None:
    llm.fail_next(500, times=2)
    for _ in range(2):
        with pytest.raises(litellm.InternalServerError):
            await chat(llm, "x", max_retries=0)
    assert (await chat(llm, "x", max_retries=0)).choices[0].message.content


async def test_hang_gives_a_timeout(llm: FakeLLM) -> None:
    llm.hang_next()
    with pytest.raises(litellm.Timeout):
        await chat(llm, "x", timeout=0.5, max_retries=0)
    assert (await chat(llm, "x", timeout=5)).choices[0].message.content


async def test_hang_after_first_tokens_stalls_the_stream(llm: FakeLLM) -> None:
    llm.reply = "a b c d"
    llm.hang_next(after_tokens=2)
    pieces: list[str] = []
    with pytest.raises(litellm.Timeout):
        stream = await chat(llm, "x", stream=True, timeout=0.5, max_retries=0)
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
    assert pieces == ["a ", "b "]


async def test_responses_chain_with_previous_response_id(llm: FakeLLM) -> None:
    first = await respond(llm, "first question")
    assert response_text(first) == "fake reply to: first question"
    assert first.usage.input_tokens == 9
    second = await respond(llm, "second", previous_response_id=first.id)
    assert response_text(second) == "fake reply to: second"
    sent = llm.requests[1]
    assert sent.path == "/v1/responses"
    assert sent["previous_response_id"] in llm.response_ids


async def test_streamed_responses(llm: FakeLLM) -> None:
    # litellm fakes the stream (one whole request) for models it does not know,
    # so a known model name makes it read the server's SSE events.
    llm.reply = "streamed words here"
    first = await respond(llm, "one")
    stream = await respond(
        llm, "two", previous_response_id=first.id, stream=True, model="openai/gpt-4o-mini"
    )
    deltas, kinds = [], []
    async for event in stream:
        kinds.append(str(getattr(event.type, "value", event.type)))
        if kinds[-1] == "response.output_text.delta":
            deltas.append(event.delta)
    assert "".join(deltas) == "streamed words here"
    assert kinds[0] == "response.created"
    assert kinds[-1] == "response.completed"
    assert llm.requests[1]["stream"] is True


async def test_unknown_previous_response_id_is_openai_error(llm: FakeLLM) -> None:
    with pytest.raises(litellm.BadRequestError, match="previous_response_not_found"):
        await respond(llm, "x", previous_response_id="resp_never_issued")
    assert llm.requests[0].status == 400


async def test_forget_responses_expires_the_state(llm: FakeLLM) -> None:
    first = await respond(llm, "one")
    llm.forget_responses()
    with pytest.raises(litellm.BadRequestError, match="previous_response_not_found"):
        await respond(llm, "two", previous_response_id=first.id)


def test_wait_for_requests_polls_and_times_out(llm: FakeLLM) -> None:
    with pytest.raises(TimeoutError):
        llm.wait_for_requests(1, timeout=0.05)
    post(llm.api_base + "/chat/completions", {"model": "m", "messages": user("hi")})
    assert len(llm.wait_for_requests(1, timeout=1, model="m")) == 1
    llm.clear()
    assert llm.requests == []


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return dict(json.load(response))


def test_runs_as_a_script() -> None:
    command = [
        sys.executable,
        "-m",
        "tests.fakes.llm_server",
        "--delay",
        "0",
        "--model",
        "side-model=0.2",
    ]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None
            api_base = process.stdout.readline().strip()
            assert api_base.startswith("http://127.0.0.1:")
            answer = post(api_base + "/chat/completions", {"model": "m", "messages": user("yo")})
            assert answer["choices"][0]["message"]["content"] == "fake reply to: yo"
            started = time.monotonic()
            post(api_base + "/chat/completions", {"model": "side-model", "messages": user("q")})
            assert time.monotonic() - started >= 0.19
            with urllib.request.urlopen(api_base.removesuffix("/v1") + "/_fake/requests") as got:
                recorded = json.load(got)
            assert [r["body"]["model"] for r in recorded] == ["m", "side-model"]
            assert recorded[1]["finished_at"] - recorded[1]["received_at"] >= 0.19
        finally:
            process.terminate()
        assert process.wait(timeout=10) == 0


async def test_await_requests_in_async_tests(llm: FakeLLM) -> None:
    llm.set_model_behaviour("slow", delay=0.2)
    task = asyncio.ensure_future(chat(llm, "x", model="openai/slow"))
    [received] = await llm.await_requests(1, timeout=5, model="slow")
    assert received.finished_at is None  # still answering
    await task
    assert received.finished_at is not None

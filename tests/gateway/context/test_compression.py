"""Compression of long conversations, through the real worker and the loopback model."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from gateway.context.compiler import SUMMARY_HEADER
from gateway.context.compression import CompressionResult, Compressor
from gateway.context.segments import KEEP_MIN, plan_segment
from gateway.models import Models
from gateway.settings.scoped import ScopedSettings
from gateway.state.session import HistoryView
from tests.fakes.llm_server import FakeLLM
from tests.support.conversation import (
    COMPRESSOR,
    MAIN,
    SIDE,
    Conversation,
    assistant_entry,
    content_of,
    conversation,
    make_settings,
    user_entry,
)
from tests.support.redis_servers import client_for

BUDGET = 400
SUMMARY = "SUMMARY: Alice counted 42 widgets; Bob decided to ship on Friday; open: the colour."


def line(number: int) -> str:
    return f"message {number}: please remember the number {number * 7} and the colour blue"


def fits(talk: Conversation, request: dict[str, Any]) -> bool:
    return Models.for_settings(talk.settings).count_tokens(MAIN, request["messages"]) <= BUDGET


async def talk_until_segment(talk: Conversation, limit: int = 40) -> int:
    for number in range(limit):
        await talk.say(line(number))
        await talk.settled()
        if await talk.segments():
            return number
    raise AssertionError("no segment was written")


def assert_contiguous(segments: list[dict[str, Any]], history: list[dict[str, Any]]) -> None:
    expected_first = 0
    for segment in segments:
        assert segment["first_index"] == expected_first
        assert segment["last_index"] >= segment["first_index"]
        assert segment["first_id"] == history[segment["first_index"]]["id"]
        assert segment["last_id"] == history[segment["last_index"]]["id"]
        assert segment["messages"] == segment["last_index"] - segment["first_index"] + 1
        expected_first = segment["last_index"] + 1


async def test_a_session_past_its_budget_gets_a_segment_and_the_next_request_fits(
    redis_url: str, llm: FakeLLM
) -> None:
    llm.set_model_behaviour(COMPRESSOR, reply=SUMMARY)
    async with conversation(redis_url, llm, GATEWAY_TOKEN_BUDGET=BUDGET) as talk:
        await talk_until_segment(talk)
        [segment] = await talk.segments()
        history = await talk.history()
        assert segment["summary"] == SUMMARY
        assert segment["model"] == COMPRESSOR and segment["fallback"] is False
        assert segment["created_at"] > 0
        assert_contiguous([segment], history)
        assert len(history) - segment["last_index"] - 1 >= KEEP_MIN

        await talk.say("what did I ask you to remember?")
        request = talk.main_requests()[-1]
        assert fits(talk, request)
        messages = request["messages"]
        summary = messages[1]
        assert summary["role"] == "user"
        assert summary["content"].startswith(SUMMARY_HEADER.format(count=segment["last_index"] + 1))
        assert SUMMARY in summary["content"]
        sent = content_of(messages)
        for entry in history[: segment["last_index"] + 1]:
            assert entry["text"] not in sent  # the range is replaced, not repeated
        kept = [e["text"] for e in history[segment["last_index"] + 1 :] if e["role"] == "user"]
        assert all(text in sent for text in kept)
        # The summariser was asked to keep what matters.
        [asked] = talk.compression_requests()
        instructions = asked["messages"][0]["content"]
        for word in ("names", "decision", "numbers", "open questions", "errors"):
            assert word in instructions
        assert line(0) in asked["messages"][1]["content"]


async def test_a_turn_over_budget_compresses_first_and_then_fits(
    redis_url: str, llm: FakeLLM
) -> None:
    llm.set_model_behaviour(COMPRESSOR, reply=SUMMARY)
    async with conversation(redis_url, llm, workers=0, GATEWAY_TOKEN_BUDGET=BUDGET) as talk:
        for number in range(25):  # all land before any worker runs: one turn answers them
            await talk.send(line(number))
        await talk.start_worker()
        await talk.settled()
        [request] = talk.main_requests()
        assert fits(talk, request)
        assert SUMMARY in content_of(request["messages"])
        assert line(24) in content_of(request["messages"])
        # The summary was made before the turn's request, not after it.
        order = [r.model for r in llm.requests]
        assert order.index("compress-model") < order.index("main-model")
        assert talk.sender.messages  # and the user got the answer


async def test_a_token_budget_set_for_a_workspace_compresses_its_turns_first(
    redis_url: str, llm: FakeLLM
) -> None:
    llm.set_model_behaviour(COMPRESSOR, reply=SUMMARY)
    async with conversation(redis_url, llm, workers=0) as talk:
        scoped = ScopedSettings(talk.redis, talk.settings)
        await scoped.set("test:W", "token_budget", str(BUDGET))
        for number in range(25):
            await talk.send(line(number))
        await talk.start_worker()
        await talk.settled()
        [request] = talk.main_requests()
        assert fits(talk, request)
        assert SUMMARY in content_of(request["messages"])
        order = [r.model for r in llm.requests]
        assert order.index("compress-model") < order.index("main-model")


async def test_segments_are_contiguous_and_build_on_each_other(
    redis_url: str, llm: FakeLLM
) -> None:
    made = itertools.count(1)
    llm.set_model_behaviour(COMPRESSOR, reply=lambda body: f"SUMMARY number {next(made)}")
    async with conversation(redis_url, llm, GATEWAY_TOKEN_BUDGET=BUDGET) as talk:
        for number in range(36):
            await talk.say(line(number))
            await talk.settled()
        segments = await talk.segments()
        assert len(segments) >= 3
        assert_contiguous(segments, await talk.history())
        assert [s["summary"] for s in segments] == [
            f"SUMMARY number {n}" for n in range(1, len(segments) + 1)
        ]
        # Each summary is written on top of the one before it.
        asked = talk.compression_requests()
        for number, request in enumerate(asked[1:], start=1):
            assert f"SUMMARY number {number}" in request["messages"][1]["content"]
        # The view carries the newest summary only, once.
        await talk.say("and now?")
        sent = content_of(talk.main_requests()[-1]["messages"])
        assert sent.count("[Summary of the earlier conversation") == 1
        assert f"SUMMARY number {len(segments)}" in sent


async def test_a_side_question_reads_the_summary_and_what_follows_it_never_the_summarised_part(
    redis_url: str, llm: FakeLLM
) -> None:
    llm.set_model_behaviour(COMPRESSOR, reply=SUMMARY)
    async with conversation(redis_url, llm, GATEWAY_TOKEN_BUDGET=BUDGET) as talk:
        await talk_until_segment(talk)
        [segment] = await talk.segments()
        history = await talk.history()
        await talk.say("/btw which colour was it?")
        [asked] = llm.requests_for(SIDE)
        transcript = asked["messages"][1]["content"]
        assert f"EARLIER CONVERSATION (summary): {SUMMARY}" in transcript
        for entry in history[: segment["last_index"] + 1]:
            assert entry["text"] not in transcript
        tail = history[segment["last_index"] + 1 :]
        assert tail and all(entry["text"] in transcript for entry in tail)


def tool_turn(index: int) -> list[dict[str, Any]]:
    call = {"id": f"call{index}", "name": "lookup", "arguments": "{}"}
    return [
        user_entry(f"look up item {index} in the inventory please", f"u{index}"),
        assistant_entry("", f"a{index}", tool_calls=[call]),
        {
            "id": f"t{index}a",
            "role": "tool",
            "tool_call_id": f"call{index}",
            "text": f"item {index}: 3 left",
        },
        {
            "id": f"t{index}b",
            "role": "tool",
            "tool_call_id": f"call{index}",
            "text": f"item {index}: shelf B",
        },
        assistant_entry(f"Item {index} has 3 left on shelf B.", f"r{index}"),
    ]


def splits_a_tool_call(entries: list[dict[str, Any]], boundary: int) -> bool:
    """True when the entries before `boundary` and from it on part a call from a result."""
    before, after = entries[:boundary], entries[boundary:]
    calls = {c["id"] for e in before for c in e.get("tool_calls") or []}
    results = {e["tool_call_id"] for e in after if e["role"] == "tool"}
    return bool(calls & results) or bool(after and after[0]["role"] == "tool")


@pytest.mark.parametrize("length", range(6, 40))
def test_a_planned_boundary_never_parts_a_tool_call_from_its_results(length: int) -> None:
    entries = [e for i in range(10) for e in tool_turn(i)][:length]
    view = HistoryView({}, [], 0, entries)
    plan = plan_segment(view, limit=length)
    if plan is None:
        return
    assert plan.first_index == 0
    boundary = len(plan.entries)
    assert not splits_a_tool_call(entries, boundary)
    assert length - boundary >= KEEP_MIN


async def test_a_tool_call_and_its_results_stay_on_one_side_through_a_turn(
    redis_url: str, llm: FakeLLM
) -> None:
    llm.set_model_behaviour(COMPRESSOR, reply=SUMMARY)
    async with conversation(redis_url, llm, GATEWAY_TOKEN_BUDGET=BUDGET) as talk:
        # 6 tool turns = 30 entries: 20% stay (6), so the naive boundary falls at entry 24,
        # between the call (a4, index 21) and the reply; it must move before the call.
        await talk.preload([e for i in range(6) for e in tool_turn(i)])
        await talk.say("how many are left of item 5?")
        await talk.settled()
        history = await talk.history()
        segments = await talk.segments()
        assert segments
        assert_contiguous(segments, history)
        for segment in segments:
            assert not splits_a_tool_call(history, segment["last_index"] + 1)
        request = talk.main_requests()[-1]
        kept_calls = {c["id"] for m in request["messages"] for c in m.get("tool_calls") or []}
        kept_results = {m["tool_call_id"] for m in request["messages"] if m["role"] == "tool"}
        assert kept_results <= kept_calls  # every result sent has its call with it


async def one_fallback_segment(talk: Conversation) -> dict[str, Any]:
    """25 messages queued before a worker starts; its first turn must compress: one segment,
    a fallback (the summariser fails)."""
    for number in range(25):
        await talk.send(line(number))
    await talk.start_worker()
    await talk.settled()
    [segment] = await talk.segments()
    assert segment["fallback"] is True
    return segment


async def test_a_failing_summariser_gives_a_fallback_segment_and_the_turn_succeeds(
    redis_url: str, llm: FakeLLM
) -> None:
    llm.fail_next(500, times=1, model=COMPRESSOR)
    llm.reply = "the answer"
    async with conversation(redis_url, llm, workers=0, GATEWAY_TOKEN_BUDGET=BUDGET) as talk:
        segment = await one_fallback_segment(talk)
        assert f"{segment['messages']} earlier messages" in segment["summary"]
        [request] = talk.main_requests()
        assert fits(talk, request)
        assert "were left out" in content_of(request["messages"])
        assert list(talk.sender.messages.values()) == ["the answer"]

        # The next compression that works replaces the fallback: its messages get summarised.
        llm.set_model_behaviour(COMPRESSOR, reply=SUMMARY)
        for number in range(25, 45):
            await talk.say(line(number))
            await talk.settled()
            segments = await talk.segments()
            if not segments[-1]["fallback"]:
                break
        assert [s["fallback"] for s in segments] == [False]
        assert segments[0]["first_index"] == 0 and segments[0]["summary"] == SUMMARY
        assert_contiguous(segments, await talk.history())
        assert line(0) in talk.compression_requests()[-1]["messages"][1]["content"]


async def test_an_empty_summary_counts_as_a_failure(redis_url: str, llm: FakeLLM) -> None:
    llm.set_model_behaviour(COMPRESSOR, reply="   ")
    async with conversation(redis_url, llm, workers=0, GATEWAY_TOKEN_BUDGET=BUDGET) as talk:
        await one_fallback_segment(talk)
        assert fits(talk, talk.main_requests()[-1])


async def test_two_workers_finishing_turns_at_once_compress_once(
    redis_url: str, llm: FakeLLM
) -> None:
    llm.set_model_behaviour(COMPRESSOR, reply=SUMMARY, delay=1.0)
    # 25 earlier turns of ~32 tokens: both new turns fit the budget of 1,000, and each
    # leaves the view past the threshold (800), so each worker wants to compress.
    async with conversation(redis_url, llm, GATEWAY_TOKEN_BUDGET=1000) as talk:
        await talk.preload(
            [
                e
                for i in range(25)
                for e in (user_entry(line(i), f"u{i}"), assistant_entry(f"noted {i * 7}", f"a{i}"))
            ]
        )
        await talk.say("first turn, on the first worker")  # its compression starts, slow
        await llm.await_requests(1, 30, model=COMPRESSOR)
        await talk.stop_worker(0)
        await talk.start_worker()
        await talk.say("second turn, on the second worker")
        assert talk.workers[0].turns.compressor.background  # the first compression is still running
        await talk.settled()
        assert len(talk.compression_requests()) == 1
        assert len(await talk.segments()) == 1
        assert len(talk.main_requests()) == 2


async def test_the_lock_lets_one_of_two_compressors_through(redis_url: str, llm: FakeLLM) -> None:
    llm.set_model_behaviour(COMPRESSOR, reply=SUMMARY, delay=0.3)
    settings = make_settings(redis_url, llm, GATEWAY_TOKEN_BUDGET=BUDGET)
    clients = [client_for(redis_url) for _ in range(2)]
    try:
        compressors = [Compressor(settings, c, Models.for_settings(settings)) for c in clients]
        async with conversation(redis_url, llm, workers=0) as talk:
            await talk.preload([user_entry(line(i), f"u{i}") for i in range(20)])
            outcomes = await asyncio.gather(*(c.compress(talk.key, 20) for c in compressors))
            assert sorted(outcomes) == sorted(
                [CompressionResult.SUMMARISED, CompressionResult.BUSY]
            )
            assert len(await talk.segments()) == 1
    finally:
        for client in clients:
            await client.aclose()


async def test_a_reset_during_compression_discards_the_segment(
    redis_url: str, llm: FakeLLM
) -> None:
    llm.set_model_behaviour(COMPRESSOR, reply=SUMMARY, delay=0.5)
    settings = make_settings(redis_url, llm, GATEWAY_TOKEN_BUDGET=BUDGET)
    async with conversation(redis_url, llm, workers=0) as talk:
        compressor = Compressor(settings, talk.redis, Models.for_settings(settings))
        await talk.preload([user_entry(line(i), f"u{i}") for i in range(20)])
        running = asyncio.create_task(compressor.compress(talk.key, 20))
        await llm.await_requests(1, 30, model=COMPRESSOR)
        await talk.sessions.reset(talk.key)
        assert await running is CompressionResult.LOST
        assert await talk.segments() == []
        assert "history_start" not in await talk.meta()


async def test_a_turn_over_budget_waits_for_the_compression_already_running(
    redis_url: str, llm: FakeLLM
) -> None:
    llm.set_model_behaviour(COMPRESSOR, reply=SUMMARY, delay=3.0)
    # 10 earlier turns: the first new turn fits (and starts a compression after it); the
    # second would not fit, so it waits for that compression instead of making its own.
    async with conversation(redis_url, llm, GATEWAY_TOKEN_BUDGET=BUDGET) as talk:
        await talk.preload(
            [
                e
                for i in range(10)
                for e in (user_entry(line(i), f"u{i}"), assistant_entry(f"noted {i * 7}", f"a{i}"))
            ]
        )
        await talk.say("first turn")
        await llm.await_requests(1, 30, model=COMPRESSOR)
        await talk.stop_worker(0)
        await talk.start_worker()
        await talk.say("second turn")
        await talk.settled()
        assert len(talk.compression_requests()) == 1
        [compression] = talk.compression_requests()
        second = talk.main_requests()[-1]
        assert compression.finished_at is not None
        assert second.received_at > compression.finished_at
        assert fits(talk, second)
        assert SUMMARY in content_of(second["messages"])

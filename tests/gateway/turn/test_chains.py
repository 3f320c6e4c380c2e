"""Delta mode: a stateful provider gets only what is new, chained on its response id."""

from __future__ import annotations

from typing import Any

from gateway.context.compiler import MessageCompiler, TurnContext
from gateway.models.providers import base_model, is_stateful, to_responses_input
from tests.fakes.llm_server import FakeLLM
from tests.fakes.llm_shapes import prompt_tokens
from tests.support.conversation import (
    COMPRESSOR,
    STATEFUL_MAIN,
    SYSTEM,
    Conversation,
    assistant_entry,
    content_of,
    conversation,
    user_entry,
)


def said(item: dict[str, Any]) -> str:
    """The text of a user input item, without its reminder block."""
    return str(item.get("content", "")).split("\n\n<system-reminder>")[0]


def responses(talk: Conversation) -> list[dict[str, Any]]:
    return [r for r in talk.main_requests() if r.path == "/v1/responses"]


async def test_after_the_first_turn_each_request_carries_only_the_new_entries(
    redis_url: str, llm: FakeLLM
) -> None:
    async with conversation(redis_url, llm, GATEWAY_MODEL=STATEFUL_MAIN) as talk:
        await talk.say("one")
        first_id = (await talk.meta())["response_id"]
        await talk.say("two")
        second_id = (await talk.meta())["response_id"]
        await talk.say("three")
        first, second, third = responses(talk)
        assert "previous_response_id" not in first
        assert [said(i) for i in first["input"]] == ["one"]
        assert first["instructions"] == SYSTEM
        assert second["previous_response_id"] == first_id
        assert [said(i) for i in second["input"]] == ["two"]
        assert "<system-reminder>" in second["input"][0]["content"]
        assert third["previous_response_id"] == second_id
        assert [said(i) for i in third["input"]] == ["three"]
        assert third["instructions"] == SYSTEM  # not carried over a chain, so always sent
        meta = await talk.meta()
        assert meta["cursor"] == (await talk.history())[-1]["id"]
        assert len(talk.sender.messages) == 3


async def test_messages_that_arrive_together_all_go_in_the_delta(
    redis_url: str, llm: FakeLLM
) -> None:
    async with conversation(redis_url, llm, workers=0, GATEWAY_MODEL=STATEFUL_MAIN) as talk:
        await talk.start_worker()
        await talk.say("one")
        await talk.stop_worker(0)
        await talk.send("two")
        await talk.send("three")
        await talk.start_worker()
        await talk.idle()
        last = responses(talk)[-1]
        assert [said(i) for i in last["input"]] == ["two", "three"]
        assert last["previous_response_id"]


async def test_an_unknown_response_id_gets_one_full_resend_unseen_by_the_user(
    redis_url: str, llm: FakeLLM
) -> None:
    llm.reply = "fine"
    async with conversation(redis_url, llm, GATEWAY_MODEL=STATEFUL_MAIN) as talk:
        await talk.say("one")
        await talk.say("two")
        llm.forget_responses()  # the provider's state expired
        before = len(responses(talk))
        await talk.say("three")
        lost, resent = responses(talk)[before:]
        assert lost.status == 400 and lost["previous_response_id"]
        assert "previous_response_id" not in resent
        assert [said(i) for i in resent["input"]] == ["one", "fine", "two", "fine", "three"]
        assert list(talk.sender.messages.values()) == ["fine"] * 3  # no error shown
        # A new chain starts from the resend.
        chained = (await talk.meta())["response_id"]
        assert chained in llm.response_ids
        await talk.say("four")
        after = responses(talk)[-1]
        assert after["previous_response_id"] == chained
        assert [said(i) for i in after["input"]] == ["four"]
        assert len(responses(talk)) == before + 3


async def test_reset_drops_the_chain(redis_url: str, llm: FakeLLM) -> None:
    async with conversation(redis_url, llm, GATEWAY_MODEL=STATEFUL_MAIN) as talk:
        await talk.say("one")
        await talk.say("two")
        assert (await talk.meta()).get("response_id")
        await talk.say("/reset")
        meta = await talk.meta()
        assert "response_id" not in meta and "cursor" not in meta
        await talk.say("a fresh start")
        fresh = responses(talk)[-1]
        assert "previous_response_id" not in fresh
        assert [said(i) for i in fresh["input"]] == ["a fresh start"]
        await talk.say("and on")
        assert [said(i) for i in responses(talk)[-1]["input"]] == ["and on"]


async def test_btw_answers_from_redis_in_delta_mode(redis_url: str, llm: FakeLLM) -> None:
    async with conversation(redis_url, llm, GATEWAY_MODEL=STATEFUL_MAIN) as talk:
        await talk.say("the launch code is 7731")
        await talk.say("thanks")
        await talk.say("/btw what was the launch code?")
        [side] = llm.requests_for("openai/side-model")
        assert side.path == "/v1/chat/completions"
        assert "the launch code is 7731" in content_of(side["messages"])
        # The side question changed nothing: the chain goes on where it was.
        chained = (await talk.meta())["response_id"]
        await talk.say("next")
        assert responses(talk)[-1]["previous_response_id"] == chained


async def test_a_compression_starts_a_new_chain_from_the_compressed_view(
    redis_url: str, llm: FakeLLM
) -> None:
    llm.set_model_behaviour(COMPRESSOR, reply="SUMMARY of the early talk")
    async with conversation(
        redis_url, llm, GATEWAY_MODEL=STATEFUL_MAIN, GATEWAY_TOKEN_BUDGET=400
    ) as talk:
        for number in range(40):
            await talk.say(f"message {number}: remember {number * 7} and the colour blue")
            await talk.settled()
            if await talk.segments():
                break
        await talk.say("after the compression")
        resent = responses(talk)[-1]
        assert "previous_response_id" not in resent  # the provider's copy is not compressed
        assert "SUMMARY of the early talk" in content_of(resent["input"])
        await talk.say("and then")
        assert [said(i) for i in responses(talk)[-1]["input"]] == ["and then"]


def test_the_table_of_stateful_providers() -> None:
    assert is_stateful("openai/responses/gpt-4.1")
    assert is_stateful("azure/responses/my-deployment")
    assert not is_stateful("openai/gpt-4.1")
    assert not is_stateful("anthropic/claude-sonnet-4")
    assert not is_stateful("echo")
    assert base_model("openai/responses/gpt-4.1") == "openai/gpt-4.1"
    assert base_model("openai/gpt-4.1") == "openai/gpt-4.1"


def test_tool_calls_become_response_items() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "run it"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "shell", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    instructions, items = to_responses_input(messages)
    assert instructions == "s"
    assert items == [
        {"role": "user", "content": "run it"},
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]


def test_a_cursor_not_in_the_view_falls_back_to_full_mode() -> None:
    key = "test:W:C1"
    entries = [user_entry("one", "u1"), assistant_entry("r", "a1"), user_entry("two", "u2")]
    compiler = MessageCompiler(key, "s")
    delta = compiler.compile(TurnContext(key, entries, None, cursor="a1"))
    assert delta.mode == "delta"
    assert [m["content"] for m in delta.messages] == ["s", "two"]
    gone = compiler.compile(TurnContext(key, entries, None, cursor="never-seen"))
    assert gone.mode == "full" and len(gone.messages) == 4
    segment = {"first_id": "u1", "last_id": "a1", "first_index": 0, "last_index": 1, "summary": "S"}
    compressed = compiler.compile(TurnContext(key, entries, None, segments=[segment], cursor="u1"))
    assert compressed.mode == "full"  # the cursor's entry was compressed away
    assert "S" in compressed.messages[1]["content"]


async def test_only_a_reply_to_a_request_sent_in_full_records_its_count(
    redis_url: str, llm: FakeLLM
) -> None:
    async with conversation(redis_url, llm, GATEWAY_MODEL=STATEFUL_MAIN) as talk:
        await talk.say("one")
        await talk.say("two")
        first, second = [e for e in await talk.history() if e["role"] == "assistant"]
        asked = responses(talk)[0]  # in full: what the provider counted is all of it
        assert first["sent"]["tokens"] == prompt_tokens([asked["instructions"], *asked["input"]])
        assert "sent" not in second  # a delta: some providers count only what was sent

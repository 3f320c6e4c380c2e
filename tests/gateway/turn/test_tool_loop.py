"""The tool loop of a main turn (gateway.turn.tool_loop): a worker, a real MCP server over stdio,
a real Redis, and the loopback model asking for tool calls."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway.state.keys import Keys
from gateway.state.session import new_entry_id
from tests.fakes.llm_server import FakeLLM
from tests.fakes.llm_tools import Answer, FakeToolCall, tool_results, tools_then_text
from tests.fakes.mcp_servers import lookup_record
from tests.support.cli_runs import ROOT, clean_env, gateway
from tests.support.conversation import STATEFUL_MAIN, conversation
from tests.support.harness import Harness, start_workers, texts
from tests.support.helpers import inbound
from tests.support.recording_sender import RecordingNativeSender
from tests.support.tool_servers import (
    STEADY_LEASE_TTL,
    lines,
    new_effects,
    tool_workers,
    write_config,
)

# Each test starts MCP server processes (seconds each on a loaded machine).
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    return new_effects(tmp_path)


@pytest.fixture
async def tooled(
    redis_url: str, llm: FakeLLM, tmp_path: Path, effects: Path
) -> AsyncIterator[Harness]:
    async with tool_workers(redis_url, llm, write_config(tmp_path, effects, confirm="never")) as h:
        yield h


async def test_a_question_a_tool_answers_is_answered_from_its_result(tooled: Harness) -> None:
    call = FakeToolCall("desk__lookup_ticket", '{"id": "T-17"}')
    tooled.llm.reply = tools_then_text([call])
    message = inbound("what is the state of T-17?")
    await tooled.ingest.receive(message)
    await tooled.idle(message.session_key)
    assert texts(tooled.sender) == [f"results: {call.id}={lookup_record('T-17')}"]
    first, second = tooled.llm.requests
    assert "desk__lookup_ticket" in {t["function"]["name"] for t in first["tools"]}
    assert [r.output for r in tool_results(second)] == [lookup_record("T-17")]
    history = await tooled.history(message.session_key)
    assert [e["role"] for e in history] == ["user", "assistant", "tool", "assistant"]
    assert history[1]["tool_calls"][0]["id"] == call.id
    assert history[2]["tool_call_id"] == call.id
    assert history[1]["turn_id"] == history[2]["turn_id"]


async def test_several_calls_run_at_once_and_all_results_go_back(
    tooled: Harness, effects: Path
) -> None:
    slow = [FakeToolCall("desk__slow", '{"seconds": 1}') for _ in range(3)]
    tooled.llm.reply = tools_then_text(slow)
    message = inbound("wait three times")
    await tooled.ingest.receive(message)
    await tooled.idle(message.session_key)
    assert len(tool_results(tooled.llm.requests[1])) == 3
    started = [n for n, line in enumerate(lines(effects)) if line == "slow started"]
    finished = [n for n, line in enumerate(lines(effects)) if line.startswith("slow done")]
    assert len(started) == 3 and max(started) < min(finished)  # all three ran together


async def test_every_failure_becomes_a_result_and_the_turn_still_answers(tooled: Harness) -> None:
    calls = [
        FakeToolCall("desk__lookup_ticket", '{"id": '),  # cut-off JSON
        FakeToolCall("desk__nothing_here", "{}"),
        FakeToolCall("desk__fail", "{}"),
    ]
    tooled.llm.reply = tools_then_text(calls)
    message = inbound("try these")
    await tooled.ingest.receive(message)
    await tooled.idle(message.session_key)
    outputs = [r.output for r in tool_results(tooled.llm.requests[1])]
    assert "was not made" in outputs[0]
    assert "no tool named" in outputs[1]
    assert "failed" in outputs[2]
    assert texts(tooled.sender)[0].startswith("results: ")


async def test_the_step_limit_ends_with_an_answer_and_a_note(
    redis_url: str, llm: FakeLLM, tmp_path: Path, effects: Path
) -> None:
    config = write_config(tmp_path, effects, confirm="never")
    call = FakeToolCall("desk__lookup_ticket", '{"id": "A"}')

    def always_tools(body: dict[str, Any]) -> str | Answer:
        return Answer(calls=[call]) if body.get("tools") else "my best answer"

    llm.reply = always_tools
    async with tool_workers(redis_url, llm, config, GATEWAY_TOOL_MAX_STEPS=2) as h:
        message = inbound("loop forever")
        await h.ingest.receive(message)
        await h.idle(message.session_key)
        assert [bool(r.get("tools")) for r in llm.requests] == [True, True, False]
        (reply,) = texts(h.sender)
        assert reply.startswith("my best answer") and "2 tool steps" in reply


async def test_stop_during_a_slow_tool_cancels_it_and_the_loop(
    tooled: Harness, effects: Path
) -> None:
    tooled.llm.reply = tools_then_text([FakeToolCall("desk__slow", '{"seconds": 30}')])
    message = inbound("take your time")
    await tooled.ingest.receive(message)
    async with asyncio.timeout(15):
        while "slow started" not in lines(effects):
            await asyncio.sleep(0.05)
    await tooled.ingest.receive(inbound("/stop"))
    await tooled.idle(message.session_key)
    async with asyncio.timeout(15):
        while "slow cancelled" not in lines(effects):
            await asyncio.sleep(0.05)
    assert len(tooled.llm.requests) == 1  # the model was not called again
    history = await tooled.history(message.session_key)
    assert [e["role"] for e in history[:3]] == ["user", "assistant", "tool"]
    assert history[2]["outcome"] == "cancelled"


async def test_a_resumed_loop_runs_no_recorded_call_again_and_reruns_only_read_only_ones(
    tooled: Harness, effects: Path
) -> None:
    """A run died after recording its calls and one result: the re-run takes up from there."""
    message = inbound("delete the old one and look up T-9")
    key = message.session_key
    sessions = tooled.sessions
    done = FakeToolCall("desk__add", '{"a": 1, "b": 2}')
    read_only = FakeToolCall("desk__lookup_ticket", '{"id": "T-9"}')
    destructive = FakeToolCall("desk__delete_item", '{"name": "old"}')
    # The dead run holds the lease before the message arrives, so the worker's turn
    # for it waits (polling) until the run has "died", whatever the machine's speed.
    await sessions.claim(key, "dead-run", 30)
    await sessions.append_user(message)
    claim = await sessions.claim(key, "dead-run", 30)
    assert claim.has_work
    step = {
        "id": new_entry_id(),
        "role": "assistant",
        "text": "",
        "turn_id": claim.turn_id,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments}
            for c in (done, read_only, destructive)
        ],
    }
    result = {
        "id": new_entry_id(),
        "role": "tool",
        "tool_call_id": done.id,
        "text": "3",
        "turn_id": claim.turn_id,
    }
    length = await sessions.record_steps(
        key, "dead-run", claim, claim.length, [step, result], loop_open=True
    )
    assert length == 3
    tooled.llm.reply = "resumed answer"
    await sessions.redis.delete(Keys.session(key, "lease"))  # the run died; its lease ran out
    await tooled.idle(key)
    assert texts(tooled.sender) == ["resumed answer"]
    assert "deleted old" not in lines(effects)  # the destructive call did not run again
    assert lines(effects).count("looked up T-9") == 1
    outputs = {r.call_id: r.output for r in tool_results(tooled.llm.requests[0])}
    assert outputs[done.id] == "3"
    assert outputs[read_only.id] == lookup_record("T-9")  # read-only: run again, once
    assert "interrupted" in outputs[destructive.id]
    history = await tooled.history(key)
    assert [e["role"] for e in history] == [
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "assistant",
    ]


def test_a_console_user_gets_a_tool_answer_with_the_example_config(
    tmp_path: Path, llm: FakeLLM
) -> None:
    """The README's way to try tools: docs/mcp.example.json, run from the repository."""
    call = FakeToolCall("demo__lookup_ticket", '{"id": "T-5"}')
    llm.reply = tools_then_text([call], then=lambda results: f"It says: {results[0].output}")
    env = clean_env(
        GATEWAY_MCP_CONFIG=str(ROOT / "docs" / "mcp.example.json"),
        GATEWAY_MODEL="openai/fake-model",
        GATEWAY_API_BASE=llm.api_base,
        GATEWAY_API_KEY="sk-test",
        GATEWAY_DATA_DIR=str(tmp_path / "data"),
    )
    result = subprocess.run(
        gateway("run", "--console"),
        input="what is the state of T-5?\n",
        capture_output=True,
        text=True,
        timeout=150,
        cwd=ROOT,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert f"bot: It says: {lookup_record('T-5')}" in result.stdout


async def test_on_a_provider_chain_a_tool_step_sends_only_its_results_on_the_response(
    redis_url: str, llm: FakeLLM, tmp_path: Path, effects: Path
) -> None:
    config = write_config(tmp_path, effects, confirm="never")
    llm.answer_next(Answer(calls=[FakeToolCall("desk__lookup_ticket", '{"id": "R-2"}')]))
    values = {"GATEWAY_MCP_CONFIG": str(config), "GATEWAY_MODEL": STATEFUL_MAIN}
    async with conversation(redis_url, llm, **values) as talk:
        await talk.say("look up R-2")
        await talk.say("thanks")
        asked, answered, after = (r for r in talk.main_requests() if r.path == "/v1/responses")
        assert "previous_response_id" not in asked
        assert answered["previous_response_id"]  # the response that asked for the call
        outputs = [i for i in answered["input"] if i.get("type") == "function_call_output"]
        assert [o["output"] for o in outputs] == [lookup_record("R-2")]
        assert not [i for i in answered["input"] if i.get("role") == "user"]
        history = await talk.history()
        roles = ["user", "assistant", "tool", "assistant", "user", "assistant"]
        assert [e["role"] for e in history] == roles
        assert after["previous_response_id"]  # the chain goes on past the tool step
        assert (await talk.meta())["cursor"] == history[-1]["id"]


async def test_btw_during_a_tool_run_sees_the_call_and_offers_the_side_model_no_tools(
    tooled: Harness, effects: Path
) -> None:
    tooled.llm.reply = tools_then_text([FakeToolCall("desk__slow", '{"seconds": 3}')])
    message = inbound("wait a bit")
    await tooled.ingest.receive(message)
    async with asyncio.timeout(15):
        while "slow started" not in lines(effects):
            await asyncio.sleep(0.05)
    await tooled.ingest.receive(inbound("/btw what is it doing?"))
    await tooled.idle(message.session_key)
    side = [r for r in tooled.llm.requests if r["model"] == "side-model"]
    assert len(side) == 1 and "tools" not in side[0]
    transcript = json.dumps(side[0]["messages"])
    assert "called tools: desk__slow" in transcript
    assert len(await tooled.history(message.session_key)) == 4  # the side answer is not in it


async def test_status_lists_the_tools(tooled: Harness) -> None:
    message = inbound("/status")
    await tooled.ingest.receive(message)
    await tooled.idle(message.session_key)
    (status,) = texts(tooled.sender)
    assert "`desk__lookup_ticket`" in status and "`desk__delete_item`" in status


async def test_a_channel_offers_only_the_tools_its_settings_allow_and_runs_no_other(
    tooled: Harness, effects: Path
) -> None:
    scoped = tooled.workers[0].turns.scoped
    await scoped.set("test:W:C1", "tools", "desk__lookup_ticket")
    call = FakeToolCall("desk__delete_item", '{"name": "report"}')
    tooled.llm.reply = tools_then_text([call])
    message = inbound("delete the report")
    await tooled.ingest.receive(message)
    await tooled.idle(message.session_key)
    first, second = tooled.llm.requests
    assert [t["function"]["name"] for t in first["tools"]] == ["desk__lookup_ticket"]
    [result] = tool_results(second)
    assert "not allowed in this conversation" in result.output
    assert not any("delete" in line for line in lines(effects))  # never run
    await scoped.set("test:W:C1", "tools", "none")
    tooled.llm.reply = "no tools here"
    other = inbound("anything?")
    await tooled.ingest.receive(other)
    await tooled.idle(other.session_key)
    assert "tools" not in tooled.llm.requests[-1]


async def test_on_a_streaming_surface_each_call_is_a_step_from_pending_to_complete(
    redis_url: str, llm: FakeLLM, tmp_path: Path, effects: Path
) -> None:
    native = RecordingNativeSender()
    config = write_config(tmp_path, effects, confirm="never")
    found = FakeToolCall("desk__lookup_ticket", '{"id": "T-17"}')
    failed = FakeToolCall("desk__no_such_tool", '{"id": "T-18"}')
    llm.reply = tools_then_text([found, failed])
    message = inbound("what is the state of T-17?")
    values = {"GATEWAY_LEASE_TTL": STEADY_LEASE_TTL, "GATEWAY_MCP_CONFIG": str(config)}
    async with start_workers(redis_url, llm, 1, senders={"test": native}, **values) as h:
        await h.ingest.receive(message)
        await h.idle(message.session_key)
    states: dict[str, list[str]] = {}
    for call in native.live_calls:
        for step in call.steps:
            if states.setdefault(step.id, [])[-1:] != [step.state]:
                states[step.id].append(step.state)
    assert states[found.id][-2:] == ["in_progress", "complete"]
    assert states[failed.id][-1] == "error"
    final = native.live_calls[-1]
    assert final.op == "close" and final.text.startswith("results: ")
    assert f"{found.id}={lookup_record('T-17')}" in final.text
    assert {s.title for s in final.steps} == {
        'desk__lookup_ticket (id: "T-17")',
        'desk__no_such_tool (id: "T-18")',
    }
    assert not [c for c in native.calls if c.op in ("send", "edit")]

"""Destructive tool calls wait for the asker's approval (gateway.approvals.waiting), through a
real worker, a real MCP server over stdio, a real Redis and the loopback model."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from gateway.inbound.ingest import Verdict
from gateway.messages import Address, Decision
from gateway.state.keys import Keys
from tests.fakes.llm_server import FakeLLM
from tests.fakes.llm_tools import tool_results, tools_then_text
from tests.support.harness import Harness, texts
from tests.support.helpers import inbound
from tests.support.tool_servers import (
    DELETE,
    TIMED_OUT_RESULT,
    lines,
    new_effects,
    tool_workers,
    write_config,
)

_clicks = itertools.count(1)

# Each test starts MCP server processes (seconds each on a loaded machine).
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    return new_effects(tmp_path)


@asynccontextmanager
async def confirming(
    redis_url: str, llm: FakeLLM, tmp_path: Path, effects: Path, **values: object
) -> AsyncIterator[Harness]:
    async with tool_workers(redis_url, llm, write_config(tmp_path, effects), **values) as h:
        yield h


@pytest.fixture
async def desk(
    redis_url: str, llm: FakeLLM, tmp_path: Path, effects: Path
) -> AsyncIterator[Harness]:
    async with confirming(redis_url, llm, tmp_path, effects) as h:
        yield h


def click(approval_id: str, user: str, approve: bool) -> Decision:
    address = Address(platform="test", workspace="W", channel="C1")
    return Decision(
        platform="test",
        approval_id=approval_id,
        user_id=user,
        approve=approve,
        event_id=f"click-{next(_clicks)}",
        address=address,
    )


async def asked(h: Harness) -> str:
    """The id of the approval the worker asked for (it waits until there is one)."""
    await h.sender.wait_for(lambda: h.sender.asked, timeout=20)
    (approval_id,) = h.sender.asked
    return approval_id


async def waiting(h: Harness, session_key: str) -> None:
    """The turn let go: no lease, no job; the reply says it waits."""
    async with asyncio.timeout(20):
        while await h.sessions.owed(session_key) or await h.sessions.is_running(session_key):
            await asyncio.sleep(0.02)


async def test_an_approved_call_runs_once_and_the_turn_goes_on(
    desk: Harness, effects: Path
) -> None:
    desk.llm.reply = tools_then_text([DELETE])
    message = inbound("delete the old one")
    await desk.ingest.receive(message)
    approval_id = await asked(desk)
    await waiting(desk, message.session_key)
    request = desk.sender.approval_texts[desk.sender.asked[approval_id]]
    assert "desk__delete_item" in request and '"old"' in request
    assert texts(desk.sender) == ["_(waiting for approval)_"]
    assert lines(effects) == []  # nothing ran before the click
    assert await desk.ingest.decide(click(approval_id, "U1", True)) is Verdict.APPROVED
    await desk.idle(message.session_key)
    assert lines(effects) == ["deleted old"]
    (reply,) = texts(desk.sender)  # the same message, edited to the answer
    assert reply.startswith("results: ") and "deleted old" in reply
    assert "Approved" in desk.sender.approval_texts[desk.sender.asked[approval_id]]
    roles = [e["role"] for e in await desk.history(message.session_key)]
    assert roles == ["user", "assistant", "tool", "assistant"]


async def test_a_declined_call_does_not_run_and_the_model_is_told(
    desk: Harness, effects: Path
) -> None:
    desk.llm.reply = tools_then_text([DELETE])
    message = inbound("delete the old one")
    await desk.ingest.receive(message)
    approval_id = await asked(desk)
    assert await desk.ingest.decide(click(approval_id, "U1", False)) is Verdict.DECLINED
    await desk.idle(message.session_key)
    await waiting(desk, message.session_key)
    assert lines(effects) == []
    (result,) = tool_results(desk.llm.requests[-1])
    assert "declined" in result.output
    assert "Declined" in desk.sender.approval_texts[desk.sender.asked[approval_id]]


async def test_someone_elses_click_changes_nothing(desk: Harness, effects: Path) -> None:
    desk.llm.reply = tools_then_text([DELETE])
    message = inbound("delete the old one")
    await desk.ingest.receive(message)
    approval_id = await asked(desk)
    await waiting(desk, message.session_key)
    assert await desk.ingest.decide(click(approval_id, "U2", True)) is Verdict.NOT_YOURS
    assert await desk.sessions.owed(message.session_key) == 0  # no turn enqueued
    assert len(desk.llm.requests) == 1 and lines(effects) == []
    assert await desk.ingest.decide(click(approval_id, "U1", True)) is Verdict.APPROVED
    await desk.idle(message.session_key)
    assert lines(effects) == ["deleted old"]
    assert await desk.ingest.decide(click(approval_id, "U1", True)) is Verdict.CLOSED


async def test_no_answer_in_time_counts_as_declined(
    redis_url: str, llm: FakeLLM, tmp_path: Path, effects: Path
) -> None:
    llm.reply = tools_then_text([DELETE])
    async with confirming(redis_url, llm, tmp_path, effects, GATEWAY_CONFIRM_TIMEOUT=1) as h:
        message = inbound("delete the old one")
        await h.ingest.receive(message)
        await asked(h)
        async with asyncio.timeout(20):
            while len(h.llm.requests) < 2:
                await asyncio.sleep(0.05)
        await h.idle(message.session_key)
        (result,) = tool_results(h.llm.requests[-1])
        assert result.output == TIMED_OUT_RESULT
        assert lines(effects) == []


async def test_messages_while_waiting_are_answered_after_the_approved_turn(
    desk: Harness, effects: Path
) -> None:
    def reply(body: dict[str, object]) -> object:
        last = body["messages"][-1]  # type: ignore[index]
        if isinstance(last, dict) and "meanwhile" in str(last.get("content")):
            return "answer to meanwhile"
        return tools_then_text([DELETE])(body)  # type: ignore[arg-type]

    desk.llm.reply = reply  # type: ignore[assignment]
    first = inbound("delete the old one")
    await desk.ingest.receive(first)
    approval_id = await asked(desk)
    await waiting(desk, first.session_key)
    await desk.ingest.receive(inbound("meanwhile, hello"))
    await waiting(desk, first.session_key)
    assert len(desk.llm.requests) == 1  # the new message waits behind the open loop
    await desk.ingest.decide(click(approval_id, "U1", True))
    async with asyncio.timeout(20):
        while len(await desk.history(first.session_key)) < 6:
            await asyncio.sleep(0.05)
    await desk.idle(first.session_key)
    history = await desk.history(first.session_key)
    assert [e["role"] for e in history] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert history[4]["text"] == "meanwhile, hello"
    assert texts(desk.sender)[-1] == "answer to meanwhile"
    assert await desk.sessions.redis.exists(Keys.approvals(first.session_key)) == 0


async def test_an_approved_call_a_dead_run_left_running_is_reported_not_repeated(
    desk: Harness, effects: Path
) -> None:
    desk.llm.reply = tools_then_text([DELETE])
    message = inbound("delete the old one")
    await desk.ingest.receive(message)
    approval_id = await asked(desk)
    await waiting(desk, message.session_key)
    key = message.session_key
    # The run that took the approval over marked the call running, then died.
    await desk.ingest.approvals.mark_running(key, approval_id)
    await desk.sessions.enqueue_turn(key, "test")
    await desk.idle(key)
    assert lines(effects) == []
    (result,) = tool_results(desk.llm.requests[-1])
    assert "interrupted" in result.output

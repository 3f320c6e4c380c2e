"""Slack's own status line in an assistant thread while a turn calls tools: a worker's
tool loop, the real Slack sender against the loopback fake, a real MCP server over
stdio, a real Redis and the loopback model."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.slack.client import web_client
from adapters.slack.sender import SlackSender
from tests.fakes.llm_server import FakeLLM
from tests.fakes.llm_tools import FakeToolCall, tools_then_text
from tests.fakes.slack_api import FakeSlack
from tests.support.helpers import inbound
from tests.support.tool_servers import new_effects, tool_workers, write_config

# The test starts an MCP server process (seconds on a loaded machine).
pytestmark = pytest.mark.timeout(180)

THREAD = "1700000000.000001"


async def test_an_assistant_thread_shows_the_running_tool_and_is_cleared_with_the_answer(
    slack: FakeSlack, redis_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    slack.assistant_enabled = True
    sender = SlackSender(web_client("xoxb-test-token", slack.api_url), 0.2)
    config = write_config(tmp_path, new_effects(tmp_path), confirm="never")
    llm.reply = tools_then_text([FakeToolCall("desk__slow", '{"seconds": 1}')])
    llm.first_token_delay = 1.5  # past the thinking grace: the status line goes out
    message = inbound("wait a second", platform="slack", channel="D1", thread=THREAD)
    async with tool_workers(redis_url, llm, config, senders={"slack": sender}) as h:
        await h.ingest.receive(message)
        await h.idle(message.session_key, timeout=30)
    calls = slack.calls_to("assistant.threads.setStatus")
    assert {(c.args["channel_id"], c.args["thread_ts"]) for c in calls} == {("D1", THREAD)}
    statuses = [c.args["status"] for c in calls]
    running = statuses.index("is running `desk__slow`…")
    assert statuses[0] == "is thinking…"  # while the model thinks
    assert statuses[running + 1] == "is thinking…"  # the model again, with the result
    assert statuses[-1] == ""  # cleared with the answer
    answer = [m for m in slack.messages.values() if m.text.startswith("results: ")]
    assert len(answer) == 1 and answer[0].thread_ts == THREAD

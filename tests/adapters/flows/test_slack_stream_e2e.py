"""End to end, Slack's streams: `gateway web` and `gateway worker` as subprocesses, signed
Events API requests, the real slack-sdk streaming into the fake Slack Web API, a real
Redis remembering a channel that refused streams."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.buttons import FEEDBACK_BLOCK
from gateway.state.keys import GROUP, Keys
from tests.fakes.llm_server import FakeLLM
from tests.fakes.slack_api import TEAM_ID, FakeSlack, Message
from tests.support.redis_servers import client_for, free_port
from tests.support.slack_helpers import (
    Processes,
    environment,
    event_body,
    gateway,
    json_bytes,
    mention,
    message,
    new_ts,
    signed_headers,
)

pytestmark = pytest.mark.timeout(150)
INVISIBLE = str.maketrans("", "", "\u200b\u2060")


@pytest.fixture
async def web(
    tmp_path: Path, redis_url: str, llm: FakeLLM, slack: FakeSlack
) -> AsyncIterator[Processes]:
    env = environment(redis_url, llm.api_base, slack.api_url, free_port())
    async with gateway(tmp_path, env, "web", "worker") as processes:
        yield processes


async def deliver(web: Processes, event: dict[str, Any]) -> None:
    body = json_bytes(event_body(event))
    async with httpx.AsyncClient() as client:
        response = await client.post(web.events_url, content=body, headers=signed_headers(body))
    assert response.status_code == 200


def answered(slack: FakeSlack, channel: str, thread: str, contains: str) -> Message:
    """The one bot message of the thread, once it is complete and no longer streaming."""

    def done() -> list[Message]:
        return [
            m
            for m in slack.thread_messages(channel, thread)
            if contains in m.shown and not m.streaming
        ]

    slack.wait_for(lambda: bool(done()), timeout=30)
    (reply,) = slack.thread_messages(channel, thread)
    return reply


async def test_a_mention_in_a_channel_streams_its_reply_to_the_asker(
    web: Processes, slack: FakeSlack
) -> None:
    top = mention("what is the plan?", user="U2")
    await deliver(web, top)
    reply = answered(slack, "C1", top["ts"], "what is the plan?")
    (start,) = slack.calls_to("chat.startStream")
    assert start.args["thread_ts"] == top["ts"]
    assert (start.args["recipient_user_id"], start.args["recipient_team_id"]) == ("U2", TEAM_ID)
    assert not slack.calls_to("chat.postMessage") and not slack.calls_to("chat.update")
    (stop,) = slack.calls_to("chat.stopStream")
    assert reply.ts == stop.args["ts"]
    assert [b["block_id"] for b in reply.blocks] == [FEEDBACK_BLOCK]


async def test_an_assistant_thread_streams_its_reply(web: Processes, slack: FakeSlack) -> None:
    parent = new_ts()
    event = message("hello in the thread", channel="D1", channel_type="im", thread_ts=parent)
    await deliver(web, event)
    answered(slack, "D1", parent, "hello in the thread")
    (start,) = slack.calls_to("chat.startStream")
    assert start.args["channel"] == "D1" and start.args["thread_ts"] == parent
    assert start.args["recipient_user_id"] == "U1"


async def test_a_channel_that_refuses_streams_is_edited_in_place_and_remembered(
    web: Processes, slack: FakeSlack, redis_url: str
) -> None:
    slack.refuse_streams["C1"] = "method_not_supported_for_channel_type"
    first = mention("first question")
    await deliver(web, first)
    reply = answered(slack, "C1", first["ts"], "first question")
    # The last edit (the reply complete) brings the feedback buttons.
    slack.wait_for(lambda: [b.get("block_id") for b in reply.blocks][-1:] == [FEEDBACK_BLOCK])
    assert slack.calls_to("chat.postMessage")

    second = mention("second question")
    await deliver(web, second)
    answered(slack, "C1", second["ts"], "second question")
    assert len(slack.calls_to("chat.startStream")) == 1  # not asked again in that channel

    client = client_for(redis_url)
    field = "stream_fallbacks|slack|method_not_supported_for_channel_type"
    try:
        async with asyncio.timeout(10):  # the worker writes its counters a second late at most
            while (counted := await client.hget(Keys.METRICS, field)) is None:
                await asyncio.sleep(0.05)
        remembered = await client.exists(Keys.native_refused(f"slack:{TEAM_ID}:C1"))
    finally:
        await client.aclose()
    assert counted == "1" and remembered == 1


@pytest.mark.timeout(240)
async def test_a_worker_killed_mid_stream_leaves_one_reply_closed_and_complete(
    tmp_path: Path, redis_url: str, llm: FakeLLM, slack: FakeSlack
) -> None:
    """SIGKILL the worker whose reply is streaming: the other worker's re-run closes that
    stream and completes it in the same message; no second stream, no second message."""
    llm.reply = " ".join(f"word{i}" for i in range(40))
    llm.duration = 4.0
    env = environment(redis_url, llm.api_base, slack.api_url, free_port(), GATEWAY_LEASE_TTL="2")
    client = client_for(redis_url)
    try:
        async with gateway(tmp_path, env, "web", "worker", "worker") as processes:
            deadline = time.monotonic() + 150
            while processes.output().count("job streams of slack") < 2:
                assert time.monotonic() < deadline, "the workers did not start"
                await asyncio.sleep(0.1)
            top = mention("tell me a story")
            await deliver(processes, top)
            session = f"slack:{TEAM_ID}:C1:{top['ts']}"

            async def streaming_and_stored() -> bool:
                started = any(m.streaming for m in slack.thread_messages("C1", top["ts"]))
                return started and await client.hlen(Keys.replies(session)) > 0

            deadline = time.monotonic() + 30
            while not await streaming_and_stored():
                assert time.monotonic() < deadline, "the reply did not start streaming"
                await asyncio.sleep(0.05)
            (job,) = await client.xpending_range(Keys.jobs("slack", 0), GROUP, "-", "+", 10)
            os.kill(int(str(job["consumer"]).split("-")[-2]), signal.SIGKILL)
            reply = answered(slack, "C1", top["ts"], "word39")
    finally:
        await client.aclose()
    assert reply.shown.translate(INVISIBLE).strip() == llm.reply
    assert len(slack.calls_to("chat.startStream")) == 1, "the re-run started a second stream"
    assert not slack.calls_to("chat.postMessage")
    assert len(llm.requests) == 2  # the killed turn's call and the re-run

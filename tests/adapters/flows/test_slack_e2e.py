"""End to end: `gateway web` and `gateway worker` as subprocesses, signed Events API requests,
the real slack-sdk talking to the fake Slack Web API, the fake model behind litellm."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.llm_server import FakeLLM
from tests.fakes.slack_api import BOT_ID, BOT_USER_ID, FakeSlack, Message
from tests.support.redis_servers import free_port
from tests.support.slack_helpers import (
    APP_TOKEN,
    Processes,
    command_bytes,
    environment,
    event_body,
    gateway,
    json_bytes,
    mention,
    message,
    request_text,
    signed_headers,
)

# Each test starts fresh processes; a worker's first turn includes litellm's cold import.
pytestmark = pytest.mark.timeout(150)


@pytest.fixture
async def web(
    tmp_path: Path, redis_url: str, llm: FakeLLM, slack: FakeSlack
) -> AsyncIterator[Processes]:
    env = environment(redis_url, llm.api_base, slack.api_url, free_port())
    async with gateway(tmp_path, env, "web", "worker") as processes:
        yield processes


async def post(web: Processes, body: bytes, headers: dict[str, str]) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.post(web.events_url, content=body, headers=headers)


async def deliver(
    web: Processes, event: dict[str, Any], *, event_id: str | None = None, **signing: Any
) -> httpx.Response:
    body = json_bytes(event_body(event, event_id))
    return await post(web, body, signed_headers(body, **signing))


def replies(slack: FakeSlack, channel: str, thread: str | None, contains: str) -> list[Message]:
    return [
        m
        for m in slack.messages.values()
        if m.channel == channel and m.thread_ts == thread and contains in m.text
    ]


def answered(
    slack: FakeSlack, channel: str, thread: str | None, contains: str, count: int = 1
) -> list[Message]:
    """Wait for `count` bot messages holding `contains` where the reply should be."""
    slack.wait_for(lambda: len(replies(slack, channel, thread, contains)) >= count, timeout=30)
    return replies(slack, channel, thread, contains)


async def test_a_mention_gets_a_threaded_reply_and_a_follow_up_needs_no_mention(
    web: Processes, slack: FakeSlack, llm: FakeLLM
) -> None:
    llm.first_token_delay = 1.5  # past the thinking grace: the reaction shows meanwhile
    top = mention("what is the plan?")
    assert (await deliver(web, top)).status_code == 200
    [reply] = answered(slack, "C1", top["ts"], "what is the plan?")  # the whole reply
    assert "<@" not in reply.text
    llm.first_token_delay = 0.0
    # The eyes reaction went on the user's message while thinking, and came off after.
    assert slack.answered("reactions.add")[0].args["timestamp"] == top["ts"]
    slack.wait_for(lambda: not slack.reactions)
    assert "Ada" in request_text(llm.requests[0])

    follow_up = message("and after that?", user="U2", thread_ts=top["ts"])
    assert (await deliver(web, follow_up)).status_code == 200
    answered(slack, "C1", top["ts"], "and after that?")
    assert len(llm.requests) == 2


async def test_a_dm_gets_a_reply_at_the_top_level(web: Processes, slack: FakeSlack) -> None:
    assert (
        await deliver(web, message("hi in private", channel="D1", channel_type="im"))
    ).status_code == 200
    answered(slack, "D1", None, "hi in private")


async def test_three_deliveries_of_one_event_get_one_reply_and_one_model_call(
    web: Processes, slack: FakeSlack, llm: FakeLLM
) -> None:
    event = mention("only once please")
    body = json_bytes(event_body(event, "EvThrice"))
    for retry in (None, 1, 2):
        assert (await post(web, body, signed_headers(body, retry=retry))).status_code == 200
    answered(slack, "C1", event["ts"], "only once please")
    # Something after it, answered too: by then any second turn would have shown.
    later = mention("something else")
    await deliver(web, later)
    answered(slack, "C1", later["ts"], "something else")
    assert len(replies(slack, "C1", event["ts"], "only once please")) == 1
    assert sum("only once please" in request_text(r) for r in llm.requests) == 1


async def test_forged_stale_and_bot_messages_reach_no_model(
    web: Processes, slack: FakeSlack, llm: FakeLLM
) -> None:
    top = mention("start a thread")
    await deliver(web, top)
    answered(slack, "C1", top["ts"], "start a thread")

    forged = await deliver(web, mention("forged"), secret="wrong-secret")
    stale = await deliver(web, mention("stale"), timestamp=int(time.time()) - 600)
    assert (forged.status_code, stale.status_code) == (401, 401)
    for event in (
        message("my own echo", user=BOT_USER_ID, bot_id=BOT_ID, thread_ts=top["ts"]),
        message("another bot", user="U9", bot_id="B9", subtype="bot_message", thread_ts=top["ts"]),
        message("a dm from a bot", user="U9", bot_id="B9", channel="D1", channel_type="im"),
    ):
        assert (await deliver(web, event)).status_code == 200

    last = message("a person again", thread_ts=top["ts"])
    await deliver(web, last)
    answered(slack, "C1", top["ts"], "a person again")
    texts = "\n".join(request_text(r) for r in llm.requests)
    for absent in ("forged", "stale", "my own echo", "another bot", "a dm from a bot"):
        assert absent not in texts
    assert len(llm.requests) == 2


async def test_btw_in_a_thread_and_in_the_channel_answer_in_threads_outside_history(
    web: Processes, slack: FakeSlack, llm: FakeLLM
) -> None:
    top = mention("we pick the blue logo")
    await deliver(web, top)
    answered(slack, "C1", top["ts"], "blue logo")

    await deliver(web, message("!btw which logo did we pick?", thread_ts=top["ts"]))
    slack.wait_for(lambda: len(slack.thread_messages("C1", top["ts"])) >= 2, timeout=30)

    body = command_bytes("what colour again?")
    response = await post(
        web, body, signed_headers(body, content_type="application/x-www-form-urlencoded")
    )
    assert response.status_code == 200
    slack.wait_for(
        lambda: any(
            m.thread_ts is None and "what colour again?" in m.text for m in slack.messages.values()
        ),
        timeout=10,
    )
    quote = next(
        m for m in slack.messages.values() if m.thread_ts is None and "what colour again?" in m.text
    )
    slack.wait_for(lambda: len(slack.thread_messages("C1", quote.ts)) >= 1, timeout=30)

    await deliver(web, message("and the font?", thread_ts=top["ts"]))
    answered(slack, "C1", top["ts"], "and the font?")
    main_turn = next(r for r in reversed(llm.requests) if "and the font?" in request_text(r))
    text = request_text(main_turn)
    assert "which logo did we pick?" not in text and "what colour again?" not in text


WRITES = (
    "chat.postMessage",
    "chat.update",
    "chat.startStream",
    "chat.appendStream",
    "chat.stopStream",
)


@pytest.mark.parametrize(
    ("method", "event", "thread"),
    [
        ("chat.appendStream", mention("tell me a long story"), "own ts"),
        ("chat.update", message("tell me a long story", channel="D1", channel_type="im"), None),
    ],
    ids=["streamed in a thread", "edited at a dm's top level"],
)
async def test_a_429_while_streaming_still_ends_with_the_full_text(
    tmp_path: Path,
    redis_url: str,
    llm: FakeLLM,
    slack: FakeSlack,
    method: str,
    event: dict[str, Any],
    thread: str | None,
) -> None:
    """Slack asks to wait once: nothing goes to the conversation until the wait is over,
    and the one message ends with the whole text."""
    words = " ".join(f"word{i}" for i in range(60))
    llm.reply = words
    llm.token_delay = 0.03
    slack.fail_next(method, retry_after=1)
    channel, thread = event["channel"], event["ts"] if thread else None
    env = environment(redis_url, llm.api_base, slack.api_url, free_port())
    async with gateway(tmp_path, env, "web", "worker") as web:
        await deliver(web, event)
        slack.wait_for(
            lambda: any(m.text.strip() == words for m in slack.thread_messages(channel, thread)),
            timeout=30,
        )
    (refused,) = [c for c in slack.calls_to(method) if c.status == 429]
    later = [c for c in slack.calls if c.method in WRITES and c.at > refused.at]
    assert later and min(c.at for c in later) >= refused.at + 0.95
    assert len(slack.thread_messages(channel, thread)) == 1


async def test_socket_mode_gateway_slack_and_worker_answer_a_mention(
    tmp_path: Path, redis_url: str, llm: FakeLLM, slack: FakeSlack
) -> None:
    env = environment(
        redis_url, llm.api_base, slack.api_url, free_port(), SLACK_APP_TOKEN=APP_TOKEN
    )
    del env["SLACK_SIGNING_SECRET"]  # Socket Mode needs none
    async with gateway(tmp_path, env, "slack", "worker") as processes:
        try:
            slack.wait_for(lambda: slack.live_connections == 1, timeout=30)
        except AssertionError:
            raise AssertionError(processes.output()) from None
        top = mention("hello over the socket")
        envelope = slack.push(event_body(top))
        answered(slack, "C1", top["ts"], "hello over the socket")
        assert any(ack.get("envelope_id") == envelope for ack in slack.acks)

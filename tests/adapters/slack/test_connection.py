"""Socket Mode: slack-sdk's real client on a loopback websocket, the supervisor, health.

A dropped socket, a half-open one that stops answering pings and a refused
apps.connections.open must all show as "down" in health while they last, and
the gateway must come back by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qs

import pytest
from redis.asyncio import Redis

from adapters.slack import SlackPlatform
from adapters.slack.app import NO_SESSION
from adapters.slack.connection import Timing
from gateway.backoff import Backoff
from gateway.inbound.ingest import Ingest
from gateway.settings.env import load_settings
from gateway.state.health import Health
from gateway.state.keys import Keys
from tests.fakes.slack_api import TEAM_ID, FakeSlack
from tests.support.slack_helpers import (
    APP_TOKEN,
    BOT_TOKEN,
    command_bytes,
    event_body,
    mention,
    message,
)


@dataclass
class Socket:
    slack: FakeSlack
    redis: Redis
    task: asyncio.Task[None]

    async def health(self) -> dict[str, Any] | None:
        raw = await self.redis.hget(Keys.HEALTH, "slack")
        return json.loads(raw) if raw else None

    async def until(self, condition: Callable[[], Any], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return
            if self.task.done():
                self.task.result()
            assert time.monotonic() < deadline, "condition not met in time"
            await asyncio.sleep(0.02)

    async def is_up(self) -> bool:
        report = await self.health()
        return bool(report and report["up"])

    async def is_down(self) -> bool:
        report = await self.health()
        return bool(report and not report["up"])

    async def jobs(self) -> list[dict[str, str]]:
        raw = await self.redis.xrange(Keys.jobs("slack", 0))
        entries = cast(list[tuple[str, dict[str, str]]], raw)
        return [fields for _, fields in entries]


@pytest.fixture
async def socket(slack: FakeSlack, redis_url: str) -> AsyncIterator[Socket]:
    settings = load_settings(
        _env_file=None,
        REDIS_URL=redis_url,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_APP_TOKEN=APP_TOKEN,
        SLACK_API_URL=slack.api_url,
    )
    redis = Redis.from_url(redis_url, decode_responses=True)
    platform = SlackPlatform(settings, redis)
    platform.validate("connect")
    assert not platform.uses_http()
    platform.socket_timing = Timing(ping_interval=1.0, check_interval=0.05, connect_timeout=5)
    platform.socket_backoff = Backoff(first=0.05, limit=0.3, jitter=0.5)
    await platform.startup()
    task = asyncio.create_task(platform.connect(Ingest(settings, redis), Health(redis, "slack")))
    yield Socket(slack, redis, task)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await redis.aclose()


async def test_events_arrive_are_acknowledged_and_a_redelivery_is_one_job(
    socket: Socket, slack: FakeSlack
) -> None:
    await socket.until(socket.is_up)
    body = event_body(mention("hello over the socket"), "EvSock1")
    first = slack.push(body)
    await socket.until(lambda: any(a.get("envelope_id") == first for a in slack.acks))
    again = slack.push(body)  # Slack re-sends an envelope it thinks was not acknowledged
    await socket.until(lambda: any(a.get("envelope_id") == again for a in slack.acks))
    jobs = await socket.jobs()
    assert len(jobs) == 1 and jobs[0]["kind"] == "turn"


async def test_a_dropped_connection_shows_down_and_comes_back(
    socket: Socket, slack: FakeSlack
) -> None:
    await socket.until(socket.is_up)
    assert slack.connections_opened == 1
    slack.refuse_connections = True
    slack.drop_connections()
    await socket.until(socket.is_down)

    async def says_cannot_connect() -> bool:
        report = await socket.health()
        return bool(report and not report["up"] and "cannot connect" in str(report["detail"]))

    await socket.until(says_cannot_connect)
    refused = len(slack.calls_to("apps.connections.open"))
    await socket.until(lambda: len(slack.calls_to("apps.connections.open")) >= refused + 2)
    slack.refuse_connections = False
    await socket.until(socket.is_up)
    assert slack.connections_opened >= 2
    await socket.until(lambda: slack.live_connections == 1)
    body = event_body(message("after the reconnect", channel="D1", channel_type="im"))
    envelope = slack.push(body)
    await socket.until(lambda: any(a.get("envelope_id") == envelope for a in slack.acks))
    assert len(await socket.jobs()) == 1


async def test_a_half_open_connection_is_noticed(socket: Socket, slack: FakeSlack) -> None:
    await socket.until(socket.is_up)
    # The socket stays open but nothing answers, pings included; Slack is unreachable meanwhile.
    slack.black_hole = True
    slack.refuse_connections = True
    await socket.until(socket.is_down, timeout=15)
    await socket.until(lambda: slack.live_connections == 0)  # closed, not kept
    slack.black_hole = False
    slack.refuse_connections = False
    await socket.until(socket.is_up)
    assert slack.connections_opened >= 2
    await socket.until(lambda: slack.live_connections == 1)


async def test_btw_over_the_socket_acks_with_the_ephemeral_text(
    socket: Socket, slack: FakeSlack
) -> None:
    await socket.until(socket.is_up)
    form = parse_qs(command_bytes("anything?", channel="C5").decode())
    payload = {key: values[0] for key, values in form.items()}
    envelope = slack.push(payload, kind="slash_commands")
    await socket.until(lambda: any(a.get("envelope_id") == envelope for a in slack.acks))
    ack = next(a for a in slack.acks if a.get("envelope_id") == envelope)
    assert ack["payload"] == {"text": NO_SESSION, "response_type": "ephemeral"}
    assert payload["team_id"] == TEAM_ID


async def test_a_new_assistant_thread_over_the_socket_is_acked_and_offered_prompts(
    socket: Socket, slack: FakeSlack
) -> None:
    await socket.until(socket.is_up)
    slack.assistant_enabled = True
    slack.open_assistant_thread("D0SOCK", "1710000000.000900")
    started = {
        "type": "assistant_thread_started",
        "assistant_thread": {
            "user_id": "U1",
            "context": {},
            "channel_id": "D0SOCK",
            "thread_ts": "1710000000.000900",
        },
        "event_ts": "1710000000.000901",
    }
    envelope = slack.push(event_body(started))
    await socket.until(lambda: any(a.get("envelope_id") == envelope for a in slack.acks))
    await socket.until(lambda: ("D0SOCK", "1710000000.000900") in slack.suggested)
    assert len(slack.calls_to("assistant.threads.setSuggestedPrompts")) == 1

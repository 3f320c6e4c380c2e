"""Approval requests on Slack: the buttons posted and settled, and clicks over HTTP and
Socket Mode reaching `Ingest.decide`.

Real pieces: slack-sdk against the loopback fake, bolt behind `POST /slack/events` (the
signature and body checks first) and over Socket Mode, the real Ingest on a real Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from redis.asyncio import Redis

from adapters.slack import SlackPlatform
from adapters.slack.client import web_client
from adapters.slack.connection import Timing
from adapters.slack.sender import SlackSender
from gateway.approvals.store import Status
from gateway.backoff import Backoff
from gateway.http.app import create_app
from gateway.inbound.ingest import CLOSED_TEXT, NOT_YOURS_TEXT, Ingest
from gateway.messages import Address
from gateway.settings.env import load_settings
from gateway.state.health import Health
from gateway.state.keys import Keys
from tests.fakes.llm_server import FakeLLM
from tests.fakes.slack_api import TEAM_ID, FakeSlack
from tests.support.helpers import inbound
from tests.support.slack_helpers import (
    APP_TOKEN,
    BOT_TOKEN,
    SIGNING_SECRET,
    block_actions,
    interaction_bytes,
    signed_headers,
)
from tests.support.tool_servers import TIMED_OUT_RESULT, unanswered_confirmation

THREAD = "1700000000.000001"
SESSION = f"slack:{TEAM_ID}:C1:{THREAD}"
ADDRESS = Address(platform="slack", workspace=TEAM_ID, channel="C1", thread=THREAD)
FORM = "application/x-www-form-urlencoded"


async def _until(condition: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not await condition():
            await asyncio.sleep(0.02)


async def _open(ingest: Ingest, asker: str = "U1") -> str:
    return await ingest.approvals.open(
        SESSION, "0.0", "call-1", "files__delete", '{"path": "/srv/a"}', asker, ADDRESS, 600
    )


async def _status(ingest: Ingest, approval_id: str) -> Status | None:
    approval = await ingest.approvals.by_id(SESSION, approval_id)
    return approval.status if approval else None


async def _turn_jobs(redis: Redis) -> list[dict[str, str]]:
    raw = await redis.xrange(Keys.jobs("slack", 0))
    return [f for _, f in cast(list[tuple[str, dict[str, str]]], raw) if f["kind"] == "turn"]


def _settings(redis_url: str, slack: FakeSlack, **extra: Any) -> Any:
    return load_settings(
        _env_file=None,
        REDIS_URL=redis_url,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_API_URL=slack.api_url,
        **extra,
    )


# -- the sender ------------------------------------------------------------------------


async def test_the_request_is_posted_with_two_buttons_and_settled_without_them(
    slack: FakeSlack,
) -> None:
    sender = SlackSender(web_client(BOT_TOKEN, slack.api_url), 0.2)
    async with contextlib.aclosing(sender):
        ts = await sender.ask_approval(ADDRESS, "Run **files__delete** with `/srv/a`?", "A" * 16)
        posted = slack.messages[ts]
        assert posted.thread_ts == THREAD and "files__delete" in posted.text
        section, actions = posted.blocks
        assert section["text"] == {"type": "mrkdwn", "text": "Run *files__delete* with `/srv/a`?"}
        buttons = {b["action_id"]: (b["text"]["text"], b["value"]) for b in actions["elements"]}
        assert buttons == {"gw_approve": ("Approve", "A" * 16), "gw_decline": ("Decline", "A" * 16)}

        await sender.settle_approval(ADDRESS, ts, "Approved: **files__delete** ran.")
        assert [b["type"] for b in slack.messages[ts].blocks] == ["section"]
        assert slack.messages[ts].text == "Approved: *files__delete* ran."


# -- clicks over HTTP ------------------------------------------------------------------


@dataclass
class Web:
    http: httpx.AsyncClient
    redis: Redis
    ingest: Ingest

    async def click(self, payload: dict[str, Any]) -> httpx.Response:
        body = interaction_bytes(payload)
        headers = signed_headers(body, content_type=FORM)
        return await self.http.post("/slack/events", content=body, headers=headers)


@pytest.fixture
async def web(slack: FakeSlack, redis_url: str) -> AsyncIterator[Web]:
    settings = _settings(redis_url, slack, SLACK_SIGNING_SECRET=SIGNING_SECRET)
    redis = Redis.from_url(redis_url, decode_responses=True)
    platform = SlackPlatform(settings, redis)
    platform.validate("http")
    ingest = Ingest(settings, redis)
    app = create_app(redis, ingest, [platform], ["slack"])
    await platform.startup()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        yield Web(http, redis, ingest)
    await redis.aclose()


async def test_the_askers_click_over_http_approves_and_enqueues_the_turn(web: Web) -> None:
    approval_id = await _open(web.ingest)
    response = await web.click(block_actions(approval_id, thread_ts=THREAD))
    assert response.status_code == 200
    assert await _status(web.ingest, approval_id) == Status.APPROVED
    assert [job["session"] for job in await _turn_jobs(web.redis)] == [SESSION]


async def test_a_decline_over_http_declines(web: Web) -> None:
    approval_id = await _open(web.ingest)
    await web.click(block_actions(approval_id, approve=False))
    assert await _status(web.ingest, approval_id) == Status.DECLINED


async def test_someone_elses_click_is_refused_to_them_alone_and_changes_nothing(
    web: Web, slack: FakeSlack
) -> None:
    approval_id = await _open(web.ingest)
    response = await web.click(block_actions(approval_id, user="U2", thread_ts=THREAD))
    assert response.status_code == 200
    assert await _status(web.ingest, approval_id) == Status.PENDING
    assert await _turn_jobs(web.redis) == []
    assert [(e["user"], e["channel"], e["thread_ts"], e["text"]) for e in slack.ephemeral] == [
        ("U2", "C1", THREAD, NOT_YOURS_TEXT)
    ]


async def test_a_second_click_is_told_the_request_is_closed(web: Web, slack: FakeSlack) -> None:
    approval_id = await _open(web.ingest)
    await web.click(block_actions(approval_id))
    await web.click(block_actions(approval_id, approve=False))
    assert await _status(web.ingest, approval_id) == Status.APPROVED
    assert [e["text"] for e in slack.ephemeral] == [CLOSED_TEXT]


async def test_an_unsigned_click_is_refused_before_anything(web: Web) -> None:
    approval_id = await _open(web.ingest)
    body = interaction_bytes(block_actions(approval_id))
    headers = signed_headers(body, content_type=FORM, secret="not-the-secret")
    response = await web.http.post("/slack/events", content=body, headers=headers)
    assert response.status_code == 401
    assert await _status(web.ingest, approval_id) == Status.PENDING


@pytest.mark.parametrize(
    "change",
    [
        {"user": {"id": "B0BOT"}},  # a bot
        {"user": {"id": None}},
        {"channel": {"id": "not a channel"}},
        {"actions": [{"action_id": "gw_approve", "action_ts": "1710000000.000001"}]},
    ],
)
async def test_a_bots_or_malformed_click_is_dropped(web: Web, change: dict[str, Any]) -> None:
    approval_id = await _open(web.ingest)
    response = await web.click({**block_actions(approval_id), **change})
    assert response.status_code == 200
    assert await _status(web.ingest, approval_id) == Status.PENDING


async def test_a_malformed_approval_id_is_dropped(web: Web, slack: FakeSlack) -> None:
    approval_id = await _open(web.ingest)
    response = await web.click(block_actions(approval_id + "\n{}"))
    assert response.status_code == 200
    assert await _status(web.ingest, approval_id) == Status.PENDING
    assert slack.ephemeral == []


# -- clicks over Socket Mode -----------------------------------------------------------


@pytest.fixture
async def socket_ingest(slack: FakeSlack, redis_url: str) -> AsyncIterator[Ingest]:
    settings = _settings(redis_url, slack, SLACK_APP_TOKEN=APP_TOKEN)
    redis = Redis.from_url(redis_url, decode_responses=True)
    platform = SlackPlatform(settings, redis)
    platform.socket_timing = Timing(ping_interval=1.0, check_interval=0.05, connect_timeout=5)
    platform.socket_backoff = Backoff(first=0.05, limit=0.3, jitter=0.5)
    await platform.startup()
    ingest = Ingest(settings, redis)
    task = asyncio.create_task(platform.connect(ingest, Health(redis, "slack")))

    async def connected() -> bool:
        assert not task.done()
        return slack.live_connections == 1

    await _until(connected)
    yield ingest
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await redis.aclose()


async def test_a_click_over_socket_mode_is_acknowledged_and_decided(
    socket_ingest: Ingest, slack: FakeSlack
) -> None:
    approval_id = await _open(socket_ingest)
    envelope = slack.push(block_actions(approval_id), kind="interactive")

    async def acknowledged() -> bool:
        return any(a.get("envelope_id") == envelope for a in slack.acks)

    await _until(acknowledged)
    assert await _status(socket_ingest, approval_id) == Status.APPROVED
    assert len(await _turn_jobs(socket_ingest.redis)) == 1


async def test_someone_elses_click_over_socket_mode_is_refused(
    socket_ingest: Ingest, slack: FakeSlack
) -> None:
    approval_id = await _open(socket_ingest)
    slack.push(block_actions(approval_id, user="U2"), kind="interactive")

    async def refused() -> bool:
        return bool(slack.ephemeral)

    await _until(refused)
    assert slack.ephemeral[0]["text"] == NOT_YOURS_TEXT
    assert await _status(socket_ingest, approval_id) == Status.PENDING


# -- a request nobody answers ----------------------------------------------------------


async def test_a_request_nobody_answers_in_time_is_settled_as_refused_and_the_turn_goes_on(
    slack: FakeSlack, redis_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    sender = SlackSender(web_client(BOT_TOKEN, slack.api_url), 0.2)
    message = inbound("delete the old one", platform="slack", channel="C1", thread=THREAD)
    outcome = await unanswered_confirmation(redis_url, llm, tmp_path, message, sender)
    (result,) = outcome.results
    assert result.output == TIMED_OUT_RESULT and outcome.effects == []
    assert any("gw_approve" in str(c.args) for c in slack.calls_to("chat.postMessage"))
    (request,) = [m for m in slack.messages.values() if "desk__delete_item" in m.text]
    assert [b["type"] for b in request.blocks] == ["section"]  # the buttons are gone
    assert "desk__delete_item" in request.text and "Not approved in time" in request.text
    replies = [m.text for m in slack.messages.values() if m.thread_ts == THREAD]
    assert any(TIMED_OUT_RESULT in text for text in replies)  # the turn's answer

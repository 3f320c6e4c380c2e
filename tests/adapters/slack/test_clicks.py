"""Feedback clicks on Slack: a reply's `feedback_buttons` element clicked, over HTTP
(signature checked first) and Socket Mode, reaching `Ingest.feedback`.

Real pieces: bolt behind `POST /slack/events` and over Socket Mode against the loopback
fake, the real Ingest and feedback store on a real Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import httpx
import pytest
from redis.asyncio import Redis

from adapters.buttons import FEEDBACK_ACTION, FEEDBACK_BLOCK
from adapters.slack import SlackPlatform
from adapters.slack.connection import Timing
from gateway.backoff import Backoff
from gateway.feedback.store import REFUSED_TEXT, UNKNOWN_TEXT, Reply, Vote
from gateway.inbound.ingest import Ingest
from gateway.settings.env import load_settings
from gateway.state.health import Health
from gateway.state.keys import Keys
from tests.fakes.slack_api import BOT_TOKEN, TEAM_ID, FakeSlack
from tests.support.slack_helpers import (
    APP_TOKEN,
    EventsApp,
    block_actions,
    events_app,
    interaction_bytes,
    signed_headers,
)

THREAD = "1700000000.000001"
REPLY_TS = "1700000000.000200"
SESSION = f"slack:{TEAM_ID}:C1:{THREAD}"
REPLY = Reply("slack", TEAM_ID, "C1", REPLY_TS, SESSION, "turn-1", "openai/m")
FORM = "application/x-www-form-urlencoded"
EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


def feedback_actions(value: str, *, user: str = "U1", message_ts: str = REPLY_TS) -> dict[str, Any]:
    """The interactivity payload of a click on a reply's feedback buttons."""
    payload = block_actions("", user=user, message_ts=message_ts, thread_ts=THREAD)
    (action,) = payload["actions"]
    payload["actions"] = [
        {
            "type": "feedback_buttons",
            "action_id": FEEDBACK_ACTION,
            "block_id": FEEDBACK_BLOCK,
            "text": {"type": "plain_text", "text": "👍" if value == "up" else "👎"},
            "value": value,
            "action_ts": action["action_ts"],
        }
    ]
    return payload


async def _until(condition: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not await condition():
            await asyncio.sleep(0.02)


async def _votes(ingest: Ingest) -> list[tuple[str, str, str]]:
    found: list[Vote] = await ingest.feedback_store.since(EPOCH)
    return [(vote.user, vote.value, vote.model) for vote in found]


async def _counters(redis: Redis) -> dict[str, str]:
    found = cast(dict[str, str], await redis.hgetall(Keys.METRICS))
    return {field: value for field, value in found.items() if field.startswith("feedback|")}


async def _click(app: EventsApp, payload: dict[str, Any], **signing: Any) -> httpx.Response:
    body = interaction_bytes(payload)
    headers = signed_headers(body, content_type=FORM, **signing)
    return await app.http.post("/slack/events", content=body, headers=headers)


@pytest.fixture
async def web(slack: FakeSlack, redis_url: str) -> AsyncIterator[EventsApp]:
    async with events_app(slack, redis_url) as app:
        await app.ingest.feedback_store.register(REPLY)
        yield app


# -- over HTTP -------------------------------------------------------------------------


async def test_a_thumbs_up_is_recorded_once_and_acknowledged_without_a_word(
    web: EventsApp, slack: FakeSlack
) -> None:
    assert (await _click(web, feedback_actions("up"))).status_code == 200
    assert (await _click(web, feedback_actions("up"))).status_code == 200
    assert await _votes(web.ingest) == [("U1", "up", "openai/m")]
    assert await _counters(web.redis) == {f"feedback|slack|{TEAM_ID}|up|openai/m": "1"}
    assert slack.ephemeral == []


async def test_a_thumbs_down_after_up_replaces_it(web: EventsApp) -> None:
    await _click(web, feedback_actions("up"))
    await _click(web, feedback_actions("down"))
    assert await _votes(web.ingest) == [("U1", "down", "openai/m")]
    assert await _counters(web.redis) == {
        f"feedback|slack|{TEAM_ID}|up|openai/m": "0",
        f"feedback|slack|{TEAM_ID}|down|openai/m": "1",
    }


async def test_a_forged_click_is_refused_before_anything(web: EventsApp) -> None:
    response = await _click(web, feedback_actions("up"), secret="not-the-secret")
    assert response.status_code == 401
    assert await _votes(web.ingest) == []
    assert await _counters(web.redis) == {}


async def test_a_click_on_a_message_that_takes_no_feedback_is_told_so_and_changes_nothing(
    web: EventsApp, slack: FakeSlack
) -> None:
    response = await _click(web, feedback_actions("up", message_ts="1700000000.000999"))
    assert response.status_code == 200
    assert await _votes(web.ingest) == []
    assert [(e["user"], e["channel"], e["thread_ts"], e["text"]) for e in slack.ephemeral] == [
        ("U1", "C1", THREAD, UNKNOWN_TEXT)
    ]


async def test_an_outsiders_click_in_a_slack_connect_channel_is_refused(
    web: EventsApp, slack: FakeSlack
) -> None:
    payload = feedback_actions("down", user="U9")
    payload["user"]["team_id"] = "T0OTHER"  # a member of another organisation
    assert (await _click(web, payload)).status_code == 200
    assert await _votes(web.ingest) == []
    assert [(e["user"], e["text"]) for e in slack.ephemeral] == [("U9", REFUSED_TEXT)]


async def test_a_member_of_another_workspace_of_the_grid_organisation_is_no_outsider(
    web: EventsApp,
) -> None:
    payload = feedback_actions("up", user="U9")
    payload["user"]["team_id"] = "T0SISTER"
    payload["enterprise"] = {"id": "E0001", "name": "Org"}
    assert (await _click(web, payload)).status_code == 200
    assert await _votes(web.ingest) == [("U9", "up", "openai/m")]


@pytest.mark.parametrize(
    "change",
    [
        {"user": {"id": "B0BOT"}},  # a bot
        {"actions": [{"action_id": FEEDBACK_ACTION, "value": "up"}]},  # no action_ts
        {"container": {"type": "message"}, "message": {"type": "message"}},  # no message ts
    ],
)
async def test_a_bots_or_malformed_click_is_dropped(
    web: EventsApp, slack: FakeSlack, change: dict[str, Any]
) -> None:
    response = await _click(web, {**feedback_actions("up"), **change})
    assert response.status_code == 200
    assert await _votes(web.ingest) == [] and slack.ephemeral == []


async def test_a_value_that_is_not_ours_is_dropped(web: EventsApp, slack: FakeSlack) -> None:
    payload = feedback_actions("up")
    payload["actions"][0]["value"] = "positive_feedback"
    assert (await _click(web, payload)).status_code == 200
    assert await _votes(web.ingest) == [] and slack.ephemeral == []


async def test_the_reply_is_found_by_the_messages_own_ts_without_a_container(
    web: EventsApp,
) -> None:
    payload = feedback_actions("down")
    del payload["container"]
    assert (await _click(web, payload)).status_code == 200
    assert await _votes(web.ingest) == [("U1", "down", "openai/m")]


# -- over Socket Mode ------------------------------------------------------------------


async def test_a_click_over_socket_mode_is_acknowledged_and_recorded(
    slack: FakeSlack, redis_url: str
) -> None:
    settings = load_settings(
        _env_file=None,
        REDIS_URL=redis_url,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_API_URL=slack.api_url,
        SLACK_APP_TOKEN=APP_TOKEN,
    )
    redis = Redis.from_url(redis_url, decode_responses=True)
    platform = SlackPlatform(settings, redis)
    platform.socket_timing = Timing(ping_interval=1.0, check_interval=0.05, connect_timeout=5)
    platform.socket_backoff = Backoff(first=0.05, limit=0.3, jitter=0.5)
    await platform.startup()
    ingest = Ingest(settings, redis)
    await ingest.feedback_store.register(REPLY)
    task = asyncio.create_task(platform.connect(ingest, Health(redis, "slack")))
    try:

        async def connected() -> bool:
            assert not task.done()
            return slack.live_connections == 1

        await _until(connected)
        envelope = slack.push(feedback_actions("up", user="U2"), kind="interactive")

        async def acknowledged() -> bool:
            return any(a.get("envelope_id") == envelope for a in slack.acks)

        await _until(acknowledged)
        assert await _votes(ingest) == [("U2", "up", "openai/m")]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await redis.aclose()

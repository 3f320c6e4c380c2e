"""Signed events and `/btw` commands whose ids or texts are not of Slack's form never become turns.

Every case goes through `POST /slack/events` (bolt's signature check, the real
Ingest on a real Redis, slack-sdk against the loopback fake), after a control
mention that does get through: so the `/btw` cases have a session to ask about.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

import httpx
import pytest
from redis.asyncio import Redis

from gateway.state.keys import Keys
from tests.fakes.slack_api import TEAM_ID, FakeSlack
from tests.support.slack_helpers import (
    SIGNING_SECRET,
    command_bytes,
    event_body,
    events_app,
    json_bytes,
    mention,
    message,
    signed_headers,
)

OURS = ("adapters", "gateway", "slack_bolt", "slack_sdk")


def event(**fields: Any) -> dict[str, Any]:
    """A mention in a thread of channel C1, with `fields` replacing (or adding) its own."""
    return {**mention("hello", thread_ts="1710000000.000001"), **fields}


def envelope(**fields: Any) -> dict[str, Any]:
    """The envelope of a fresh mention, with `fields` replacing its own."""
    return {**event_body(event()), **fields}


def command(**fields: str) -> bytes:
    """A `/btw` form with `fields` replacing the real one's."""
    form = dict(parse_qsl(command_bytes("what did we say?").decode()))
    return urlencode({**form, **fields}).encode()


EVENTS: dict[str, dict[str, Any]] = {
    "ts a number": event_body(event(ts=1710000000)),
    "ts a float": event_body(event(ts=1710000000.5)),
    "ts a list": event_body(event(ts=["1710000000.000100"])),
    "ts an object": event_body(event(ts={"ts": "1710000000.000100"})),
    "ts without its fraction": event_body(event(ts="1710000000")),
    "ts with an empty fraction": event_body(event(ts="1710000000.")),
    "ts letters": event_body(event(ts="abc.def")),
    "ts with a trailing newline": event_body(event(ts="1710000000.000100\n")),
    "ts with another script's digits": event_body(event(ts="١٧١٠٠٠٠٠٠٠.٠٠٠١")),
    "ts with 13 digits": event_body(event(ts="1234567890123.000100")),
    "ts with 10 decimals": event_body(event(ts="1710000000.0001000000")),
    "thread_ts an object": event_body(event(thread_ts={"ts": "1710000000.000001"})),
    "thread_ts a number": event_body(event(thread_ts=1710000000)),
    "thread_ts true": event_body(event(thread_ts=True)),
    "thread_ts empty": event_body(event(thread_ts="")),
    "thread_ts with two dots": event_body(event(thread_ts="1.2.3")),
    "channel a list": event_body(event(channel=["C1"])),
    "channel an object": event_body(event(channel={"id": "C1"})),
    "channel a number": event_body(event(channel=42)),
    "channel in lower case": event_body(event(channel="c1")),
    "channel of an unknown kind": event_body(event(channel="X123")),
    "channel a bare prefix": event_body(event(channel="C")),
    "channel with a colon": event_body(event(channel="C1:x")),
    "channel with a space": event_body(event(channel="C1 ")),
    "user in lower case": event_body(event(user="u1")),
    "user of an unknown kind": event_body(event(user="X1")),
    "user with markup": event_body(event(user="U1><!channel")),
    "user a bare prefix": event_body(event(user="U")),
    "event.team in lower case": event_body(event(team="t0001")),
    "event.user_team a number": event_body(event(user_team=1)),
    "team_id of an unknown kind": envelope(team_id="X0001"),
    "team_id a list": envelope(team_id=["T0001"]),
    "enterprise_id with a dash": envelope(enterprise_id="E-1"),
    "authorizations.team_id with a space": envelope(
        authorizations=[{"team_id": "T 1", "user_id": "UBOT", "is_bot": True}]
    ),
    "authorizations not a list": envelope(authorizations="T0001"),
    "event_id a list": envelope(event_id=["Ev1"]),
    "event_id with a colon": envelope(event_id="Ev1:x"),
    "text a list": event_body(event(text=["hello"])),
    "text an object": event_body(event(text={"text": "hello"})),
    "subtype a list": event_body(
        message("hi", channel="D1", channel_type="im", subtype=["file_share"])
    ),
    "a DM's channel in lower case": event_body(message("hi", channel="d1", channel_type="im")),
}
# bolt reads these itself before any listener runs, and `adapters.slack.http` answers 400.
BOLT_REFUSES = frozenset({"channel a number", "authorizations not a list"})
COMMANDS: dict[str, bytes] = {
    "/btw user in lower case": command(user_id="u1"),
    "/btw user with markup": command(user_id="U1><!channel"),
    "/btw user empty": command(user_id=""),
    "/btw channel in lower case": command(channel_id="c1"),
    "/btw team of an unknown kind": command(team_id="X0001"),
}


@dataclass
class Web:
    http: httpx.AsyncClient
    redis: Redis

    async def post(self, body: bytes, content_type: str = "application/json") -> httpx.Response:
        return await self.http.post(
            "/slack/events", content=body, headers=signed_headers(body, content_type=content_type)
        )

    async def state(self) -> tuple[list[str], int]:
        """Every key, and the length of the job stream: what any ingest would change."""
        return sorted(await self.redis.keys("*")), await self.redis.xlen(Keys.jobs("slack", 0))


@pytest.fixture
async def web(slack: FakeSlack, redis_url: str) -> AsyncIterator[Web]:
    async with events_app(slack, redis_url) as app:
        yield Web(app.http, app.redis)


async def test_events_and_commands_with_malformed_ids_are_dropped_with_one_line_each(
    web: Web, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    assert len(EVENTS) >= 32
    control = event_body(mention("the control", ts="1710000000.000001"))
    assert (await web.post(json_bytes(control))).status_code == 200
    before = await web.state()
    assert before[1] == 1 and Keys.inbox(f"slack:{TEAM_ID}:C1:1710000000.000001") in before[0]
    posts = len(slack.calls_to("chat.postMessage"))
    sent = [(name, json_bytes(body), "application/json") for name, body in EVENTS.items()]
    sent += [(name, body, "application/x-www-form-urlencoded") for name, body in COMMANDS.items()]
    stored, refused, noisy = [], [], []
    for name, body, content_type in sent:
        caplog.clear()
        with caplog.at_level(logging.INFO):
            response = await web.post(body, content_type)
        # Anything but a 200 and Slack delivers it again, three times.
        if response.status_code != (400 if name in BOLT_REFUSES else 200):
            refused.append((name, response.status_code))
        if await web.state() != before or len(slack.calls_to("chat.postMessage")) != posts:
            stored.append(name)
            before, posts = await web.state(), len(slack.calls_to("chat.postMessage"))
        lines = [r.getMessage() for r in caplog.records if r.name.startswith(OURS)]
        if len(lines) != 1 or "\n" in lines[0] or SIGNING_SECRET in lines[0]:
            noisy.append((name, lines))
    assert stored == [], f"{len(stored)} of {len(sent)} malformed deliveries were taken"
    assert refused == []
    assert noisy == []

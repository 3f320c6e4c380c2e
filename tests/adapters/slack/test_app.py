"""`POST /slack/events` in process: bolt's signature check, events and `/btw` into ingest.

The real pieces: the gateway's web app with the Slack routes mounted, slack-bolt,
the real Ingest on a real Redis, slack-sdk talking to the loopback fake.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

import httpx
import pytest
from redis.asyncio import Redis
from slack_sdk.signature import Clock, SignatureVerifier

from adapters.slack.app import CANNOT_POST, NO_SESSION
from gateway.http.limits import MAX_BODY
from gateway.inbound.ingest import Ingest
from gateway.state.keys import Keys
from tests.fakes.fuzz import slack_signature
from tests.fakes.slack_api import BOT_ID, BOT_USER_ID, TEAM_ID, FakeSlack
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

# The worked example of Slack's "Verifying requests from Slack" page.
DOC_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
DOC_TIMESTAMP = 1531420618
DOC_BODY = (
    "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&"
    "channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&"
    "command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands"
    "%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&"
    "trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)
DOC_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"


class FrozenClock(Clock):
    def __init__(self, now: float) -> None:
        self._now = now

    def now(self) -> float:
        return self._now


@dataclass
class Web:
    http: httpx.AsyncClient
    redis: Redis
    ingest: Ingest

    async def post(self, body: bytes, headers: dict[str, str]) -> httpx.Response:
        return await self.http.post("/slack/events", content=body, headers=headers)

    async def event(self, event: dict[str, Any], **kwargs: Any) -> httpx.Response:
        body = json_bytes(event_body(event, kwargs.pop("event_id", None)))
        return await self.post(body, signed_headers(body, **kwargs))

    async def command(self, text: str, **kwargs: Any) -> httpx.Response:
        body = command_bytes(text, **kwargs)
        return await self.post(
            body, signed_headers(body, content_type="application/x-www-form-urlencoded")
        )

    async def jobs(self) -> list[dict[str, Any]]:
        raw = await self.redis.xrange(Keys.jobs("slack", 0))
        entries = cast(list[tuple[str, dict[str, str]]], raw)
        return [
            {**fields, "payload": json.loads(fields.get("payload") or "{}")}
            for _, fields in entries
        ]


@pytest.fixture
async def web(slack: FakeSlack, redis_url: str) -> AsyncIterator[Web]:
    async with events_app(slack, redis_url) as app:
        yield Web(app.http, app.redis, app.ingest)


def test_the_official_example_verifies_with_the_clock_at_its_timestamp() -> None:
    verifier = SignatureVerifier(DOC_SECRET, clock=FrozenClock(DOC_TIMESTAMP))
    headers = {"X-Slack-Request-Timestamp": str(DOC_TIMESTAMP), "X-Slack-Signature": DOC_SIGNATURE}
    assert verifier.is_valid_request(DOC_BODY, headers)
    # The helper the tests sign with is the same scheme.
    assert (
        signed_headers(DOC_BODY.encode(), secret=DOC_SECRET, timestamp=DOC_TIMESTAMP)[
            "X-Slack-Signature"
        ]
        == DOC_SIGNATURE
    )
    # One changed byte, or the same request five minutes and a second later, fails.
    assert not verifier.is_valid_request(DOC_BODY.replace("foobar", "foobaz"), headers)
    late = SignatureVerifier(DOC_SECRET, clock=FrozenClock(DOC_TIMESTAMP + 301))
    assert not late.is_valid_request(DOC_BODY, headers)


async def test_url_verification_is_answered(web: Web) -> None:
    body = json_bytes({"token": "legacy", "challenge": "chal-123", "type": "url_verification"})
    response = await web.post(body, signed_headers(body))
    assert response.status_code == 200
    assert response.json() == {"challenge": "chal-123"}


async def test_a_mention_is_queued_as_a_turn_with_the_speaker_name(
    web: Web, slack: FakeSlack
) -> None:
    event = mention("what is our plan?")
    started = time.perf_counter()
    response = await web.event(event)
    assert response.status_code == 200
    assert time.perf_counter() - started < 3
    jobs = await web.jobs()
    assert [job["kind"] for job in jobs] == ["turn"]
    assert jobs[0]["session"] == f"slack:{TEAM_ID}:C1:{event['ts']}"
    history = await web.ingest.sessions.inbox(jobs[0]["session"])
    assert history[-1]["text"] == "what is our plan?"
    assert history[-1]["speaker"]["name"] == "Ada"


async def test_a_retried_delivery_is_one_job(web: Web) -> None:
    event = mention("only once please")
    body = json_bytes(event_body(event, "EvRetried"))
    for retry in (None, 1, 2):
        response = await web.post(body, signed_headers(body, retry=retry))
        assert response.status_code == 200
    assert len(await web.jobs()) == 1


async def test_forged_and_stale_requests_get_401_and_change_nothing(web: Web) -> None:
    body = json_bytes(event_body(mention("forged")))
    forged = signed_headers(body, secret="not-the-secret")
    stale = signed_headers(body, timestamp=int(time.time()) - 600)
    unsigned = {"Content-Type": "application/json"}
    for headers in (forged, stale, unsigned):
        assert (await web.post(body, headers)).status_code == 401
    # Slack's own documented request is genuine but years old: refused as a replay.
    doc_headers = {
        "X-Slack-Request-Timestamp": str(DOC_TIMESTAMP),
        "X-Slack-Signature": DOC_SIGNATURE,
        "Content-Type": "application/x-www-form-urlencoded",
    }
    assert (await web.post(DOC_BODY.encode(), doc_headers)).status_code == 401
    assert await web.jobs() == []
    assert await web.redis.dbsize() == 0


async def test_bots_and_the_bot_itself_are_ignored(web: Web, slack: FakeSlack) -> None:
    thread = mention("start")
    await web.event(thread)
    ignored = [
        message("from me", user=BOT_USER_ID, thread_ts=thread["ts"], bot_id=BOT_ID),
        message(
            "another bot", user="U9", thread_ts=thread["ts"], bot_id="B9", subtype="bot_message"
        ),
        message("edited", thread_ts=thread["ts"], subtype="message_changed"),
        message("joined", thread_ts=thread["ts"], subtype="channel_join"),
        message("dm from a bot", channel="D1", channel_type="im", bot_id="B9"),
    ]
    for event in ignored:
        assert (await web.event(event)).status_code == 200
    assert len(await web.jobs()) == 1


async def test_the_message_copy_of_a_mention_is_not_a_second_turn(web: Web) -> None:
    event = mention("hello")
    copy = message(event["text"], ts=event["ts"])
    await web.event(event)
    await web.event(copy)
    assert len(await web.jobs()) == 1


async def test_a_dm_is_queued_without_a_mention(web: Web) -> None:
    await web.event(message("hi there", channel="D1", channel_type="im"))
    jobs = await web.jobs()
    assert len(jobs) == 1 and jobs[0]["session"] == f"slack:{TEAM_ID}:D1"


async def test_names_are_looked_up_once_and_cached_with_a_ttl(web: Web, slack: FakeSlack) -> None:
    await web.event(message("one", channel="D1", channel_type="im"))
    await web.event(message("two", channel="D1", channel_type="im"))
    assert len(slack.calls_to("users.info")) == 1
    key = Keys.user_name("slack", "U1")
    assert await web.redis.get(key) == "Ada"
    assert 0 < await web.redis.ttl(key) <= 24 * 3600


async def test_native_btw_without_a_session_says_so_ephemerally(web: Web, slack: FakeSlack) -> None:
    response = await web.command("what did we decide?", channel="C7")
    assert response.status_code == 200
    assert response.json() == {"text": NO_SESSION, "response_type": "ephemeral"}
    assert not slack.calls_to("chat.postMessage")
    assert await web.jobs() == []


async def test_native_btw_quotes_the_question_and_answers_under_the_quote(
    web: Web, slack: FakeSlack
) -> None:
    thread = mention("let us plan the launch")
    await web.event(thread)
    response = await web.command("what did we decide?", trigger_id="trig-btw-1")
    assert response.status_code == 200
    quote = slack.answered("chat.postMessage")[0]
    assert "thread_ts" not in quote.args and "what did we decide?" in quote.args["text"]
    quote_ts = next(ts for ts, m in slack.messages.items() if m.thread_ts is None)
    side = [job for job in await web.jobs() if job["kind"] == "side"]
    assert len(side) == 1
    assert side[0]["session"] == f"slack:{TEAM_ID}:C1:{thread['ts']}"
    assert side[0]["payload"]["question"] == "what did we decide?"
    assert side[0]["payload"]["address"]["thread"] == quote_ts
    assert side[0]["payload"]["address"]["side"] is True


async def test_native_btw_where_the_bot_cannot_post_says_so(web: Web, slack: FakeSlack) -> None:
    await web.event(mention("a conversation"))
    slack.fail_next("chat.postMessage", "not_in_channel")
    response = await web.command("anything?")
    assert response.json() == {"text": CANNOT_POST, "response_type": "ephemeral"}
    assert [job["kind"] for job in await web.jobs()] == ["turn"]


async def test_bang_btw_in_a_thread_answers_in_that_thread(web: Web) -> None:
    thread = mention("start")
    await web.event(thread)
    await web.event(mention("!btw what was that?", ts=None, thread_ts=thread["ts"]))
    side = [job for job in await web.jobs() if job["kind"] == "side"]
    assert len(side) == 1
    assert side[0]["payload"]["address"]["thread"] == thread["ts"]


async def test_other_events_are_acknowledged(web: Web) -> None:
    response = await web.event(
        {
            "type": "reaction_added",
            "user": "U1",
            "reaction": "eyes",
            "item": {"type": "message", "channel": "C1", "ts": "1.1"},
        }
    )
    assert response.status_code == 200
    assert await web.jobs() == []


# -- what is refused before it reaches bolt ----------------------------------------


async def test_a_body_over_the_limit_is_413_before_anything_else(web: Web) -> None:
    body = b'{"type": "event_callback", "pad": "' + b"x" * MAX_BODY + b'"}'
    response = await web.post(body, signed_headers(body))
    assert response.status_code == 413
    assert await web.redis.dbsize() == 0


async def test_a_chunked_body_is_cut_off_at_the_limit_unread(web: Web) -> None:
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(1024):  # 64 MiB, if anyone kept reading
            sent += 64 * 1024
            yield b"x" * (64 * 1024)

    response = await web.http.post(
        "/slack/events", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413
    assert sent <= MAX_BODY + 2 * 64 * 1024


async def test_a_signed_body_that_is_not_utf8_is_400_and_changes_nothing(web: Web) -> None:
    body = json_bytes(event_body(mention("caf"))).replace(b"caf", b"caf\xe9")
    stamp = str(int(time.time()))  # slack-sdk's signer decodes the body as UTF-8 first
    response = await web.post(
        body,
        {
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": slack_signature(SIGNING_SECRET, stamp, body),
            "Content-Type": "application/json",
        },
    )
    assert response.status_code == 400
    assert await web.redis.dbsize() == 0


@pytest.mark.parametrize(
    "body",
    [
        b'{"type": "event_callback", "event": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"type": "event_callback", "event": ' + b"[" * 500 + b"]" * 500 + b"}",
        b"[1, 2]",
        b'{"type": "event_callback", "event": ',
        b'{"type": "event_callback", "event": {"type": "app_mention", "text": NaN}}',
    ],
)
async def test_signed_json_that_is_not_an_event_is_400_logged_once(
    web: Web, caplog: pytest.LogCaptureFixture, body: bytes
) -> None:
    with caplog.at_level(logging.INFO):
        response = await web.post(body, signed_headers(body))
    assert response.status_code == 400
    lines = [r for r in caplog.records if r.name.startswith(("adapters", "gateway"))]
    assert len(lines) == 1 and "\n" not in lines[0].getMessage() and not lines[0].exc_info
    assert SIGNING_SECRET not in lines[0].getMessage()
    assert await web.redis.dbsize() == 0


async def test_an_event_of_the_wrong_shape_is_400_without_a_stack_trace(
    web: Web, caplog: pytest.LogCaptureFixture
) -> None:
    event = mention("hello")
    event["files"] = 7  # (a text of the wrong type is dropped by the inbound checks instead)
    with caplog.at_level(logging.INFO):
        response = await web.event(event)
    assert response.status_code == 400
    lines = [r for r in caplog.records if r.name.startswith(("adapters", "gateway", "slack"))]
    assert len(lines) == 1 and not lines[0].exc_info
    assert await web.jobs() == []


async def test_a_json_body_sent_as_another_content_type_is_415(web: Web) -> None:
    body = json_bytes(event_body(mention("hello")))
    for content_type in ("text/plain", "multipart/form-data; boundary=x"):
        response = await web.post(body, signed_headers(body, content_type=content_type))
        assert response.status_code == 415
    assert await web.jobs() == []


async def test_an_unsigned_body_is_refused_before_it_is_parsed(
    web: Web, caplog: pytest.LogCaptureFixture
) -> None:
    body = b'{"event": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with caplog.at_level(logging.INFO):
        response = await web.post(body, {"Content-Type": "application/json"})
    assert response.status_code == 401
    assert len([r for r in caplog.records if r.name.startswith(("adapters", "gateway"))]) <= 1

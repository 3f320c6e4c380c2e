"""Seeded fuzzing of `POST /slack/events` and `POST /telegram/webhook` (tests/fakes/fuzz.py).

Each malformed delivery, signed or not, must get an answer below 500 (a 4xx,
or a 200 that drops it), leave Redis exactly as it was, and be logged in at
most one line without a stack trace or the secret. A valid delivery sent
after the fuzzing is still ingested, so the routes cannot pass by refusing
everything.

The real parts: `create_app` with both platforms mounted, slack-bolt and
python-telegram-bot, the loopback Slack and Telegram fakes, the real Ingest on
a real Redis, httpx through ASGITransport (an exception in the app fails the test).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx
import pytest
from redis.asyncio import Redis

from adapters.slack import SlackPlatform
from adapters.telegram import TelegramPlatform
from gateway.http.app import create_app
from gateway.inbound.ingest import Ingest
from gateway.settings.env import load_settings
from gateway.state.keys import Keys
from tests.fakes.fuzz import Case, slack_cases, telegram_cases
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegram
from tests.support.slack_helpers import (
    BOT_TOKEN,
    SIGNING_SECRET,
    event_body,
    json_bytes,
    mention,
    signed_headers,
)

CASES = 300
TELEGRAM_SECRET = "fuzz_webhook-secret-0123"
OUR_LOGGERS = ("adapters", "gateway", "slack_bolt", "slack_sdk", "telegram")


@dataclass
class Web:
    http: httpx.AsyncClient
    redis: Redis
    telegram: FakeTelegram

    async def keyspace(self) -> dict[str, str]:
        return {key: await self.redis.type(key) for key in await self.redis.keys("*")}


@pytest.fixture
async def web(slack: FakeSlack, fake_telegram: FakeTelegram, redis_url: str) -> AsyncIterator[Web]:
    settings = load_settings(
        _env_file=None,
        REDIS_URL=redis_url,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_URL=slack.api_url,
        TELEGRAM_BOT_TOKEN=fake_telegram.token,
        TELEGRAM_WEBHOOK_SECRET=TELEGRAM_SECRET,
        TELEGRAM_API_URL=fake_telegram.base_url,
        TELEGRAM_ALLOW_ALL=True,
    )
    redis = Redis.from_url(redis_url, decode_responses=True)
    platforms = [SlackPlatform(settings, redis), TelegramPlatform(settings, redis)]
    for platform in platforms:
        await platform.startup()
    app = create_app(redis, Ingest(settings, redis), platforms, ["slack", "telegram"])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        yield Web(http, redis, fake_telegram)
    for platform in platforms:
        await platform.shutdown()
    await redis.aclose()


async def fuzz(
    web: Web, caplog: pytest.LogCaptureFixture, path: str, cases: Iterator[Case], secret: str
) -> dict[int, int]:
    """Send every case; check each one as it comes back; the count of each status."""
    statuses: dict[int, int] = {}
    before = await web.keyspace()
    for headers, body, signed in cases:
        caplog.clear()
        response = await web.http.post(path, content=body, headers=headers)
        where = f"{path} signed={signed} {headers.get('Content-Type')!r} {body[:120]!r}"
        assert response.status_code == 200 or 400 <= response.status_code < 500, where
        if not signed:
            assert response.status_code in (401, 413), where
        assert await web.keyspace() == before, where
        check_logged_once(caplog.records, secret, where)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
    return statuses


def check_logged_once(records: list[logging.LogRecord], secret: str, where: str) -> None:
    lines = [r for r in records if r.name.startswith(OUR_LOGGERS)]
    assert len(lines) <= 1, (where, [r.getMessage() for r in lines])
    for record in lines:
        message = record.getMessage()
        assert "\n" not in message and record.exc_info is None, (where, message)
        assert secret not in message and len(message) < 300, (where, message)


async def test_malformed_slack_deliveries_are_refused_and_change_nothing(
    web: Web, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        statuses = await fuzz(
            web, caplog, "/slack/events", slack_cases(1, CASES, SIGNING_SECRET), SIGNING_SECRET
        )
    assert statuses.get(401, 0) >= CASES // 2  # every unsigned one
    assert statuses.get(400, 0) > CASES // 4  # the signed ones, mostly
    # The control: the same route still answers the challenge and ingests a real event.
    challenge = json_bytes({"token": "legacy", "challenge": "chal-9", "type": "url_verification"})
    answer = await web.http.post(
        "/slack/events", content=challenge, headers=signed_headers(challenge)
    )
    assert answer.json() == {"challenge": "chal-9"}
    event = json_bytes(event_body(mention("after the fuzzing")))
    assert (
        await web.http.post("/slack/events", content=event, headers=signed_headers(event))
    ).status_code == 200
    assert await web.redis.xlen(Keys.jobs("slack", 0)) == 1


async def test_malformed_telegram_updates_are_dropped_and_change_nothing(
    web: Web, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        statuses = await fuzz(
            web,
            caplog,
            "/telegram/webhook",
            telegram_cases(1, CASES, TELEGRAM_SECRET),
            TELEGRAM_SECRET,
        )
    assert statuses.get(401, 0) == CASES // 2  # every one without the right secret
    assert statuses.get(200, 0) > CASES // 4  # acknowledged and dropped
    update = {
        "update_id": 77,
        "message": {
            "message_id": 1,
            "date": 1700000000,
            "text": "after the fuzzing",
            "from": {"id": 42, "is_bot": False, "first_name": "Alice"},
            "chat": {"id": 42, "type": "private", "first_name": "Alice"},
        },
    }
    headers = {
        "Content-Type": "application/json",
        "X-Telegram-Bot-Api-Secret-Token": TELEGRAM_SECRET,
    }
    response = await web.http.post(
        "/telegram/webhook", content=json.dumps(update).encode(), headers=headers
    )
    assert response.status_code == 200
    assert await web.redis.xlen(Keys.jobs("telegram", 0)) == 1


def test_the_cases_are_the_same_for_the_same_seed() -> None:
    first = [(body, signed) for _, body, signed in slack_cases(7, 50, SIGNING_SECRET)]
    again = [(body, signed) for _, body, signed in slack_cases(7, 50, SIGNING_SECRET)]
    assert first == again
    assert [b for _, b, _ in telegram_cases(7, 50, "s")] == [
        b for _, b, _ in telegram_cases(7, 50, "s")
    ]

"""Feedback clicks on Telegram: callback queries `f:up` / `f:down` over the webhook
(its secret checked first) and long polling, reaching `Ingest.feedback`, each answered.

Real pieces: python-telegram-bot against the loopback fake, the webhook route in the
gateway's web app, the poller, the real Ingest and feedback store on a real Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

import httpx
import pytest
import redis.asyncio as aioredis

from adapters.telegram import TelegramPlatform
from gateway.feedback.store import REFUSED_TEXT, THANKS_TEXT, UNKNOWN_TEXT, Reply
from gateway.http.app import create_app
from gateway.inbound.ingest import Ingest
from gateway.settings.env import load_settings
from gateway.state.health import Health
from gateway.state.keys import Keys
from tests.fakes.telegram_api import FakeTelegram

SECRET = "s3cret_Token-1"
ALICE = {"id": 42, "is_bot": False, "first_name": "Alice"}
STRANGER = {"id": 43, "is_bot": False, "first_name": "Bob"}
REPLY = Reply("telegram", "123456", "42", "5000", "telegram:123456:42", "turn-1", "openai/m")
EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
_ids = itertools.count(1)


def click(value: str, *, user: dict[str, Any] = ALICE, message_id: int = 5000) -> dict[str, Any]:
    """A callback_query update: a click on a feedback button under the bot's message."""
    number = next(_ids)
    return {
        "update_id": 8000 + number,
        "callback_query": {
            "id": str(910000 + number),
            "from": user,
            "chat_instance": "-555",
            "data": f"f:{value}",
            "message": {
                "message_id": message_id,
                "date": 1700000000,
                "chat": {"id": 42, "type": "private", "first_name": "Alice"},
                "from": {"id": 123456, "is_bot": True, "first_name": "Gateway"},
                "text": "the answer",
            },
        },
    }


def _settings(fake: FakeTelegram, **extra: Any) -> Any:
    return load_settings(
        _env_file=None,
        TELEGRAM_BOT_TOKEN=fake.token,
        TELEGRAM_API_URL=fake.base_url,
        GATEWAY_ALLOWED_USERS="telegram:42",  # Alice only: Telegram is an open network
        **extra,
    )


@dataclass
class Webhook:
    http: httpx.AsyncClient
    ingest: Ingest

    async def post(self, update: dict[str, Any], secret: str = SECRET) -> httpx.Response:
        headers = {"X-Telegram-Bot-Api-Secret-Token": secret}
        return await self.http.post("/telegram/webhook", json=update, headers=headers)

    async def votes(self) -> list[tuple[str, str]]:
        return [(v.user, v.value) for v in await self.ingest.feedback_store.since(EPOCH)]


@pytest.fixture
async def webhook(
    fake_telegram: FakeTelegram, redis_client: aioredis.Redis
) -> AsyncIterator[Webhook]:
    settings = _settings(fake_telegram, TELEGRAM_WEBHOOK_SECRET=SECRET)
    telegram = TelegramPlatform(settings, redis_client)
    await telegram.startup()
    ingest = Ingest(settings, redis_client)
    await ingest.feedback_store.register(REPLY)
    app = create_app(redis_client, ingest, [telegram], ["telegram"])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        yield Webhook(http, ingest)
    await telegram.shutdown()


def _answers(fake: FakeTelegram) -> list[str | None]:
    return [answer.get("text") for answer in fake.callback_answers]


async def _counters(redis: aioredis.Redis) -> dict[str, str]:
    found = cast(dict[str, str], await redis.hgetall(Keys.METRICS))
    return {field: value for field, value in found.items() if field.startswith("feedback|")}


async def test_a_click_is_recorded_once_and_thanked(
    webhook: Webhook, fake_telegram: FakeTelegram, redis_client: aioredis.Redis
) -> None:
    update = click("up")
    assert (await webhook.post(update)).status_code == 200
    assert (await webhook.post(click("up"))).status_code == 200
    assert await webhook.votes() == [("42", "up")]
    assert await _counters(redis_client) == {"feedback|telegram|123456|up|openai/m": "1"}
    assert fake_telegram.callback_answers[0]["callback_query_id"] == update["callback_query"]["id"]
    assert _answers(fake_telegram) == [THANKS_TEXT, THANKS_TEXT]


async def test_the_other_value_replaces_the_first(
    webhook: Webhook, redis_client: aioredis.Redis
) -> None:
    await webhook.post(click("down"))
    await webhook.post(click("up"))
    assert await webhook.votes() == [("42", "up")]
    assert await _counters(redis_client) == {
        "feedback|telegram|123456|down|openai/m": "0",
        "feedback|telegram|123456|up|openai/m": "1",
    }


async def test_a_strangers_click_is_refused_and_changes_nothing(
    webhook: Webhook, fake_telegram: FakeTelegram, redis_client: aioredis.Redis
) -> None:
    assert (await webhook.post(click("down", user=STRANGER))).status_code == 200
    assert await webhook.votes() == []
    assert await _counters(redis_client) == {}
    assert _answers(fake_telegram) == [REFUSED_TEXT]


async def test_a_forged_click_is_refused_before_anything(
    webhook: Webhook, fake_telegram: FakeTelegram
) -> None:
    assert (await webhook.post(click("up"), secret="not_the_secret")).status_code == 401
    assert await webhook.votes() == []
    assert fake_telegram.callback_answers == []


async def test_a_click_on_a_message_that_takes_no_feedback_is_told_so(
    webhook: Webhook, fake_telegram: FakeTelegram
) -> None:
    assert (await webhook.post(click("up", message_id=5999))).status_code == 200
    assert await webhook.votes() == []
    assert _answers(fake_telegram) == [UNKNOWN_TEXT]


@pytest.mark.parametrize(
    "change",
    [
        {"data": "f:sideways"},
        {"from": {"id": 77, "is_bot": True, "first_name": "Other bot"}},
    ],
)
async def test_a_bots_or_malformed_click_is_dropped_but_still_answered(
    webhook: Webhook, fake_telegram: FakeTelegram, change: dict[str, Any]
) -> None:
    update = click("up")
    update["callback_query"].update(change)
    assert (await webhook.post(update)).status_code == 200
    assert await webhook.votes() == []
    assert _answers(fake_telegram) == [None]


async def test_a_click_fetched_by_long_polling_is_recorded_and_answered(
    fake_telegram: FakeTelegram, redis_client: aioredis.Redis
) -> None:
    settings = _settings(fake_telegram)
    telegram = TelegramPlatform(settings, redis_client)
    await telegram.startup()
    ingest = Ingest(settings, redis_client)
    await ingest.feedback_store.register(REPLY)
    task = asyncio.create_task(telegram.connect(ingest, Health(redis_client, "telegram-polling")))
    try:
        fake_telegram.queue_update(click("down"))
        async with asyncio.timeout(10):
            while not fake_telegram.callback_answers:
                assert not task.done()
                await asyncio.sleep(0.02)
        assert _answers(fake_telegram) == [THANKS_TEXT]
        assert [(v.user, v.value) for v in await ingest.feedback_store.since(EPOCH)] == [
            ("42", "down")
        ]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await telegram.shutdown()

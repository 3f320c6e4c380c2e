"""Updates with the right secret but ids or texts of the wrong type never become turns.

Every case goes through `POST /telegram/webhook` into the real Ingest on a real
Redis; one of each is fetched by the long-polling loop too. A control update of
the right form gets through in the same test.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from adapters.telegram import TelegramPlatform
from gateway.inbound.ingest import Ingest
from gateway.state.health import Health
from gateway.state.keys import Keys
from gateway.state.session import SessionStore
from tests.fakes.telegram_api import FakeTelegram
from tests.support.telegram_helpers import post_update, webhook_client, webhook_platform

SECRET = "s3cret_Token-1"
SESSION = "telegram:123456:42"
DELETE = object()  # a field left out


def update(update_id: int = 1, text: str = "hello") -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id + 100,
            "date": 1700000000,
            "text": text,
            "from": {"id": 42, "is_bot": False, "first_name": "Alice"},
            "chat": {"id": 42, "type": "private", "first_name": "Alice"},
        },
    }


def changed(path: str, value: object, **message: Any) -> dict[str, Any]:
    """A well-formed update with the field at `path` (dotted, under the update) set to
    `value`, and `message`'s fields added to the message."""
    body = copy.deepcopy(update())
    body["message"].update(message)
    *parents, name = path.split(".")
    target = body
    for parent in parents:
        target = target[parent]
    if value is DELETE:
        del target[name]
    else:
        target[name] = value
    return body


TOPIC = {"is_topic_message": True}
REPLIED = {
    "reply_to_message": {"message_id": 7, "date": 1700000000, "chat": {"id": 42, "type": "private"}}
}
CASES: dict[str, dict[str, Any]] = {
    "message_id null": changed("message.message_id", None),
    "message_id an object": changed("message.message_id", {"id": 9}),
    "message_id a list": changed("message.message_id", [9]),
    "message_id a string": changed("message.message_id", "9"),
    "message_id true": changed("message.message_id", True),
    "message_id false": changed("message.message_id", False),
    "message_id a float": changed("message.message_id", 9.5),
    "message_id zero": changed("message.message_id", 0),
    "message_id negative": changed("message.message_id", -3),
    "message_id past 64 bits": changed("message.message_id", 2**63),
    "from.id a list": changed("message.from.id", [42]),
    "from.id true": changed("message.from.id", True),
    "from.id null": changed("message.from.id", None),
    "from.id a string": changed("message.from.id", "42"),
    "from.id an object": changed("message.from.id", {"id": 42}),
    "from.id negative": changed("message.from.id", -42),
    "from.id past 64 bits": changed("message.from.id", 2**64),
    "from.id a float": changed("message.from.id", 4.2),
    "chat.id a string": changed("message.chat.id", "42"),
    "chat.id a list": changed("message.chat.id", [42]),
    "chat.id true": changed("message.chat.id", True),
    "chat.id null": changed("message.chat.id", None),
    "chat.id an object": changed("message.chat.id", {"id": 42}),
    "chat.id past 64 bits": changed("message.chat.id", 2**63),
    "chat.id below 64 bits": changed("message.chat.id", -(2**63) - 1),
    "chat.id a float": changed("message.chat.id", 42.0),
    "chat.type unknown": changed("message.chat.type", "bogus"),
    "chat.type a list": changed("message.chat.type", ["private"]),
    "chat.type a number": changed("message.chat.type", 5),
    "chat missing": changed("message.chat", DELETE),
    "message_thread_id an object": changed("message.message_thread_id", {"id": 77}, **TOPIC),
    "message_thread_id a string": changed("message.message_thread_id", "77", **TOPIC),
    "message_thread_id true": changed("message.message_thread_id", True, **TOPIC),
    "message_thread_id negative": changed("message.message_thread_id", -77, **TOPIC),
    "text a list": changed("message.text", ["hello"]),
    "text a number": changed("message.text", 5),
    "caption a list": changed("message.caption", ["look"], text=None),
    "reply_to_message.message_id null": changed(
        "message.reply_to_message.message_id", None, **REPLIED
    ),
    "reply_to_message.message_id a string": changed(
        "message.reply_to_message.message_id", "7", **REPLIED
    ),
    "update_id true": changed("update_id", True),
}


@pytest.fixture
async def platform(
    fake_telegram: FakeTelegram, redis_client: aioredis.Redis
) -> AsyncIterator[TelegramPlatform]:
    async with webhook_platform(fake_telegram, redis_client, SECRET) as telegram:
        yield telegram


@pytest.fixture
async def client(
    platform: TelegramPlatform, redis_client: aioredis.Redis
) -> AsyncIterator[httpx.AsyncClient]:
    async with webhook_client(platform, redis_client) as http:
        yield http


async def stored_texts(redis: aioredis.Redis) -> list[str]:
    store = SessionStore(redis)
    entries = await store.history(SESSION) + await store.inbox(SESSION)
    return [str(entry["text"]) for entry in entries]


def post(client: httpx.AsyncClient, body: dict[str, Any]) -> Any:
    return post_update(client, body, secret=SECRET)


async def test_webhook_updates_with_malformed_ids_are_dropped_with_one_line_each(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    assert len(CASES) >= 32
    stored, noisy = [], []
    for name, body in CASES.items():
        caplog.clear()
        with caplog.at_level(logging.INFO):
            response = await post(client, body)
        assert response.status_code == 200, name  # anything else and Telegram sends it again
        if await redis_client.dbsize():
            stored.append(name)
            await redis_client.flushdb()
        lines = [
            r.getMessage() for r in caplog.records if r.name.startswith(("adapters", "gateway"))
        ]
        if len(lines) != 1 or "\n" in lines[0] or SECRET in lines[0] or "hello" in lines[0]:
            noisy.append((name, lines))
    assert stored == [], f"{len(stored)} of {len(CASES)} malformed updates were stored"
    assert noisy == []
    assert (await post(client, update(500, "the control"))).status_code == 200
    assert await stored_texts(redis_client) == ["the control"]


async def test_polled_updates_with_malformed_ids_are_dropped_and_the_next_one_taken(
    fake_telegram: FakeTelegram, platform: TelegramPlatform, redis_client: aioredis.Redis
) -> None:
    for name, body in CASES.items():
        if not name.startswith("update_id"):  # the fake numbers the updates itself
            fake_telegram.queue_update({"message": body["message"]})
    fake_telegram.queue_update({"message": update(text="the control")["message"]})
    ingest = Ingest(platform.settings, redis_client)
    task = asyncio.create_task(platform.connect(ingest, Health(redis_client, "telegram")))
    try:
        # Telegram holds an update until an offset past it confirms that it was handled.
        await fake_telegram.wait_for(lambda: not fake_telegram.pending_updates or task.done())
        assert not task.done(), task.result()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert await stored_texts(redis_client) == ["the control"]
    assert await redis_client.xlen(Keys.jobs("telegram", 0)) == 1

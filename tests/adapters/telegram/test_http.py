"""POST /telegram/webhook in-process: the secret check, body handling, ingest into real Redis."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis
from starlette.applications import Starlette

from adapters.telegram import TelegramPlatform
from gateway.errors import ConfigError
from gateway.http.limits import MAX_BODY
from gateway.inbound.ingest import Ingest
from gateway.settings.env import load_settings
from gateway.state.session import SessionStore
from tests.fakes.telegram_api import FakeTelegram
from tests.support.redis_servers import free_port
from tests.support.telegram_helpers import post_update, webhook_client, webhook_platform

SECRET = "s3cret_Token-1"
ALICE = {"id": 42, "is_bot": False, "first_name": "Alice"}


def private_update(update_id: int, text: str = "hello") -> dict[str, Any]:
    return {
        "update_id": update_id,
        "message": {
            "message_id": update_id + 100,
            "date": 1700000000,
            "from": ALICE,
            "text": text,
            "chat": {"id": 42, "type": "private", "first_name": "Alice"},
        },
    }


async def stored_texts(redis: aioredis.Redis, session_key: str) -> list[str]:
    store = SessionStore(redis)
    entries = await store.history(session_key) + await store.inbox(session_key)
    return [str(entry["text"]) for entry in entries]


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


def post(
    client: httpx.AsyncClient,
    body: bytes | dict[str, Any],
    *,
    secret: str | None = SECRET,
    content_type: str = "application/json",
) -> Any:
    return post_update(client, body, secret=secret, content_type=content_type)


async def test_startup_registers_the_commands(
    fake_telegram: FakeTelegram, platform: TelegramPlatform
) -> None:
    registered = [c["command"] for c in fake_telegram.commands]
    assert registered == ["btw", "reset", "stop", "status", "usage", "config", "help"]


@pytest.mark.parametrize("secret", [None, "", "wrong", SECRET + "x"])
async def test_missing_or_wrong_secret_is_401_and_changes_nothing(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, secret: str | None
) -> None:
    response = await post(client, private_update(1), secret=secret)
    assert response.status_code == 401
    assert await redis_client.dbsize() == 0


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8"])
async def test_update_is_ingested(
    client: httpx.AsyncClient, redis_client: aioredis.Redis, content_type: str
) -> None:
    response = await post(client, private_update(5, "hi bot"), content_type=content_type)
    assert response.status_code == 200
    assert await stored_texts(redis_client, "telegram:123456:42") == ["hi bot"]


async def test_the_same_update_twice_is_stored_once(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    for _ in range(2):
        assert (await post(client, private_update(6, "once"))).status_code == 200
    assert await stored_texts(redis_client, "telegram:123456:42") == ["once"]


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[1, 2]",
        b'{"message": {}}',
        b'{"update_id": "x"}',
        b'{"update_id": true}',
        b'{"update_id": 5, "message": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"update_id": 5, "message": ' + b"[" * 500 + b"]" * 500 + b"}",
        b'{"update_id": 5, "message": [1, 2]}',
        b'{"update_id": 5, "message": {"message_id": 1, "date": 1, "chat": "42", "text": "hi"}}',
        b'{"update_id": 5, "message": {"message_id": 1, "text": "caf\xe9"}}',
        b'{"update_id": 5, "message": {"message_id": 1, "date": NaN}}',
    ],
)
async def test_malformed_update_is_acknowledged_and_dropped_logged_once(
    client: httpx.AsyncClient,
    redis_client: aioredis.Redis,
    caplog: pytest.LogCaptureFixture,
    body: bytes,
) -> None:
    with caplog.at_level(logging.INFO):
        response = await post(client, body)
    assert response.status_code == 200  # Telegram would retry anything else, and hold the queue
    lines = [r for r in caplog.records if r.name.startswith(("adapters", "gateway"))]
    assert len(lines) == 1 and "\n" not in lines[0].getMessage() and not lines[0].exc_info
    assert SECRET not in lines[0].getMessage()
    assert await redis_client.dbsize() == 0


async def test_a_reply_chain_nested_deeper_than_telegram_sends_is_dropped(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    message = private_update(1)["message"]
    for n in range(2, 200):
        message = {**private_update(n)["message"], "reply_to_message": message}
    response = await post(client, {"update_id": 500, "message": message})
    assert response.status_code == 200
    assert await redis_client.dbsize() == 0


async def test_a_chunked_body_over_the_limit_is_413_and_read_no_further(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(1024):  # 64 MiB, if anyone kept reading
            sent += 64 * 1024
            yield b"x" * (64 * 1024)

    headers = {"content-type": "application/json", "X-Telegram-Bot-Api-Secret-Token": SECRET}
    response = await client.post("/telegram/webhook", content=chunks(), headers=headers)
    assert response.status_code == 413
    assert sent <= MAX_BODY + 2 * 64 * 1024
    assert await redis_client.dbsize() == 0


async def test_other_content_types_are_refused(client: httpx.AsyncClient) -> None:
    response = await post(client, private_update(7), content_type="text/plain")
    assert response.status_code == 415


async def test_updates_that_are_not_messages_are_acknowledged(
    client: httpx.AsyncClient, redis_client: aioredis.Redis
) -> None:
    edited = {"update_id": 8, "edited_message": private_update(8)["message"]}
    assert (await post(client, edited)).status_code == 200
    assert await stored_texts(redis_client, "telegram:123456:42") == []


def test_webhook_mode_needs_the_secret(redis_client: aioredis.Redis) -> None:
    settings = load_settings(TELEGRAM_BOT_TOKEN="1:x")
    telegram = TelegramPlatform(settings, redis_client)
    assert not telegram.uses_http()
    with pytest.raises(ConfigError, match="TELEGRAM_WEBHOOK_SECRET"):
        telegram.validate("http")
    telegram.validate("connect")
    telegram.validate("send")


def test_everything_needs_the_token(redis_client: aioredis.Redis) -> None:
    telegram = TelegramPlatform(load_settings(TELEGRAM_WEBHOOK_SECRET=SECRET), redis_client)
    assert not telegram.uses_http()
    with pytest.raises(ConfigError, match="TELEGRAM_BOT_TOKEN"):
        telegram.validate("send")


async def test_update_that_cannot_be_stored_is_503_so_telegram_retries(
    platform: TelegramPlatform,
) -> None:
    dead = aioredis.Redis(port=free_port(), socket_connect_timeout=0.5)
    app = Starlette(routes=list(platform.routes(Ingest(platform.settings, dead))))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        response = await post(http, private_update(9))
    await dead.aclose()
    assert response.status_code == 503

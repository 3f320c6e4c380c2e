"""Long polling in-process: webhook deleted first, updates ingested, offsets confirm them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from adapters.telegram import TelegramPlatform
from adapters.telegram.clicks import Clicks
from adapters.telegram.client import BotClient
from adapters.telegram.connection import Poller
from adapters.telegram.inbound import to_inbound
from gateway.inbound.ingest import Ingest
from gateway.settings.env import load_settings
from gateway.state.health import Health
from gateway.state.keys import Keys
from gateway.state.session import SessionStore
from tests.fakes.telegram_api import FakeTelegram
from tests.support.redis_servers import free_port

ALICE = {"id": 42, "is_bot": False, "first_name": "Alice"}


def private_message(message_id: int, text: str) -> dict[str, Any]:
    return {
        "message": {
            "message_id": message_id,
            "date": 1700000000,
            "from": ALICE,
            "text": text,
            "chat": {"id": 42, "type": "private"},
        }
    }


async def inbox_texts(redis: aioredis.Redis) -> list[str]:
    store = SessionStore(redis)
    key = "telegram:123456:42"
    return [str(e["text"]) for e in await store.history(key) + await store.inbox(key)]


async def until(condition: Any, within: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + within
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never became true"
        await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def polling_context(
    fake_telegram: FakeTelegram, redis: aioredis.Redis
) -> AsyncIterator[TelegramPlatform]:
    """`gateway telegram`'s calls in-process: validate, startup, connect until cancelled."""
    fake_telegram.webhook_url = "https://old.example/telegram/webhook"
    settings = load_settings(
        TELEGRAM_BOT_TOKEN=fake_telegram.token,
        TELEGRAM_API_URL=fake_telegram.base_url,
        TELEGRAM_ALLOW_ALL=True,
    )
    telegram = TelegramPlatform(settings, redis)
    telegram.validate("connect")
    await telegram.startup()
    health = Health(redis, "telegram-polling")
    task = asyncio.create_task(telegram.connect(Ingest(settings, redis), health))
    try:
        yield telegram
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await telegram.shutdown()


@pytest.fixture
async def polling(
    fake_telegram: FakeTelegram, redis_client: aioredis.Redis
) -> AsyncIterator[TelegramPlatform]:
    async with polling_context(fake_telegram, redis_client) as telegram:
        yield telegram


async def test_webhook_is_deleted_first_and_said_so(
    fake_telegram: FakeTelegram, redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="adapters.telegram.connection"):
        async with polling_context(fake_telegram, redis_client):
            await fake_telegram.wait_for(lambda: fake_telegram.calls_to("getUpdates", ok_only=True))
    methods = [c.method for c in fake_telegram.calls]
    assert methods.index("deleteWebhook") < methods.index("getUpdates")
    assert fake_telegram.webhook_url is None
    assert any("deleted any webhook" in r.getMessage() for r in caplog.records)


async def test_updates_are_ingested_once_and_confirmed(
    fake_telegram: FakeTelegram, redis_client: aioredis.Redis, polling: TelegramPlatform
) -> None:
    first = fake_telegram.queue_update(private_message(1, "one"))
    fake_telegram.queue_update(private_message(2, "two"))
    await until(lambda: _has(redis_client, ["one", "two"]))
    # The next getUpdates confirms both: its offset is past the last update.
    await fake_telegram.wait_for(
        lambda: any(
            c.params.get("offset") == first + 2 for c in fake_telegram.calls_to("getUpdates")
        )
    )
    fake_telegram.queue_update(
        {"update_id": first, **private_message(1, "one")}
    )  # Telegram re-sends
    fake_telegram.queue_update(private_message(3, "three"))
    await until(lambda: _has(redis_client, ["one", "two", "three"]))
    assert await inbox_texts(redis_client) == ["one", "two", "three"]


async def test_health_is_reported_up(
    fake_telegram: FakeTelegram, redis_client: aioredis.Redis, polling: TelegramPlatform
) -> None:
    async def reported() -> bool:
        raw = await redis_client.hget(Keys.HEALTH, "telegram-polling")
        return raw is not None and json.loads(raw)["up"] is True

    await until(reported)


async def test_a_flood_wait_on_getupdates_is_waited_out(
    fake_telegram: FakeTelegram, redis_client: aioredis.Redis
) -> None:
    fake_telegram.fail_next("getUpdates", status=429, retry_after=1)
    async with polling_context(fake_telegram, redis_client):
        fake_telegram.queue_update(private_message(4, "after the wait"))
        await until(lambda: _has(redis_client, ["after the wait"]))
    refused, answered = (c for c in fake_telegram.calls_to("getUpdates")[:2])
    assert refused.status == 429 and answered.at - refused.at >= 0.95


async def _has(redis: aioredis.Redis, texts: list[str]) -> bool:
    return await inbox_texts(redis) == texts


async def test_an_update_is_not_confirmed_while_ingest_fails(
    fake_telegram: FakeTelegram, redis_client: aioredis.Redis
) -> None:
    settings = load_settings(
        TELEGRAM_BOT_TOKEN=fake_telegram.token,
        TELEGRAM_API_URL=fake_telegram.base_url,
        TELEGRAM_ALLOW_ALL=True,
    )
    client = BotClient.build(fake_telegram.token, fake_telegram.base_url)
    dead = aioredis.Redis(port=free_port(), socket_connect_timeout=0.5)
    convert = partial(to_inbound, bot_id=fake_telegram.bot_id, bot_username=fake_telegram.username)
    ingest = Ingest(settings, dead)
    poller = Poller(
        client.bot,
        ingest,
        Health(redis_client, "telegram-polling"),
        convert,
        Clicks(client.bot, ingest, fake_telegram.bot_id),
        poll_timeout=1,
    )
    update_id = fake_telegram.queue_update(private_message(9, "kept for later"))
    task = asyncio.create_task(poller.run())
    try:
        # Fetched, not stored, so asked for again from the same offset: nothing is lost.
        await fake_telegram.wait_for(
            lambda: len(fake_telegram.calls_to("getUpdates", ok_only=True)) >= 2
        )
        assert poller.offset is None and not task.done()
        assert update_id in fake_telegram.pending_updates
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.aclose()
        await dead.aclose()


def test_importing_the_adapter_leaves_the_process_as_it_was() -> None:
    """No environment variable set and no logger's level changed by an import."""
    code = (
        "import logging, os, adapters.telegram, adapters.telegram.client;"
        "print('PTB_TIMEDELTA' in os.environ, logging.getLogger('httpx').level)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PTB_TIMEDELTA"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.stdout.split() == ["False", str(logging.NOTSET)], result.stderr


def test_the_platform_prepares_the_process_when_made(
    redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PTB_TIMEDELTA on unless the operator set it, and httpx's URL-with-token lines off."""
    monkeypatch.delenv("PTB_TIMEDELTA")
    httpx_log = logging.getLogger("httpx")
    monkeypatch.setattr(httpx_log, "level", logging.NOTSET)
    settings = load_settings(TELEGRAM_BOT_TOKEN="1:test", TELEGRAM_ALLOW_ALL=True)
    TelegramPlatform(settings, redis_client)
    assert os.environ["PTB_TIMEDELTA"] == "true"
    assert httpx_log.level == logging.WARNING

    monkeypatch.setenv("PTB_TIMEDELTA", "false")
    TelegramPlatform(settings, redis_client)
    assert os.environ["PTB_TIMEDELTA"] == "false"

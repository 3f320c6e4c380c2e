"""Helpers of the Telegram tests: gateway subprocesses, update builders, the webhook in-process."""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis

from adapters.telegram import TelegramPlatform
from gateway.http.app import create_app
from gateway.inbound.ingest import Ingest
from gateway.settings.env import load_settings
from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.support import processes
from tests.support.processes import request_text as request_text

SECRET = "e2e_webhook-secret"
ALICE = {"id": 42, "is_bot": False, "first_name": "Alice"}
BOB = {"id": 43, "is_bot": False, "first_name": "Bob", "last_name": "Stone"}
GROUP = {"id": -1001234, "type": "supergroup", "title": "Team", "is_forum": True}
_message_ids = itertools.count(100)


class Gateway(processes.Processes):
    @property
    def webhook_url(self) -> str:
        return self.url("/telegram/webhook")


def environment(
    redis_url: str, llm: FakeLLM, fake: FakeTelegram, port: int, **extra: str
) -> dict[str, str]:
    """The core's test settings plus Telegram's."""
    values = {
        "TELEGRAM_BOT_TOKEN": fake.token,
        "TELEGRAM_API_URL": fake.base_url,
        "TELEGRAM_WEBHOOK_SECRET": SECRET,
        "GATEWAY_ALLOWED_USERS": "telegram:42,telegram:43",
        "TELEGRAM_EDIT_INTERVAL": "0.3",
        "TELEGRAM_GROUP_EDIT_INTERVAL": "0.5",
    }
    values.update(extra)
    return processes.environment(redis_url, llm.api_base, port, **values)


def gateway(
    tmp_path: Path, env: dict[str, str], *commands: str
) -> contextlib.AbstractAsyncContextManager[Gateway]:
    """Start `gateway <command>` for each command; stop them all (SIGTERM) on exit."""
    return processes.gateway(tmp_path, env, *commands, kind=Gateway)


def message(
    text: str,
    *,
    user: dict[str, Any] = ALICE,
    chat: dict[str, Any] | None = None,
    topic: int | None = None,
    entities: list[dict[str, Any]] | None = None,
    message_id: int | None = None,
) -> dict[str, Any]:
    """An update carrying one message (without update_id: the fake or the caller adds it)."""
    body: dict[str, Any] = {
        "message_id": message_id or next(_message_ids),
        "date": int(time.time()),
        "from": user,
        "text": text,
        "chat": chat or {"id": user["id"], "type": "private", "first_name": user["first_name"]},
    }
    if entities:
        body["entities"] = entities
    if topic is not None:
        body.update(
            message_thread_id=topic,
            is_topic_message=True,
            reply_to_message={
                "message_id": topic,
                "date": 1700000000,
                "chat": body["chat"],
                "from": user,
                "forum_topic_created": {"name": "Plans", "icon_color": 7322096},
            },
        )
    return {"message": body}


def mention_entities(text: str, username: str) -> list[dict[str, Any]]:
    return [{"type": "mention", "offset": text.index("@" + username), "length": len(username) + 1}]


def command_entities(text: str) -> list[dict[str, Any]]:
    return [{"type": "bot_command", "offset": 0, "length": len(text.split(" ")[0])}]


@contextlib.asynccontextmanager
async def webhook_platform(
    fake: FakeTelegram, redis: aioredis.Redis, secret: str
) -> AsyncIterator[TelegramPlatform]:
    """The Telegram platform on the fake Bot API, started, open to everyone."""
    settings = load_settings(
        TELEGRAM_BOT_TOKEN=fake.token,
        TELEGRAM_WEBHOOK_SECRET=secret,
        TELEGRAM_API_URL=fake.base_url,
        TELEGRAM_ALLOW_ALL=True,
    )
    telegram = TelegramPlatform(settings, redis)
    await telegram.startup()
    try:
        yield telegram
    finally:
        await telegram.shutdown()


@contextlib.asynccontextmanager
async def webhook_client(
    platform: TelegramPlatform, redis: aioredis.Redis
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of `gateway web`'s app, in-process, serving `platform`'s webhook."""
    app = create_app(redis, Ingest(platform.settings, redis), [platform], ["telegram"])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        yield http


def post_update(
    client: httpx.AsyncClient,
    body: bytes | dict[str, Any],
    *,
    secret: str | None,
    content_type: str = "application/json",
) -> Any:
    """POST /telegram/webhook with the secret-token header (none when `secret` is None)."""
    headers = {"content-type": content_type}
    if secret is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post("/telegram/webhook", content=content, headers=headers)

"""Helpers of the Telegram end-to-end tests: gateway subprocesses and update builders."""

from __future__ import annotations

import contextlib
import itertools
import time
from pathlib import Path
from typing import Any

from tests import processes
from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.processes import request_text as request_text

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

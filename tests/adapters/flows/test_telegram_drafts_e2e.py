"""End to end, Telegram's drafts: `gateway web` + `gateway worker` as subprocesses, the real
python-telegram-bot talking to the fake Bot API, a real Redis, the fake model.

A private chat's reply streams as a draft and ends as one real message; a chat that
refuses drafts is answered edited in place, and its next reply does not ask again.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis.asyncio as aioredis

from adapters.buttons import feedback_payload
from gateway.state.keys import Keys
from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram, Message
from tests.support.redis_servers import free_port
from tests.support.telegram_helpers import (
    GROUP,
    SECRET,
    Gateway,
    environment,
    gateway,
    mention_entities,
    message,
)

pytestmark = pytest.mark.timeout(150)  # gateway subprocesses, as in test_telegram_e2e.py

ALICE_CHAT = 42
FEEDBACK = {
    "inline_keyboard": [
        [
            {"text": "👍", "callback_data": feedback_payload("up")},
            {"text": "👎", "callback_data": feedback_payload("down")},
        ]
    ]
}


@pytest.fixture
async def web(
    tmp_path: Path, redis_url: str, llm: FakeLLM, fake_telegram: FakeTelegram
) -> AsyncIterator[Gateway]:
    llm.duration = 2.0  # long enough for the reply to be shown while it is written
    env = environment(redis_url, llm, fake_telegram, free_port(), GATEWAY_FEEDBACK="telegram")
    async with gateway(tmp_path, env, "web", "worker") as processes:
        yield processes


async def deliver(web: Gateway, update: dict[str, Any], update_id: int) -> None:
    body = json.dumps({"update_id": update_id, **update})
    headers = {"content-type": "application/json", "X-Telegram-Bot-Api-Secret-Token": SECRET}
    async with httpx.AsyncClient() as client:
        response = await client.post(web.webhook_url, content=body, headers=headers)
    assert response.status_code == 200


async def answered(fake_telegram: FakeTelegram, chat_id: int, contains: str) -> Message:
    def found() -> list[Message]:
        return [m for m in fake_telegram.messages_in(chat_id) if contains in m.text]

    await fake_telegram.wait_for(lambda: found() and found()[0].reply_markup, within=40)
    [reply] = found()
    return reply


async def counted(redis: aioredis.Redis, field: str, expected: str | None) -> None:
    """Until the metrics hold `expected` under `field` (the worker counts a reply just
    after its last call to Telegram)."""
    deadline = time.monotonic() + 10
    while (found := await redis.hget(Keys.METRICS, field)) != expected:
        assert time.monotonic() < deadline, f"{field} is {found}, not {expected}"
        await asyncio.sleep(0.05)


async def test_a_private_reply_is_drafted_then_sent_once_with_feedback_buttons(
    web: Gateway, fake_telegram: FakeTelegram, llm: FakeLLM, redis_client: aioredis.Redis
) -> None:
    llm.reply = " ".join(f"word{i}" for i in range(40))
    await deliver(web, message("tell me a lot"), 9101)
    reply = await answered(fake_telegram, ALICE_CHAT, "word39")
    assert reply.text == llm.reply and reply.reply_markup == FEEDBACK
    [draft] = fake_telegram.drafts_in(ALICE_CHAT)
    assert len(draft.history) >= 2 and all(llm.reply.startswith(t) for t in draft.history)
    assert draft.ended_by == reply.message_id
    assert len(fake_telegram.calls_to("sendMessage")) == 1
    assert fake_telegram.calls_to("editMessageText") == []
    await counted(redis_client, "replies|telegram|draft", "1")


async def test_a_group_reply_is_edited_in_place_with_feedback_buttons(
    web: Gateway, fake_telegram: FakeTelegram, llm: FakeLLM, redis_client: aioredis.Redis
) -> None:
    llm.reply = " ".join(f"item{i}" for i in range(40))
    text = f"@{fake_telegram.username} list things"
    update = message(text, chat=GROUP, entities=mention_entities(text, fake_telegram.username))
    await deliver(web, update, 9201)
    reply = await answered(fake_telegram, GROUP["id"], "item39")
    assert len(reply.history) >= 2 and reply.reply_markup == FEEDBACK
    assert fake_telegram.calls_to("sendMessageDraft") == []
    await counted(redis_client, "replies|telegram|edit", "1")


async def test_a_chat_that_refuses_drafts_is_edited_in_place_and_not_asked_again(
    web: Gateway, fake_telegram: FakeTelegram, llm: FakeLLM, redis_client: aioredis.Redis
) -> None:
    fake_telegram.refuse_drafts(ALICE_CHAT)
    llm.reply = " ".join(f"part{i}" for i in range(40))
    await deliver(web, message("first question"), 9301)
    first = await answered(fake_telegram, ALICE_CHAT, "part39")
    assert first.text == llm.reply and len(first.history) >= 2
    [refusal] = fake_telegram.calls_to("sendMessageDraft")
    assert refusal.status == 400
    llm.reply = "the second answer"
    await deliver(web, message("second question"), 9302)
    await answered(fake_telegram, ALICE_CHAT, "the second answer")
    assert len(fake_telegram.calls_to("sendMessageDraft")) == 1  # remembered for the chat
    assert len(fake_telegram.messages_in(ALICE_CHAT)) == 2
    await counted(redis_client, "replies|telegram|edit", "2")
    assert await redis_client.hget(Keys.METRICS, "replies|telegram|draft") is None
    fallbacks = "stream_fallbacks|telegram|TEXTDRAFT_PEER_INVALID"
    await counted(redis_client, fallbacks, "1")

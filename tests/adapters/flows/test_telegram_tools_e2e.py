"""End to end on Telegram with a tool that needs approval: `gateway web` + `gateway worker`
as subprocesses, python-telegram-bot against the fake Bot API, a real MCP server over
stdio, the fake model asking for the call; the click comes back as a callback query."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.llm_server import FakeLLM
from tests.fakes.llm_tools import FakeToolCall, tools_then_text
from tests.fakes.telegram_api import FakeTelegram, Message
from tests.support.cli_runs import ROOT
from tests.support.redis_servers import free_port
from tests.support.telegram_helpers import SECRET, Gateway, environment, gateway, message
from tests.support.tool_servers import lines, new_effects, write_config

pytestmark = pytest.mark.timeout(150)

ALICE_CHAT = 42


async def post(web: Gateway, update: dict[str, Any]) -> None:
    headers = {"content-type": "application/json", "X-Telegram-Bot-Api-Secret-Token": SECRET}
    async with httpx.AsyncClient() as client:
        response = await client.post(web.webhook_url, content=json.dumps(update), headers=headers)
    assert response.status_code == 200


def keyboard_message(fake_telegram: FakeTelegram) -> Message | None:
    return next((m for m in fake_telegram.messages_in(ALICE_CHAT) if m.reply_markup), None)


async def test_a_destructive_tool_runs_after_the_asker_taps_approve(
    tmp_path: Path, redis_url: str, llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    effects = new_effects(tmp_path)
    config = write_config(tmp_path, effects, cwd=str(ROOT))  # the gateway runs elsewhere
    llm.reply = tools_then_text([FakeToolCall("desk__delete_item", '{"name": "draft"}')])
    env = environment(redis_url, llm, fake_telegram, free_port(), GATEWAY_MCP_CONFIG=str(config))
    async with gateway(tmp_path, env, "web", "worker") as web:
        await post(web, {"update_id": 1, **message("please delete the draft")})
        await fake_telegram.wait_for(lambda: keyboard_message(fake_telegram) is not None, within=60)
        prompt = keyboard_message(fake_telegram)
        assert prompt is not None and "desk__delete_item" in prompt.text
        button = prompt.reply_markup["inline_keyboard"][0][0]  # type: ignore[index]
        assert lines(effects) == []
        click = {
            "update_id": 2,
            "callback_query": {
                "id": "77001",
                "from": {"id": ALICE_CHAT, "is_bot": False, "first_name": "Alice"},
                "chat_instance": "-1",
                "data": button["callback_data"],
                "message": {
                    "message_id": prompt.message_id,
                    "date": 1700000000,
                    "chat": {"id": ALICE_CHAT, "type": "private", "first_name": "Alice"},
                    "text": prompt.text,
                },
            },
        }
        await post(web, click)

        def answered() -> bool:
            return any("deleted draft" in m.text for m in fake_telegram.messages_in(ALICE_CHAT))

        await fake_telegram.wait_for(answered, within=60)
        assert lines(effects) == ["deleted draft"]
        assert keyboard_message(fake_telegram) is None  # the request was settled, its buttons gone
        assert fake_telegram.callback_answers  # the tap was acknowledged

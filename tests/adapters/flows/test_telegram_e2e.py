"""End to end: `gateway web` + `gateway worker` (and `gateway telegram`) as subprocesses,
the real python-telegram-bot talking to the fake Bot API, the fake model behind litellm."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.inbound.pairing import ALPHABET, CODE_LENGTH
from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram, Message
from tests.support.redis_servers import free_port
from tests.support.telegram_helpers import (
    BOB,
    GROUP,
    SECRET,
    Gateway,
    command_entities,
    environment,
    gateway,
    mention_entities,
    message,
    request_text,
)

# Each test starts its own gateway processes, and a worker's first turn imports litellm
# (about 10 s on a cold machine): more room than the suite's default per-test timeout.
pytestmark = pytest.mark.timeout(150)

_update_ids = itertools.count(1)
ALICE_CHAT = 42


@pytest.fixture
async def web(
    tmp_path: Path, redis_url: str, llm: FakeLLM, fake_telegram: FakeTelegram
) -> AsyncIterator[Gateway]:
    env = environment(redis_url, llm, fake_telegram, free_port())
    async with gateway(tmp_path, env, "web", "worker") as processes:
        yield processes


async def deliver(
    web: Gateway,
    update: dict[str, Any],
    *,
    secret: str | None = SECRET,
    update_id: int | None = None,
) -> httpx.Response:
    """POST an update to the webhook the way Telegram does."""
    body = {"update_id": update_id or next(_update_ids), **update}
    headers = {"content-type": "application/json"}
    if secret is not None:
        headers["X-Telegram-Bot-Api-Secret-Token"] = secret
    async with httpx.AsyncClient() as client:
        return await client.post(web.webhook_url, content=json.dumps(body), headers=headers)


def bot_messages(fake_telegram: FakeTelegram, chat_id: int) -> list[Message]:
    return fake_telegram.messages_in(chat_id)


async def answered(
    fake_telegram: FakeTelegram, chat_id: int, count: int = 1, contains: str = "fake reply to:"
) -> list[Message]:
    """Wait until `count` bot messages in the chat hold `contains` in their final text."""

    def done() -> bool:
        return len([m for m in fake_telegram.messages_in(chat_id) if contains in m.text]) >= count

    await fake_telegram.wait_for(done, within=30)
    return [m for m in fake_telegram.messages_in(chat_id) if contains in m.text]


async def test_private_message_is_answered(
    web: Gateway, fake_telegram: FakeTelegram, llm: FakeLLM
) -> None:
    response = await deliver(web, message("hello there"))
    assert response.status_code == 200
    # The reply's first piece may be posted before the rest: wait for the whole text.
    [reply] = await answered(fake_telegram, ALICE_CHAT, contains="fake reply to: hello there")
    assert reply.reply_to is None and reply.thread_id is None
    registered = [c["command"] for c in fake_telegram.commands]
    assert registered == ["btw", "reset", "stop", "status", "usage", "config", "help"]
    assert fake_telegram.token not in web.output()


async def test_group_message_needs_a_mention(
    web: Gateway, fake_telegram: FakeTelegram, llm: FakeLLM
) -> None:
    assert (await deliver(web, message("just chatting", chat=GROUP))).status_code == 200
    text = f"@{fake_telegram.username} what is the plan?"
    mentioned = message(text, chat=GROUP, entities=mention_entities(text, fake_telegram.username))
    assert (await deliver(web, mentioned)).status_code == 200
    [reply] = await answered(fake_telegram, GROUP["id"], contains="what is the plan?")
    assert f"@{fake_telegram.username}" not in reply.text
    assert reply.reply_to == mentioned["message"]["message_id"]
    assert len(llm.requests) == 1 and "just chatting" not in request_text(llm.requests[0])


async def test_topic_message_is_answered_in_its_topic(
    web: Gateway, fake_telegram: FakeTelegram
) -> None:
    text = f"@{fake_telegram.username} hi from the topic"
    await deliver(
        web,
        message(
            text, chat=GROUP, topic=77, entities=mention_entities(text, fake_telegram.username)
        ),
    )
    [reply] = await answered(fake_telegram, GROUP["id"])
    assert reply.thread_id == 77
    assert all(
        c.params.get("message_thread_id") == 77 for c in fake_telegram.calls_to("sendChatAction")
    )


async def test_the_same_update_twice_gets_one_reply(
    web: Gateway, fake_telegram: FakeTelegram, llm: FakeLLM
) -> None:
    update = message("only once please")
    for _ in range(2):
        assert (await deliver(web, update, update_id=5000)).status_code == 200
    await answered(fake_telegram, ALICE_CHAT, contains="only once please")
    await deliver(web, message("and now something else"))
    await answered(fake_telegram, ALICE_CHAT, contains="something else")
    assert len(bot_messages(fake_telegram, ALICE_CHAT)) == 2
    assert len(llm.requests) == 2  # one turn per distinct message, none for the retry


async def test_wrong_or_missing_secret_is_401_and_no_model_call(
    web: Gateway, fake_telegram: FakeTelegram, llm: FakeLLM
) -> None:
    for secret in (None, "wrong-secret"):
        response = await deliver(web, message("let me in"), secret=secret)
        assert response.status_code == 401
    await deliver(web, message("the real one"))
    await answered(fake_telegram, ALICE_CHAT)
    assert len(llm.requests) == 1 and "let me in" not in request_text(llm.requests[0])


async def test_unknown_user_gets_a_one_line_refusal_and_no_model_call(
    web: Gateway, fake_telegram: FakeTelegram, llm: FakeLLM
) -> None:
    stranger = {"id": 777, "is_bot": False, "first_name": "Eve"}
    await deliver(web, message("hi", user=stranger))
    [refusal] = await answered(fake_telegram, 777, contains="777")
    assert "\n" not in refusal.text and "telegram:777" in refusal.text
    await deliver(web, message("me again", user=stranger))
    await deliver(web, message("hello"))
    await answered(fake_telegram, ALICE_CHAT)
    assert len(bot_messages(fake_telegram, 777)) == 1
    assert all("me again" not in request_text(r) for r in llm.requests)
    assert len(llm.requests) == 1


async def test_a_stranger_let_in_by_an_admins_approve_in_a_dm_is_answered(
    tmp_path: Path, redis_url: str, llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    env = environment(redis_url, llm, fake_telegram, free_port(), GATEWAY_PAIRING="1")
    stranger = {"id": 778, "is_bot": False, "first_name": "Eve"}
    async with gateway(tmp_path, env, "web", "worker") as web:
        await deliver(web, message("knock knock", user=stranger))
        [offer] = await answered(fake_telegram, 778, contains="pairing code")
        code = re.findall(rf"\b[{ALPHABET}]{{{CODE_LENGTH}}}\b", offer.text)[0]
        command = f"/approve {code}"
        await deliver(web, message(command, entities=command_entities(command)))
        [approved] = await answered(fake_telegram, ALICE_CHAT, contains="Approved")
        assert approved.text == "Approved: telegram:778 may use the bot now."  # `` as code
        await deliver(web, message("now may I?", user=stranger))
        await answered(fake_telegram, 778, contains="fake reply to: now may I?")
    [request] = llm.requests  # the refused message never reached the model
    assert "knock knock" not in request_text(request)


async def test_btw_in_a_topic_is_a_reply_in_the_topic_and_stays_out_of_history(
    web: Gateway, fake_telegram: FakeTelegram, llm: FakeLLM
) -> None:
    first = f"@{fake_telegram.username} we chose the blue logo"
    await deliver(
        web,
        message(
            first,
            chat=GROUP,
            topic=77,
            user=BOB,
            entities=mention_entities(first, fake_telegram.username),
        ),
    )
    await answered(fake_telegram, GROUP["id"])
    side = f"/btw@{fake_telegram.username} which logo did we choose?"
    side_update = message(side, chat=GROUP, topic=77, entities=command_entities(side))
    await deliver(web, side_update)
    await fake_telegram.wait_for(
        lambda: len(fake_telegram.messages_in(GROUP["id"])) >= 2, within=30
    )
    side_reply = fake_telegram.messages_in(GROUP["id"])[1]
    assert side_reply.thread_id == 77
    assert side_reply.reply_to == side_update["message"]["message_id"]
    later = f"@{fake_telegram.username} next topic"
    await deliver(
        web,
        message(
            later, chat=GROUP, topic=77, entities=mention_entities(later, fake_telegram.username)
        ),
    )
    await answered(fake_telegram, GROUP["id"], contains="next topic")
    [main_turn] = [request_text(r) for r in llm.requests if "next topic" in request_text(r)]
    assert "next topic" in main_turn and "we chose the blue logo" in main_turn
    assert "which logo did we choose" not in main_turn
    assert side_reply.text not in main_turn


@pytest.mark.parametrize(
    ("method", "chat"),
    [("sendMessageDraft", None), ("editMessageText", GROUP)],
    ids=["private-draft", "group-edit"],
)
async def test_flood_wait_mid_stream_sends_nothing_during_the_wait_and_ends_complete(
    tmp_path: Path,
    redis_url: str,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
    method: str,
    chat: dict[str, Any] | None,
) -> None:
    """A 429 on the private chat's drafts, or on the group's edits."""
    words = [f"word{i}" for i in range(60)]
    llm.reply = " ".join(words)
    llm.duration = 4.0
    fake_telegram.fail_next(method, status=429, retry_after=2)
    chat_id = ALICE_CHAT if chat is None else chat["id"]
    text = f"@{fake_telegram.username} write a long answer"
    entities = mention_entities(text, fake_telegram.username) if chat else None
    env = environment(redis_url, llm, fake_telegram, free_port())
    async with gateway(tmp_path, env, "web", "worker") as processes:
        await deliver(processes, message(text, chat=chat, entities=entities))
        await fake_telegram.wait_for(
            lambda: any(m.text == llm.reply for m in fake_telegram.messages_in(chat_id)),
            within=40,
        )
    [refused] = [c for c in fake_telegram.calls if c.status == 429]
    assert refused.method == method
    into_chat = [
        c for c in fake_telegram.calls if c.params.get("chat_id") == chat_id and c is not refused
    ]
    during = [c for c in into_chat if refused.at < c.at < refused.at + 2.0]
    assert during == [], [c.method for c in during]
    assert any(c.at >= refused.at + 2.0 for c in into_chat)
    assert len(fake_telegram.messages_in(chat_id)) == 1


async def test_long_answer_with_code_arrives_in_two_messages_with_balanced_code_blocks(
    tmp_path: Path, redis_url: str, llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    code = "\n".join(f"value_{i:03d} = compute({i}) + offset  # step {i}" for i in range(140))
    llm.reply = f"Here is the script:\n\n```python\n{code}\n```\n\nThat is all."
    assert 5500 < len(llm.reply) < 6500
    env = environment(redis_url, llm, fake_telegram, free_port())
    async with gateway(tmp_path, env, "web", "worker") as processes:
        await deliver(processes, message("give me the script"))
        await fake_telegram.wait_for(
            lambda: any("That is all." in m.text for m in fake_telegram.messages_in(ALICE_CHAT)),
            within=40,
        )
    first, second = fake_telegram.messages_in(ALICE_CHAT)
    for part in (first, second):
        assert part.html.count("<pre>") == part.html.count("</pre>") == 1
    assert first.html.endswith("</code></pre>")
    assert second.html.startswith('<pre><code class="language-python">')
    shown = first.text + "\n" + second.text
    assert all(line in shown for line in code.split("\n"))
    assert second.text.endswith("That is all.")


async def test_polling_answers_once_and_deleted_the_webhook(
    tmp_path: Path, redis_url: str, llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    fake_telegram.webhook_url = "https://old.example/telegram/webhook"
    env = environment(redis_url, llm, fake_telegram, free_port())
    del env["TELEGRAM_WEBHOOK_SECRET"]
    async with gateway(tmp_path, env, "telegram", "worker") as processes:
        update_id = fake_telegram.queue_update(message("hello by polling"))
        await answered(fake_telegram, ALICE_CHAT, contains="hello by polling")
        fake_telegram.queue_update({"update_id": update_id, **message("hello by polling")})
        text = f"@{fake_telegram.username} group by polling"
        fake_telegram.queue_update(
            message(text, chat=GROUP, entities=mention_entities(text, fake_telegram.username))
        )
        await answered(fake_telegram, GROUP["id"], contains="group by polling")
        assert len(fake_telegram.messages_in(ALICE_CHAT)) == 1
        log = processes.output()
    assert fake_telegram.webhook_url is None
    assert "deleted any webhook" in log
    assert fake_telegram.token not in log

"""Approval requests on Telegram: the inline keyboard posted and removed, and clicks
(callback queries) over the webhook and long polling reaching `Ingest.decide`.

Real pieces: python-telegram-bot against the loopback fake, the webhook route in the
gateway's web app, the poller, the real Ingest on a real Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import redis.asyncio as aioredis

from adapters.telegram import TelegramPlatform
from adapters.telegram.client import BotClient
from adapters.telegram.sender import TelegramSender
from gateway.approvals.store import Status
from gateway.http.app import create_app
from gateway.inbound.ingest import CLOSED_TEXT, NOT_YOURS_TEXT, Ingest
from gateway.messages import Address
from gateway.settings.env import load_settings
from gateway.state.health import Health
from gateway.state.keys import Keys
from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.support.helpers import inbound
from tests.support.redis_servers import free_port
from tests.support.tool_servers import TIMED_OUT_RESULT, unanswered_confirmation

SECRET = "s3cret_Token-1"
ALICE = {"id": 42, "is_bot": False, "first_name": "Alice"}
BOB = {"id": 43, "is_bot": False, "first_name": "Bob"}
SESSION = "telegram:123456:42"
ADDRESS = Address(platform="telegram", workspace="123456", channel="42")
_ids = itertools.count(1)


def click(
    approval_id: str, *, approve: bool = True, user: dict[str, Any] = ALICE
) -> dict[str, Any]:
    """A callback_query update: a click on a button of the bot's message in chat 42."""
    number = next(_ids)
    return {
        "update_id": 7000 + number,
        "callback_query": {
            "id": str(900000 + number),
            "from": user,
            "chat_instance": "-555",
            "data": f"a:{approval_id}:{'y' if approve else 'n'}",
            "message": {
                "message_id": 5000,
                "date": 1700000000,
                "chat": {"id": 42, "type": "private", "first_name": "Alice"},
                "from": {"id": 123456, "is_bot": True, "first_name": "Gateway"},
                "text": "approve?",
            },
        },
    }


async def _until(condition: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not await condition():
            await asyncio.sleep(0.02)


async def _open(ingest: Ingest) -> str:
    return await ingest.approvals.open(
        SESSION, "0.0", "call-1", "files__delete", '{"path": "/srv/a"}', "42", ADDRESS, 600
    )


async def _status(ingest: Ingest, approval_id: str) -> Status | None:
    approval = await ingest.approvals.by_id(SESSION, approval_id)
    return approval.status if approval else None


async def _turn_jobs(redis: aioredis.Redis) -> list[dict[str, str]]:
    raw = await redis.xrange(Keys.jobs("telegram", 0))
    return [f for _, f in cast(list[tuple[str, dict[str, str]]], raw) if f["kind"] == "turn"]


def _settings(fake_telegram: FakeTelegram, **extra: Any) -> Any:
    return load_settings(
        _env_file=None,
        TELEGRAM_BOT_TOKEN=fake_telegram.token,
        TELEGRAM_API_URL=fake_telegram.base_url,
        TELEGRAM_ALLOW_ALL=True,
        **extra,
    )


# -- the sender ------------------------------------------------------------------------


async def test_the_request_is_posted_with_a_keyboard_and_settled_without_it(
    fake_telegram: FakeTelegram,
) -> None:
    sender = TelegramSender(
        BotClient.build(fake_telegram.token, fake_telegram.base_url),
        edit_interval=0.2,
        group_edit_interval=0.2,
    )
    try:
        message_id = await sender.ask_approval(ADDRESS, "Run **files__delete**?", "A" * 16)
        posted = fake_telegram.messages[(42, int(message_id))]
        assert posted.text == "Run files__delete?" and "<b>files__delete</b>" in posted.html
        assert posted.reply_markup == {
            "inline_keyboard": [
                [
                    {"text": "Approve", "callback_data": "a:" + "A" * 16 + ":y"},
                    {"text": "Decline", "callback_data": "a:" + "A" * 16 + ":n"},
                ]
            ]
        }
        await sender.settle_approval(ADDRESS, message_id, "Declined: **files__delete**.")
        assert posted.reply_markup is None and posted.text == "Declined: files__delete."
    finally:
        await sender.aclose()


# -- the webhook -----------------------------------------------------------------------


@pytest.fixture
async def webhook(
    fake_telegram: FakeTelegram, redis_client: aioredis.Redis
) -> AsyncIterator[tuple[httpx.AsyncClient, Ingest]]:
    settings = _settings(fake_telegram, TELEGRAM_WEBHOOK_SECRET=SECRET)
    telegram = TelegramPlatform(settings, redis_client)
    await telegram.startup()
    ingest = Ingest(settings, redis_client)
    app = create_app(redis_client, ingest, [telegram], ["telegram"])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        yield http, ingest
    await telegram.shutdown()


async def _post(http: httpx.AsyncClient, update: dict[str, Any]) -> httpx.Response:
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}
    return await http.post("/telegram/webhook", json=update, headers=headers)


async def test_the_askers_click_approves_enqueues_the_turn_and_is_answered(
    webhook: tuple[httpx.AsyncClient, Ingest],
    fake_telegram: FakeTelegram,
    redis_client: aioredis.Redis,
) -> None:
    http, ingest = webhook
    approval_id = await _open(ingest)
    update = click(approval_id)
    assert (await _post(http, update)).status_code == 200
    assert await _status(ingest, approval_id) == Status.APPROVED
    assert [job["session"] for job in await _turn_jobs(redis_client)] == [SESSION]
    query_id = update["callback_query"]["id"]
    assert [(a["callback_query_id"], a.get("text")) for a in fake_telegram.callback_answers] == [
        (query_id, None)
    ]


async def test_a_click_that_cannot_be_stored_is_503_and_its_redelivery_decides(
    fake_telegram: FakeTelegram, redis_client: aioredis.Redis
) -> None:
    settings = _settings(fake_telegram, TELEGRAM_WEBHOOK_SECRET=SECRET)
    telegram = TelegramPlatform(settings, redis_client)
    await telegram.startup()
    live = Ingest(settings, redis_client)
    dead = aioredis.Redis(port=free_port(), socket_connect_timeout=0.5)
    approval_id = await _open(live)
    update = click(approval_id)
    try:
        for ingest, answered in ((Ingest(settings, dead), 503), (live, 200)):
            app = create_app(redis_client, ingest, [telegram], ["telegram"])
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
                assert (await _post(http, update)).status_code == answered
            if answered == 503:  # nothing was decided: Telegram delivers the click again
                assert await _status(live, approval_id) == Status.PENDING
        assert await _status(live, approval_id) == Status.APPROVED
        assert [job["session"] for job in await _turn_jobs(redis_client)] == [SESSION]
    finally:
        await dead.aclose()
        await telegram.shutdown()


async def test_someone_elses_click_is_answered_with_the_refusal_and_changes_nothing(
    webhook: tuple[httpx.AsyncClient, Ingest],
    fake_telegram: FakeTelegram,
    redis_client: aioredis.Redis,
) -> None:
    http, ingest = webhook
    approval_id = await _open(ingest)
    assert (await _post(http, click(approval_id, user=BOB))).status_code == 200
    assert await _status(ingest, approval_id) == Status.PENDING
    assert await _turn_jobs(redis_client) == []
    assert [a.get("text") for a in fake_telegram.callback_answers] == [NOT_YOURS_TEXT]


async def test_a_decline_then_a_second_click_finds_it_closed(
    webhook: tuple[httpx.AsyncClient, Ingest], fake_telegram: FakeTelegram
) -> None:
    http, ingest = webhook
    approval_id = await _open(ingest)
    await _post(http, click(approval_id, approve=False))
    await _post(http, click(approval_id))
    assert await _status(ingest, approval_id) == Status.DECLINED
    assert [a.get("text") for a in fake_telegram.callback_answers] == [None, CLOSED_TEXT]


@pytest.mark.parametrize(
    "change",
    [
        {"data": "a:not valid!:y"},
        {"data": "something else"},
        {"from": {"id": 77, "is_bot": True, "first_name": "Other bot"}},
        {"from": {"id": -5, "is_bot": False, "first_name": "Negative"}},
    ],
)
async def test_a_bots_or_malformed_click_is_dropped_but_still_answered(
    webhook: tuple[httpx.AsyncClient, Ingest], fake_telegram: FakeTelegram, change: dict[str, Any]
) -> None:
    http, ingest = webhook
    approval_id = await _open(ingest)
    update = click(approval_id)
    update["callback_query"].update(change)
    assert (await _post(http, update)).status_code == 200
    assert await _status(ingest, approval_id) == Status.PENDING
    assert [a.get("text") for a in fake_telegram.callback_answers] == [None]


# -- long polling ----------------------------------------------------------------------


async def test_a_click_fetched_by_long_polling_is_decided_and_answered(
    fake_telegram: FakeTelegram, redis_client: aioredis.Redis
) -> None:
    settings = _settings(fake_telegram)
    telegram = TelegramPlatform(settings, redis_client)
    assert isinstance(telegram, TelegramPlatform)
    await telegram.startup()
    ingest = Ingest(settings, redis_client)
    approval_id = await _open(ingest)
    task = asyncio.create_task(telegram.connect(ingest, Health(redis_client, "telegram-polling")))
    try:
        fake_telegram.queue_update(click(approval_id))

        async def answered() -> bool:
            assert not task.done()
            return bool(fake_telegram.callback_answers)

        await _until(answered)
        assert await _status(ingest, approval_id) == Status.APPROVED
        assert len(await _turn_jobs(redis_client)) == 1
        polls = fake_telegram.calls_to("getUpdates")
        assert "callback_query" in polls[0].params["allowed_updates"]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await telegram.shutdown()


# -- a request nobody answers ----------------------------------------------------------


async def test_a_request_nobody_answers_in_time_is_settled_as_refused_and_the_turn_goes_on(
    fake_telegram: FakeTelegram, redis_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    sender = TelegramSender(
        BotClient.build(fake_telegram.token, fake_telegram.base_url),
        edit_interval=0.2,
        group_edit_interval=0.2,
    )
    message = inbound("delete the old one", platform="telegram", channel="42", user="42")
    try:
        outcome = await unanswered_confirmation(
            redis_url, llm, tmp_path, message, sender, TELEGRAM_ALLOW_ALL=True
        )
    finally:
        await sender.aclose()
    (result,) = outcome.results
    assert result.output == TIMED_OUT_RESULT and outcome.effects == []
    asked = [c for c in fake_telegram.calls_to("sendMessage") if c.params.get("reply_markup")]
    assert "inline_keyboard" in str(asked[0].params["reply_markup"])
    (request,) = [m for m in fake_telegram.messages_in(42) if "desk__delete_item" in m.text]
    assert request.reply_markup is None  # the keyboard is gone
    assert "Not approved in time" in request.text
    assert any(
        TIMED_OUT_RESULT in m.text for m in fake_telegram.messages_in(42)
    )  # the turn's answer

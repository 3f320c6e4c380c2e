"""TelegramSender: the real python-telegram-bot client against the loopback fake Bot API."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.telegram.client import BotClient
from adapters.telegram.sender import MAX_LENGTH, TelegramSender
from gateway.errors import MessageRejected, RateLimited
from gateway.messages import Address
from tests.fakes.telegram_api import FakeTelegram, utf16_len

DM = Address(platform="telegram", workspace="123456", channel="42")
TOPIC = Address(
    platform="telegram",
    workspace="123456",
    channel="-1001234",
    thread="77",
    reply_to="9",
    side=True,
)


@pytest.fixture
async def sender(fake_telegram: FakeTelegram) -> AsyncIterator[TelegramSender]:
    client = BotClient.build(fake_telegram.token, fake_telegram.base_url)
    telegram = TelegramSender(client, edit_interval=1.0, group_edit_interval=3.0)
    yield telegram
    await telegram.aclose()


async def test_send_renders_html_and_returns_the_message_id(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    message_id = await sender.send(DM, "**hello** <world>", final=False)
    message = fake_telegram.messages[(42, int(message_id))]
    assert message.html == "<b>hello</b> &lt;world&gt;" and message.parse_mode == "HTML"
    assert message.text == "hello <world>"
    assert message.thread_id is None and message.reply_to is None


async def test_side_reply_goes_to_the_topic_as_a_reply(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    message_id = await sender.send(TOPIC, "the answer", final=True)
    message = fake_telegram.messages[(-1001234, int(message_id))]
    assert message.thread_id == 77 and message.reply_to == 9
    params = fake_telegram.calls_to("sendMessage")[-1].params
    assert params["reply_parameters"]["allow_sending_without_reply"] is True


async def test_edit_changes_the_text_and_same_text_is_not_an_error(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    message_id = await sender.send(DM, "draft", final=False)
    await sender.edit(DM, message_id, "draft, *longer*", final=False)
    await sender.edit(DM, message_id, "draft, *longer*", final=True)
    message = fake_telegram.messages[(42, int(message_id))]
    assert message.history == ["draft", "draft, longer"]
    refused = [c for c in fake_telegram.calls_to("editMessageText") if c.status == 400]
    assert len(refused) == 1  # Telegram said "not modified" and the sender took it as done


async def test_flood_limit_becomes_rate_limited_with_the_delay(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    message_id = await sender.send(DM, "draft", final=False)
    fake_telegram.fail_next("editMessageText", status=429, retry_after=7)
    with pytest.raises(RateLimited) as caught:
        await sender.edit(DM, message_id, "more", final=False)
    assert caught.value.retry_after == 7
    assert len(fake_telegram.calls_to("editMessageText")) == 1  # python-telegram-bot did not retry


async def test_rejected_formatting_is_sent_again_as_plain_text(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    fake_telegram.reject_entities_next("sendMessage")
    message_id = await sender.send(DM, "**important** answer", final=True)
    message = fake_telegram.messages[(42, int(message_id))]
    assert message.parse_mode is None and message.text == "**important** answer"
    assert [c.status for c in fake_telegram.calls_to("sendMessage")] == [400, 200]


async def test_rejected_formatting_on_edit_is_sent_as_plain_text(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    message_id = await sender.send(DM, "draft", final=False)
    fake_telegram.reject_entities_next("editMessageText")
    await sender.edit(DM, message_id, "final *text*", final=True)
    assert fake_telegram.messages[(42, int(message_id))].text == "final *text*"


async def test_other_refusals_are_message_rejected(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    with pytest.raises(MessageRejected):
        await sender.edit(DM, "999", "no such message", final=True)


async def test_typing_is_sent_into_the_topic(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    await sender.thinking(TOPIC, True)
    await sender.thinking(TOPIC, False)
    calls = fake_telegram.calls_to("sendChatAction")
    assert len(calls) == 1
    assert calls[0].params == {"chat_id": -1001234, "action": "typing", "message_thread_id": 77}


def test_limits_are_slower_in_groups(sender: TelegramSender) -> None:
    private, group = sender.limits(DM), sender.limits(TOPIC)
    assert private.max_length == group.max_length == MAX_LENGTH
    assert private.edit_interval == 1.0 and group.edit_interval == 3.0
    assert private.chat_interval == 1.0 and group.chat_interval == 3.0
    assert private.typing_interval is not None and private.typing_interval < 5


async def test_measure_is_what_telegram_counts(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    markdown = "😀 **bold** `<code>` [link](https://example.com/long/url)\n- item"
    message_id = await sender.send(DM, markdown, final=True)
    counted = utf16_len(fake_telegram.messages[(42, int(message_id))].text)
    assert sender.measure(markdown) == counted


async def test_a_message_at_the_limit_is_accepted(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    markdown = "**" + "😀" * (MAX_LENGTH // 2) + "**"  # 4,096 UTF-16 units, more in markup
    assert sender.measure(markdown) == MAX_LENGTH
    await sender.send(DM, markdown, final=True)
    assert fake_telegram.calls_to("sendMessage")[-1].status == 200

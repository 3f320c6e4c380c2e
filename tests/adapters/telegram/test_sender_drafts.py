"""Replies streamed as Telegram drafts: the real ReplyStream and Mechanisms driving the real
TelegramSender (python-telegram-bot) against the loopback fake Bot API, paced through a
real Redis. Groups and topics keep edit-in-place; a refusal falls back to it."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from adapters.buttons import feedback_payload
from adapters.telegram.client import BotClient
from adapters.telegram.sender import DRAFT, TelegramSender
from gateway.delivery.mechanism import EDIT, Mechanisms
from gateway.delivery.pacing import SendPacing
from gateway.delivery.stream import ReplyStream
from gateway.errors import MessageRejected, RateLimited, StreamRefused
from gateway.messages import Address
from gateway.metrics import Metrics
from gateway.ports import Step
from gateway.state.keys import Keys
from tests.fakes.telegram_api import FakeTelegram

DM = Address(platform="telegram", workspace="123456", channel="42")
GROUP = Address(platform="telegram", workspace="123456", channel="-1001234", reply_to="9")
TOPIC = Address(platform="telegram", workspace="123456", channel="-1001234", thread="77")
PRIVATE_TOPIC = Address(platform="telegram", workspace="123456", channel="42", thread="5")
FEEDBACK_ROW = [
    {"text": "👍", "callback_data": feedback_payload("up")},
    {"text": "👎", "callback_data": feedback_payload("down")},
]


@pytest.fixture
async def sender(fake_telegram: FakeTelegram) -> AsyncIterator[TelegramSender]:
    client = BotClient.build(fake_telegram.token, fake_telegram.base_url)
    telegram = TelegramSender(client, edit_interval=0.1, group_edit_interval=0.1)
    yield telegram
    await telegram.aclose()


@pytest.fixture
def mechanisms(redis_client: aioredis.Redis) -> Mechanisms:
    return Mechanisms(redis_client, Metrics(redis_client))


async def open_reply(
    sender: TelegramSender,
    address: Address,
    mechanisms: Mechanisms,
    redis_client: aioredis.Redis,
    *,
    feedback: bool = False,
) -> ReplyStream:
    """A started reply at `address`, its mechanism chosen as a turn's is."""
    mechanism = await mechanisms.choose(sender, address, rerun=False)

    async def refused(name: str, error: StreamRefused) -> None:
        await mechanisms.refused(address, name, error)

    async def on_ids(ids: list[str]) -> None:
        return None

    stream = ReplyStream(
        sender,
        address,
        pacing=SendPacing(redis_client),
        known_ids=[],
        on_ids=on_ids,
        mechanism=mechanism,
        recipient="42",
        on_refused=refused,
        feedback=feedback,
    )
    stream.start()
    return stream


async def finish(stream: ReplyStream, mechanisms: Mechanisms, text: str) -> list[str]:
    ids = await stream.finish(text)
    await mechanisms.delivered(stream.address, stream.mechanism)
    return ids


def test_drafts_are_for_private_chats_only(sender: TelegramSender) -> None:
    assert sender.native_mechanism(DM) == DRAFT
    assert sender.native_mechanism(GROUP) is None
    assert sender.native_mechanism(TOPIC) is None
    assert sender.native_mechanism(PRIVATE_TOPIC) is None


async def test_a_private_reply_streams_as_drafts_and_ends_as_one_message(
    fake_telegram: FakeTelegram,
    sender: TelegramSender,
    mechanisms: Mechanisms,
    redis_client: aioredis.Redis,
) -> None:
    stream = await open_reply(sender, DM, mechanisms, redis_client)
    assert stream.mechanism == DRAFT
    stream.feed("**Hello**")
    await fake_telegram.wait_for(lambda: fake_telegram.draft_shown(42) == "Hello")
    stream.feed(" there, friend")
    await fake_telegram.wait_for(lambda: fake_telegram.draft_shown(42) == "Hello there, friend")
    ids = await finish(stream, mechanisms, "**Hello** there, friend.")
    [draft] = fake_telegram.drafts_in(42)
    assert draft.history == ["Hello", "Hello there, friend"] and draft.parse_mode == "HTML"
    [message] = fake_telegram.messages_in(42)
    assert message.html == "<b>Hello</b> there, friend." and ids == [str(message.message_id)]
    assert draft.ended_by == message.message_id and fake_telegram.draft_shown(42) is None
    assert fake_telegram.calls_to("editMessageText") == []
    assert len(fake_telegram.calls_to("sendMessage")) == 1
    assert message.reply_markup is None  # no feedback asked
    assert await redis_client.hget(Keys.METRICS, "replies|telegram|draft") == "1"


async def test_tool_steps_show_as_lines_under_the_draft(
    fake_telegram: FakeTelegram,
    sender: TelegramSender,
    mechanisms: Mechanisms,
    redis_client: aioredis.Redis,
) -> None:
    stream = await open_reply(sender, DM, mechanisms, redis_client)
    stream.feed("Let me look <that> up.")
    stream.set_step(Step("c1", "search_docs", "in_progress"))
    expected = "Let me look <that> up.\n\n⚙️ search_docs — running"
    await fake_telegram.wait_for(lambda: fake_telegram.draft_shown(42) == expected)
    stream.set_step(Step("c1", "search_docs", "complete"))
    await fake_telegram.wait_for(
        lambda: (fake_telegram.draft_shown(42) or "").endswith("✅ search_docs — done")
    )
    await finish(stream, mechanisms, "Found it.")
    [message] = fake_telegram.messages_in(42)
    assert message.text == "Found it."  # the steps end with the draft


async def test_a_group_reply_is_still_edited_in_place(
    fake_telegram: FakeTelegram,
    sender: TelegramSender,
    mechanisms: Mechanisms,
    redis_client: aioredis.Redis,
) -> None:
    for address in (GROUP, TOPIC):
        stream = await open_reply(sender, address, mechanisms, redis_client)
        assert stream.mechanism == EDIT
        stream.feed("first words")
        await fake_telegram.wait_for(lambda: len(fake_telegram.messages_in(-1001234)) >= 1)
        await finish(stream, mechanisms, "first words, and the rest")
    first, second = fake_telegram.messages_in(-1001234)
    assert first.history == ["first words", "first words, and the rest"]
    assert first.reply_to == 9 and second.thread_id == 77
    assert fake_telegram.calls_to("sendMessageDraft") == []
    assert await redis_client.hget(Keys.METRICS, "replies|telegram|edit") == "2"


async def test_drafts_refused_at_the_start_fall_back_to_edits_and_the_chat_is_remembered(
    fake_telegram: FakeTelegram,
    sender: TelegramSender,
    mechanisms: Mechanisms,
    redis_client: aioredis.Redis,
) -> None:
    fake_telegram.refuse_drafts(42)
    stream = await open_reply(sender, DM, mechanisms, redis_client)
    stream.feed("the start of it")
    await fake_telegram.wait_for(lambda: len(fake_telegram.messages_in(42)) == 1)
    await finish(stream, mechanisms, "the start of it, then the end")
    [message] = fake_telegram.messages_in(42)
    assert message.text == "the start of it, then the end"
    assert stream.mechanism == EDIT
    [refusal] = fake_telegram.calls_to("sendMessageDraft")
    assert refusal.status == 400
    assert await redis_client.get(Keys.native_refused(DM.chat_key)) == "TEXTDRAFT_PEER_INVALID"
    fallbacks = await redis_client.hget(
        Keys.METRICS, "stream_fallbacks|telegram|TEXTDRAFT_PEER_INVALID"
    )
    assert fallbacks == "1"

    again = await open_reply(sender, DM, mechanisms, redis_client)
    assert again.mechanism == EDIT
    again.feed("a second answer")
    await finish(again, mechanisms, "a second answer")
    assert len(fake_telegram.calls_to("sendMessageDraft")) == 1  # not asked again
    assert await redis_client.hget(Keys.METRICS, "replies|telegram|edit") == "2"
    assert await redis_client.hget(Keys.METRICS, "replies|telegram|draft") is None


async def test_drafts_refused_midway_deliver_the_final_text_once_as_one_message(
    fake_telegram: FakeTelegram,
    sender: TelegramSender,
    mechanisms: Mechanisms,
    redis_client: aioredis.Redis,
) -> None:
    stream = await open_reply(sender, DM, mechanisms, redis_client)
    stream.feed("One, two")
    await fake_telegram.wait_for(lambda: fake_telegram.draft_shown(42) == "One, two")
    fake_telegram.refuse_drafts(42)
    stream.feed(", three")
    await fake_telegram.wait_for(
        lambda: any(c.status == 400 for c in fake_telegram.calls_to("sendMessageDraft"))
    )
    stream.feed(", four")
    await finish(stream, mechanisms, "One, two, three, four.")
    [message] = fake_telegram.messages_in(42)
    assert message.text == "One, two, three, four."
    assert stream.mechanism == EDIT and stream.ids == [str(message.message_id)]
    assert await redis_client.exists(Keys.native_refused(DM.chat_key)) == 1


async def test_a_flood_wait_during_drafts_sends_nothing_until_it_ends(
    fake_telegram: FakeTelegram,
    sender: TelegramSender,
    mechanisms: Mechanisms,
    redis_client: aioredis.Redis,
) -> None:
    stream = await open_reply(sender, DM, mechanisms, redis_client)
    stream.feed("first")
    await fake_telegram.wait_for(lambda: fake_telegram.draft_shown(42) == "first")
    fake_telegram.fail_next("sendMessageDraft", status=429, retry_after=1)
    stream.feed(" second")
    await fake_telegram.wait_for(lambda: any(c.status == 429 for c in fake_telegram.calls))
    stream.feed(" third")
    await finish(stream, mechanisms, "first second third")
    [refused] = [c for c in fake_telegram.calls if c.status == 429]
    during = [c for c in fake_telegram.calls if refused.at < c.at < refused.at + 1.0]
    assert during == [], [c.method for c in during]
    [message] = fake_telegram.messages_in(42)
    assert message.text == "first second third"
    assert stream.mechanism == DRAFT  # a wait is no refusal


async def test_a_long_tool_step_keeps_the_draft_alive(
    fake_telegram: FakeTelegram, mechanisms: Mechanisms, redis_client: aioredis.Redis
) -> None:
    fake_telegram.draft_lifetime = 1.0
    client = BotClient.build(fake_telegram.token, fake_telegram.base_url)
    sender = TelegramSender(client, edit_interval=0.1, group_edit_interval=0.1, draft_refresh=0.3)
    try:
        stream = await open_reply(sender, DM, mechanisms, redis_client)
        stream.feed("Running the build")
        stream.set_step(Step("c1", "build", "in_progress"))
        shown = "Running the build\n\n⚙️ build — running"
        await fake_telegram.wait_for(lambda: fake_telegram.draft_shown(42) == shown)
        [draft] = fake_telegram.drafts_in(42)
        first = fake_telegram.calls_to("sendMessageDraft")[0].at
        # No new text nor step for three times the draft's life: only refreshes keep it.
        await fake_telegram.wait_for(lambda: draft.updated_at - first >= 3.0, within=6)
        assert draft.lapses == 0 and fake_telegram.draft_shown(42) == shown
        times = [c.at for c in fake_telegram.calls_to("sendMessageDraft")]
        assert max(b - a for a, b in itertools.pairwise(times)) < 1.0
        await finish(stream, mechanisms, "Built.")
    finally:
        await sender.aclose()
    assert [m.text for m in fake_telegram.messages_in(42)] == ["Built."]


async def test_the_final_message_carries_the_feedback_buttons_when_asked(
    fake_telegram: FakeTelegram,
    sender: TelegramSender,
    mechanisms: Mechanisms,
    redis_client: aioredis.Redis,
) -> None:
    drafted = await open_reply(sender, DM, mechanisms, redis_client, feedback=True)
    drafted.feed("an answer")
    await fake_telegram.wait_for(lambda: fake_telegram.draft_shown(42) == "an answer")
    await finish(drafted, mechanisms, "an answer, complete")
    edited = await open_reply(sender, GROUP, mechanisms, redis_client, feedback=True)
    edited.feed("a group answer")
    await fake_telegram.wait_for(lambda: len(fake_telegram.messages_in(-1001234)) == 1)
    await finish(edited, mechanisms, "a group answer, complete")
    [private] = fake_telegram.messages_in(42)
    [group] = fake_telegram.messages_in(-1001234)
    for message in (private, group):
        assert message.reply_markup == {"inline_keyboard": [FEEDBACK_ROW]}
    posted = fake_telegram.calls_to("sendMessage")[-1].params
    assert "reply_markup" not in posted  # the group's first post had none: only its final edit


async def test_send_and_edit_carry_the_buttons_only_when_asked(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    plain = await sender.send(DM, "no buttons", final=True)
    assert fake_telegram.messages[(42, int(plain))].reply_markup is None
    asked = await sender.send(DM, "rate me", final=True, feedback=True)
    assert fake_telegram.messages[(42, int(asked))].reply_markup == {
        "inline_keyboard": [FEEDBACK_ROW]
    }
    await sender.edit(DM, plain, "no buttons", final=True, feedback=True)  # only the markup
    assert fake_telegram.messages[(42, int(plain))].reply_markup == {
        "inline_keyboard": [FEEDBACK_ROW]
    }
    await sender.edit(DM, asked, "rate me, edited", final=True)
    assert fake_telegram.messages[(42, int(asked))].reply_markup is None


async def test_a_draft_telegram_cannot_parse_is_shown_as_plain_text(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    fake_telegram.reject_entities_next("sendMessageDraft")
    await sender.open_live(DM, recipient="42").show("**bold** claim", ())
    assert fake_telegram.draft_shown(42) == "**bold** claim"
    assert [c.status for c in fake_telegram.calls_to("sendMessageDraft")] == [400, 200]


async def test_draft_failures_become_the_cores_errors(
    fake_telegram: FakeTelegram, sender: TelegramSender
) -> None:
    draft = sender.open_live(DM, recipient="42")
    fake_telegram.fail_next(
        "sendMessageDraft", status=404, description="Not Found: method not found"
    )
    with pytest.raises(StreamRefused) as refused:
        await draft.show("hello", ())
    assert refused.value.for_channel and refused.value.code == "METHOD_NOT_FOUND"
    fake_telegram.fail_next("sendMessageDraft", status=429, retry_after=3)
    with pytest.raises(RateLimited) as limited:
        await draft.show("hello", ())
    assert limited.value.retry_after == 3
    with pytest.raises(MessageRejected):
        await draft.show("x" * 4097, ())
    with pytest.raises(StreamRefused):
        await sender.open_live(GROUP, recipient="42").show("in a group", ())
    assert draft.message_id is None and draft.refresh is not None and draft.refresh < 30


async def test_a_reply_past_the_limit_ends_each_draft_as_a_message_of_its_own(
    fake_telegram: FakeTelegram,
    sender: TelegramSender,
    mechanisms: Mechanisms,
    redis_client: aioredis.Redis,
) -> None:
    paragraphs = [f"Paragraph {i}: " + "word " * 150 for i in range(8)]  # about 6,000 chars
    stream = await open_reply(sender, DM, mechanisms, redis_client)
    stream.feed("\n\n".join(paragraphs[:4]))
    await fake_telegram.wait_for(lambda: "Paragraph 3" in (fake_telegram.draft_shown(42) or ""))
    stream.feed("\n\n" + "\n\n".join(paragraphs[4:]))
    await fake_telegram.wait_for(lambda: "Paragraph 7" in (fake_telegram.draft_shown(42) or ""))
    assert len(fake_telegram.messages_in(42)) == 1  # the first piece, ended as it filled up
    ids = await finish(stream, mechanisms, "\n\n".join(paragraphs))
    first, second = fake_telegram.messages_in(42)
    assert ids == [str(first.message_id), str(second.message_id)]
    assert (first.text + "\n\n" + second.text).split() == "\n\n".join(paragraphs).split()
    drafts = fake_telegram.drafts_in(42)
    assert len(drafts) == 2 and drafts[0].draft_id != drafts[1].draft_id
    assert [d.ended_by for d in drafts] == [first.message_id, second.message_id]


async def test_a_step_before_any_text_is_shown_alone(
    fake_telegram: FakeTelegram,
    sender: TelegramSender,
    mechanisms: Mechanisms,
    redis_client: aioredis.Redis,
) -> None:
    stream = await open_reply(sender, DM, mechanisms, redis_client)
    stream.set_step(Step("c1", "fetch <page>", "pending"))
    await fake_telegram.wait_for(
        lambda: fake_telegram.draft_shown(42) == "⏳ fetch <page> — waiting"
    )
    await finish(stream, mechanisms, "Fetched.")
    assert [m.text for m in fake_telegram.messages_in(42)] == ["Fetched."]

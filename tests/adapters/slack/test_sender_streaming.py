"""SlackSender's streams (chat.startStream/appendStream/stopStream) and its feedback
buttons: the real slack-sdk against the loopback fake, driven by the core's ReplyStream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from adapters.buttons import FEEDBACK_ACTION, FEEDBACK_BLOCK, FEEDBACK_DOWN, FEEDBACK_UP
from adapters.slack.client import web_client
from adapters.slack.sender import STREAM_PACE, SlackSender
from adapters.slack.streaming import MARKDOWN_LIMIT
from gateway.delivery.stream import ReplyStream
from gateway.errors import PlatformError, RateLimited, StreamRefused
from gateway.messages import Address
from gateway.ports import NativeStreams, Step
from tests.fakes.slack_api import FakeSlack, Message

TOKEN = "xoxb-test-token"
CHANNEL_THREAD = Address(
    platform="slack", workspace="T1", channel="C1", thread="100.1", reply_to="100.2"
)
ASSISTANT = Address(
    platform="slack", workspace="T1", channel="D1", thread="200.1", reply_to="200.2"
)
DM_TOP = Address(platform="slack", workspace="T1", channel="D1", reply_to="300.1")
INVISIBLE = str.maketrans("", "", "\u200b\u2060")


@pytest.fixture
async def sender(slack: FakeSlack) -> AsyncIterator[SlackSender]:
    sender = SlackSender(web_client(TOKEN, slack.api_url), edit_interval=0.05)
    yield sender
    await sender.aclose()


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Wait in the test's loop (the stream's pump runs there) until `condition` holds."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


class Reply:
    """A ReplyStream the way the core opens one, and what it was told."""

    def __init__(self, sender: SlackSender, address: Address, **options: Any) -> None:
        self.ids: list[str] = []
        self.refusals: list[StreamRefused] = []

        async def on_ids(ids: list[str]) -> None:
            self.ids = ids

        async def refused(mechanism: str, error: StreamRefused) -> None:
            self.refusals.append(error)

        options.setdefault("mechanism", sender.native_mechanism(address) or "edit")
        options.setdefault("recipient", "U1")
        options.setdefault("feedback", True)
        self.stream = ReplyStream(
            sender,
            address,
            pacing=None,
            known_ids=options.pop("known_ids", []),
            on_ids=on_ids,
            on_refused=refused,
            post_key="slack:T1:s:1-0",
            **options,
        )
        self.stream.start()


def texts(calls: list[Any]) -> list[str]:
    """The markdown each streaming call carried."""
    return [
        chunk["text"]
        for call in calls
        for chunk in call.args.get("chunks") or []
        if chunk["type"] == "markdown_text"
    ]


def only_message(slack: FakeSlack) -> Message:
    (message,) = slack.messages.values()
    return message


def stream_calls(slack: FakeSlack) -> list[Any]:
    return slack.calls.where(lambda c: c.method.startswith("chat."))


async def test_where_slack_streams(sender: SlackSender) -> None:
    assert isinstance(sender, NativeStreams)
    assert sender.native_mechanism(ASSISTANT) == "stream"
    assert sender.native_mechanism(CHANNEL_THREAD) == "stream"
    assert sender.native_mechanism(DM_TOP) is None  # chat.startStream needs a thread
    assert sender.native_mechanism(CHANNEL_THREAD.model_copy(update={"side": True})) is None
    assert sender.open_live(ASSISTANT, recipient="U1").interval == STREAM_PACE * 0.05


async def test_a_reply_streams_in_an_assistant_thread_and_stops_with_feedback(
    slack: FakeSlack, sender: SlackSender
) -> None:
    reply = Reply(sender, ASSISTANT)
    reply.stream.feed("Hello there, ")
    await until(lambda: bool(slack.calls_to("chat.startStream")))
    reply.stream.feed("how are you ")
    await until(lambda: bool(slack.calls_to("chat.appendStream")))
    ids = await reply.stream.finish("Hello there, how are you today?")

    message = only_message(slack)
    assert ids == reply.ids == [message.ts]
    assert message.text == "Hello there, how are you today?" and not message.streaming
    assert message.thread_ts == "200.1"
    (start,) = slack.calls_to("chat.startStream")
    assert start.args["thread_ts"] == "200.1" and start.args["task_display_mode"] == "timeline"
    assert (start.args["recipient_user_id"], start.args["recipient_team_id"]) == ("U1", "T1")
    # Each call carried only what Slack did not hold yet.
    calls = slack.calls_to("chat.startStream") + slack.calls_to("chat.appendStream")
    assert "".join(texts(calls + slack.calls_to("chat.stopStream"))) == message.text
    assert not slack.calls_to("chat.postMessage") and not slack.calls_to("chat.update")
    (stop,) = slack.calls_to("chat.stopStream")
    (block,) = stop.args["blocks"]
    assert block["type"] == "context_actions" and block["block_id"] == FEEDBACK_BLOCK
    (buttons,) = block["elements"]
    assert buttons["type"] == "feedback_buttons" and buttons["action_id"] == FEEDBACK_ACTION
    assert buttons["positive_button"]["value"] == FEEDBACK_UP
    assert buttons["negative_button"]["value"] == FEEDBACK_DOWN
    assert message.metadata == {
        "event_type": "gateway_reply",
        "event_payload": {"key": "slack:T1:s:1-0:0"},
    }


async def test_a_channel_thread_streams_to_the_asker(slack: FakeSlack, sender: SlackSender) -> None:
    reply = Reply(sender, CHANNEL_THREAD, recipient="U2")
    reply.stream.feed("An answer for Grace ")
    await reply.stream.finish("An answer for Grace, in the channel.")
    (start,) = slack.calls_to("chat.startStream")
    assert (start.args["recipient_user_id"], start.args["recipient_team_id"]) == ("U2", "T1")
    assert only_message(slack).text == "An answer for Grace, in the channel."


async def test_a_channel_thread_without_an_asker_is_edited_in_place(
    slack: FakeSlack, sender: SlackSender
) -> None:
    """Slack streams into a channel only to a named reader: with none, no stream is
    asked for, and the reply is posted and edited."""
    reply = Reply(sender, CHANNEL_THREAD, recipient="")
    reply.stream.feed("Some text ")
    await reply.stream.finish("Some text, complete.")
    assert not slack.calls_to("chat.startStream")
    assert [(e.code, e.for_channel) for e in reply.refusals] == [
        ("missing_recipient_user_id", False)
    ]
    assert only_message(slack).shown == "Some text, complete."


async def test_a_refused_start_falls_back_to_edits_for_the_channel(
    slack: FakeSlack, sender: SlackSender
) -> None:
    slack.refuse_streams["C1"] = "method_not_supported_for_channel_type"
    reply = Reply(sender, CHANNEL_THREAD)
    reply.stream.feed("The first words ")
    await until(lambda: bool(slack.calls_to("chat.postMessage")))
    ids = await reply.stream.finish("The first words, and the rest.")
    assert [(e.code, e.for_channel) for e in reply.refusals] == [
        ("method_not_supported_for_channel_type", True)
    ]
    message = only_message(slack)
    assert ids == [message.ts] and message.shown == "The first words, and the rest."
    assert len(slack.calls_to("chat.startStream")) == 1
    assert not slack.calls_to("chat.appendStream")
    # The last edit carries the feedback buttons under the text.
    assert message.blocks[-1]["block_id"] == FEEDBACK_BLOCK


async def test_a_stream_that_lapses_midway_is_closed_and_edited_to_the_whole_text(
    slack: FakeSlack, sender: SlackSender
) -> None:
    reply = Reply(sender, ASSISTANT)
    reply.stream.feed("It started well ")
    await until(lambda: bool(slack.answered("chat.startStream")))
    slack.expire(only_message(slack).ts)
    reply.stream.feed("and then Slack ended the stream ")
    await until(lambda: bool(slack.calls_to("chat.appendStream")))
    ids = await reply.stream.finish(
        "It started well and then Slack ended the stream, yet all of it shows."
    )

    message = only_message(slack)
    assert ids == [message.ts]
    assert [(e.code, e.for_channel) for e in reply.refusals] == [
        ("message_not_in_streaming_state", False)
    ]
    assert message.shown == "It started well and then Slack ended the stream, yet all of it shows."
    assert slack.calls_to("chat.stopStream")  # closed before it was edited
    assert slack.answered("chat.update") and not slack.calls_to("chat.postMessage")


async def test_a_rate_limited_append_waits_and_the_final_text_arrives(
    slack: FakeSlack, sender: SlackSender
) -> None:
    reply = Reply(sender, ASSISTANT)
    reply.stream.feed("First part ")
    await until(lambda: bool(slack.answered("chat.startStream")))
    slack.fail_next("chat.appendStream", retry_after=1)
    reply.stream.feed("second part ")
    await until(lambda: bool(slack.calls_to("chat.appendStream")))
    reply.stream.feed("third part ")
    await reply.stream.finish("First part second part third part, done.")
    (refused,) = slack.calls_to("chat.appendStream")[:1]
    assert refused.status == 429
    later = [c for c in stream_calls(slack) if c.at > refused.at]
    assert later and min(c.at for c in later) >= refused.at + 0.95
    assert only_message(slack).text == "First part second part third part, done."


async def test_no_call_carries_more_than_slacks_markdown_limit(
    slack: FakeSlack, sender: SlackSender
) -> None:
    live = sender.open_live(ASSISTANT, recipient="U1")
    long_text = " ".join(["wörd😀"] * 9000)  # 63,000 characters, 72,000 UTF-16 units
    await live.show(long_text[:40_000], [])
    await live.close(long_text, [], feedback=False)
    message = only_message(slack)
    assert message.text == long_text
    calls = stream_calls(slack)
    assert not [c for c in calls if c.error]
    assert max(len(t.encode("utf-16-le")) // 2 for t in texts(calls)) <= MARKDOWN_LIMIT
    assert len(slack.calls_to("chat.appendStream")) >= 4


async def test_model_text_never_pings_anyone_through_a_stream(
    slack: FakeSlack, sender: SlackSender
) -> None:
    text = "Hey @channel and <!here>, ask <@U123> or <!subteam^S1>: [click](javascript:alert(1)) ok"
    reply = Reply(sender, CHANNEL_THREAD)
    reply.stream.feed("Hey @chan")  # the mention is not whole yet: it waits
    await until(lambda: bool(slack.answered("chat.startStream")))
    reply.stream.feed("nel and <!here>, ask ")
    await until(lambda: bool(slack.answered("chat.appendStream")))
    await reply.stream.finish(text)
    assert not slack.calls_to("chat.update")  # each piece extended what Slack held
    shown = only_message(slack).text
    for ping in ("@channel", "<!here", "<@U123", "<!subteam", "](javascript"):
        assert ping not in shown
    assert shown.translate(INVISIBLE) == text  # shown as written


async def test_tool_steps_are_task_updates_on_the_timeline(
    slack: FakeSlack, sender: SlackSender
) -> None:
    reply = Reply(sender, ASSISTANT)
    reply.stream.feed("Let me look that up. ")
    reply.stream.set_step(Step("call-1", "desk__lookup · <!here>", "in_progress", "query: x"))
    await until(lambda: bool(slack.answered("chat.startStream")))
    reply.stream.set_step(Step("call-1", "desk__lookup · <!here>", "complete", "query: x"))
    reply.stream.set_step(Step("call-2", "desk__delete", "error"))
    await reply.stream.finish("Let me look that up. Found it.")
    message = only_message(slack)
    assert message.tasks["call-1"]["status"] == "complete"
    assert message.tasks["call-2"]["status"] == "error"
    assert "<!here" not in message.tasks["call-1"]["title"]
    updates = [
        chunk
        for call in stream_calls(slack)
        for chunk in call.args.get("chunks") or []
        if chunk["type"] == "task_update" and chunk["id"] == "call-1"
    ]
    assert [u["status"] for u in updates] == ["in_progress", "complete"]
    assert [u.get("details") for u in updates] == ["query: x", None]  # sent once
    assert message.text == "Let me look that up. Found it."


async def test_a_final_text_that_changed_is_written_by_an_edit_after_the_stop(
    slack: FakeSlack, sender: SlackSender
) -> None:
    live = sender.open_live(ASSISTANT, recipient="U1")
    await live.show("A draft that goes away ", [])
    ts = await live.close("The **final** answer", [], feedback=True)
    message = only_message(slack)
    assert ts == message.ts and not message.streaming
    assert [c.method for c in stream_calls(slack)] == [
        "chat.startStream",
        "chat.stopStream",
        "chat.update",
    ]
    assert message.blocks[0] == {"type": "markdown", "text": "The **final** answer"}
    assert message.blocks[-1]["block_id"] == FEEDBACK_BLOCK
    assert message.text == "The *final* answer"  # what notifications show


async def test_a_rerun_closes_the_stream_its_predecessor_left_then_edits_it(
    slack: FakeSlack, sender: SlackSender
) -> None:
    live = sender.open_live(ASSISTANT, recipient="U1")
    await live.show("What the first run streamed before it died ", [])
    assert live.message_id is not None
    reply = Reply(sender, ASSISTANT, known_ids=[live.message_id], mechanism="edit")
    await reply.stream.finish("The whole answer, from the re-run.")
    message = only_message(slack)
    assert not message.streaming
    assert message.shown == "The whole answer, from the re-run."
    methods = [c.method for c in stream_calls(slack)]
    assert methods.index("chat.stopStream") < methods.index("chat.update")
    assert not slack.calls_to("chat.postMessage")


async def test_an_edit_of_a_message_still_streaming_closes_it_first(
    slack: FakeSlack, sender: SlackSender
) -> None:
    """A re-run that found its predecessor's stream by its key (not by a stored id)
    edits it: Slack refuses the edit while it streams, so it is stopped, then edited."""
    live = sender.open_live(ASSISTANT, recipient="U1")
    await live.show("Left streaming ", [])
    assert live.message_id is not None
    await sender.edit(ASSISTANT, live.message_id, "Edited after all", final=True)
    message = only_message(slack)
    assert message.shown == "Edited after all" and not message.streaming
    assert [c.error for c in slack.calls_to("chat.update")] == ["streaming_state_conflict", None]


async def test_closing_a_message_that_no_longer_streams_is_no_error(
    slack: FakeSlack, sender: SlackSender
) -> None:
    posted = await sender.send(ASSISTANT, "an ordinary post", final=True)
    await sender.close_live(ASSISTANT, posted)
    assert [c.error for c in slack.calls_to("chat.stopStream")] == [
        "message_not_in_streaming_state"
    ]
    slack.fail_next("chat.stopStream", "internal_error")
    with pytest.raises(PlatformError):
        await sender.close_live(ASSISTANT, posted)


@pytest.mark.parametrize(
    ("error", "status", "raised", "for_channel"),
    [
        ("method_not_supported_for_channel_type", 200, StreamRefused, True),
        ("missing_scope", 200, StreamRefused, True),
        ("team_not_allowed", 200, StreamRefused, True),
        ("message_not_in_streaming_state", 200, StreamRefused, False),
        ("msg_too_long", 200, StreamRefused, False),
        ("ratelimited", 429, RateLimited, None),
        ("rate_limited", 200, RateLimited, None),
        ("internal_error", 200, PlatformError, None),
    ],
)
async def test_stream_refusals_as_the_core_reads_them(
    slack: FakeSlack,
    sender: SlackSender,
    error: str,
    status: int,
    raised: type[Exception],
    for_channel: bool | None,
) -> None:
    slack.fail_next("chat.startStream", error, status=status)
    live = sender.open_live(CHANNEL_THREAD, recipient="U1")
    with pytest.raises(raised) as caught:
        await live.show("some text ", [])
    assert type(caught.value) is raised
    if isinstance(caught.value, StreamRefused):
        assert caught.value.code == error and caught.value.for_channel is for_channel


async def test_feedback_buttons_go_under_a_posted_or_edited_reply_only_when_asked(
    slack: FakeSlack, sender: SlackSender
) -> None:
    ts = await sender.send(DM_TOP, "**plain**", final=False)
    await sender.edit(DM_TOP, ts, "**plain** still", final=False)
    assert "blocks" not in slack.calls_to("chat.postMessage")[0].args
    assert "blocks" not in slack.calls_to("chat.update")[0].args
    await sender.edit(DM_TOP, ts, "**final**", final=True, feedback=True)
    message = slack.messages[ts]
    assert message.text == "*final*"
    assert message.blocks[0] == {"type": "section", "text": {"type": "mrkdwn", "text": "*final*"}}
    assert message.blocks[-1]["block_id"] == FEEDBACK_BLOCK
    posted = await sender.send(DM_TOP, "x" * 3500 + "\nend", final=True, feedback=True)
    sections = [b for b in slack.messages[posted].blocks if b["type"] == "section"]
    assert len(sections) == 2 and all(len(b["text"]["text"]) <= 3000 for b in sections)


async def test_a_stream_left_idle_past_its_life_is_refused_for_this_reply_only(
    slack: FakeSlack, sender: SlackSender
) -> None:
    slack.stream_expiry = 0.0  # lapses as soon as it goes a moment without a call
    live = sender.open_live(ASSISTANT, recipient="U1")
    await live.show("the start ", [])
    with pytest.raises(StreamRefused) as caught:
        await live.show("the start and more ", [])
    assert (caught.value.code, caught.value.for_channel) == (
        "message_not_in_streaming_state",
        False,
    )
    assert live.message_id is not None
    await sender.close_live(ASSISTANT, live.message_id)  # no longer streaming: no error
    await sender.edit(ASSISTANT, live.message_id, "the start and more, edited", final=True)
    assert slack.messages[live.message_id].shown == "the start and more, edited"


async def test_where_slack_refuses_the_feedback_buttons_the_reply_goes_without_them(
    slack: FakeSlack, sender: SlackSender
) -> None:
    slack.refused_blocks = {"context_actions"}
    reply = Reply(sender, ASSISTANT)
    reply.stream.feed("A streamed answer ")
    await reply.stream.finish("A streamed answer, whole.")
    streamed = only_message(slack)
    assert streamed.text == "A streamed answer, whole." and not streamed.streaming
    assert [c.error for c in slack.calls_to("chat.stopStream")] == ["invalid_blocks", None]
    assert not reply.refusals  # still a stream: nothing fell back

    posted = await sender.send(DM_TOP, "a posted answer", final=True, feedback=True)
    await sender.edit(DM_TOP, posted, "an edited answer", final=True, feedback=True)
    assert slack.messages[posted].shown == "an edited answer"
    assert [c.error for c in slack.calls_to("chat.postMessage")] == ["invalid_blocks", None]
    assert [c.error for c in slack.calls_to("chat.update")] == ["invalid_blocks", None]


async def test_a_replys_first_word_starts_the_stream_at_once(
    slack: FakeSlack, sender: SlackSender
) -> None:
    """A lone first word of plain letters cannot become a mention or a link: it goes out
    with the stream's start, not an interval later."""
    reply = Reply(sender, ASSISTANT)
    reply.stream.feed("Sure")
    await until(lambda: bool(slack.calls_to("chat.startStream")))  # before any other text
    assert texts(slack.calls_to("chat.startStream")) == ["Sure"]
    reply.stream.feed(" @her")  # may still become @here: held back until it cannot
    await reply.stream.finish("Sure @here")
    message = only_message(slack)
    assert message.text.translate(INVISIBLE) == "Sure @here" and message.text != "Sure @here"

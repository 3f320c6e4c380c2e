"""SlackSender: the real slack-sdk client against the loopback fake of the Web API."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator

import pytest

from adapters.slack.client import web_client
from adapters.slack.sender import LOOK_WINDOW, MAX_LENGTH, SlackSender
from gateway.errors import MessageRejected, PlatformError, RateLimited
from gateway.messages import Address
from gateway.state.jobs import Job
from gateway.state.keys import Keys
from tests.fakes.llm_server import FakeLLM
from tests.fakes.slack_api import FakeSlack
from tests.support.harness import start_workers
from tests.support.helpers import inbound

TOKEN = "xoxb-test-token"


@pytest.fixture
async def sender(slack: FakeSlack) -> AsyncIterator[SlackSender]:
    sender = SlackSender(web_client(TOKEN, slack.api_url), edit_interval=1.5)
    yield sender
    await sender.aclose()


THREAD = Address(platform="slack", workspace="T1", channel="C1", thread="100.1", reply_to="100.2")
DM = Address(platform="slack", workspace="T1", channel="D1", reply_to="300.1")
# A thread of the app's DM: where Slack's assistant threads are.
ASSISTANT = Address(
    platform="slack", workspace="T1", channel="D1", thread="200.1", reply_to="200.2"
)


async def test_send_posts_rendered_mrkdwn_into_the_thread(
    slack: FakeSlack, sender: SlackSender
) -> None:
    ts = await sender.send(THREAD, "**Hi** <there>", final=False)
    call = slack.calls_to("chat.postMessage")[0]
    assert call.token == TOKEN
    assert call.args["channel"] == "C1" and call.args["thread_ts"] == "100.1"
    assert call.args["text"] == "*Hi* &lt;there&gt;"
    assert slack.messages[ts].thread_ts == "100.1"


async def test_a_dm_reply_goes_to_the_top_level(slack: FakeSlack, sender: SlackSender) -> None:
    await sender.send(DM, "hello", final=True)
    assert "thread_ts" not in slack.calls_to("chat.postMessage")[0].args


async def test_edit_updates_the_message_and_identical_text_is_fine(
    slack: FakeSlack, sender: SlackSender
) -> None:
    ts = await sender.send(THREAD, "draft", final=False)
    await sender.edit(THREAD, ts, "final _text_", final=True)
    await sender.edit(THREAD, ts, "final _text_", final=True)
    assert slack.messages[ts].text == "final _text_"
    assert [c.args["ts"] for c in slack.calls_to("chat.update")] == [ts, ts]


async def test_429_is_rate_limited_with_retry_after_and_no_sdk_retry(
    slack: FakeSlack, sender: SlackSender
) -> None:
    ts = await sender.send(THREAD, "draft", final=False)
    slack.fail_next("chat.update", retry_after=7)
    with pytest.raises(RateLimited) as caught:
        await sender.edit(THREAD, ts, "more", final=False)
    assert caught.value.retry_after == 7
    # One call: the core coalesces and retries, slack-sdk must not retry on its own.
    assert len(slack.calls_to("chat.update")) == 1


async def test_refused_content_and_other_failures(slack: FakeSlack, sender: SlackSender) -> None:
    slack.fail_next("chat.postMessage", "msg_too_long")
    with pytest.raises(MessageRejected):
        await sender.send(THREAD, "x", final=True)
    with pytest.raises(PlatformError, match="message_not_found"):
        await sender.edit(THREAD, "999.9", "x", final=True)


async def test_errors_never_show_the_token(slack: FakeSlack, sender: SlackSender) -> None:
    slack.fail_next("chat.postMessage", "invalid_auth")
    with pytest.raises(PlatformError) as caught:
        await sender.send(THREAD, "x", final=True)
    assert TOKEN not in str(caught.value)


async def test_calls_share_one_connection_until_the_sender_closes(
    slack: FakeSlack, sender: SlackSender
) -> None:
    ts = await sender.send(THREAD, "one", final=False)
    await sender.thinking(THREAD, True)
    await sender.edit(THREAD, ts, "two", final=True)
    assert len(slack.calls) == 3
    assert len({call.peer for call in slack.calls}) == 1
    await sender.aclose()
    assert sender.client.session is not None and sender.client.session.closed
    # A call after the close (none is made in a run) still goes out, on its own connection.
    await sender.thinking(THREAD, False)
    assert slack.calls[-1].method == "reactions.remove" and slack.calls[-1].error is None


async def test_a_call_after_slack_restarted_goes_out_on_a_new_connection(
    slack: FakeSlack, sender: SlackSender
) -> None:
    await sender.send(THREAD, "before", final=True)
    # Slack restarts while the worker's loop runs (it sees its idle connection closed).
    await asyncio.to_thread(slack.stop)
    await asyncio.to_thread(slack.start)
    await sender.send(THREAD, "after", final=True)
    before, after = slack.calls_to("chat.postMessage")
    assert after.error is None and before.peer != after.peer


async def test_unreachable_slack_is_a_platform_error() -> None:
    sender = SlackSender(web_client(TOKEN, "http://127.0.0.1:9/api/"), edit_interval=1)
    async with contextlib.aclosing(sender):
        with pytest.raises(PlatformError):
            await sender.send(THREAD, "x", final=True)


def test_limits_and_measure(sender: SlackSender) -> None:
    limits = sender.limits(THREAD)
    assert limits.max_length == MAX_LENGTH < 4000
    assert limits.edit_interval == 1.5
    # Measured on the rendered text: escaping makes `<` count as four characters.
    assert sender.measure("**a** <") == len("*a* &lt;")


async def test_thinking_falls_back_to_the_eyes_reaction(
    slack: FakeSlack, sender: SlackSender, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="adapters.slack.sender")
    await sender.thinking(ASSISTANT, True)
    assert ("D1", "200.2", "eyes") in slack.reactions
    await sender.thinking(ASSISTANT, False)
    assert not slack.reactions
    # The app has no assistant feature: remembered, so the status is not tried again.
    await sender.thinking(ASSISTANT, True)
    await sender.show_status(ASSISTANT, "is running `x`…")
    assert len(slack.calls_to("assistant.threads.setStatus")) == 1
    assert not sender.assistant_status
    (logged,) = [r for r in caplog.records if "setStatus" in r.getMessage()]
    assert logged.levelno == logging.DEBUG and "missing_scope" in logged.getMessage()


async def test_thinking_uses_the_assistant_status_where_the_app_has_it(
    slack: FakeSlack, sender: SlackSender
) -> None:
    slack.assistant_enabled = True
    await sender.thinking(ASSISTANT, True)
    await sender.thinking(ASSISTANT, False)
    statuses = [c.args["status"] for c in slack.calls_to("assistant.threads.setStatus")]
    assert statuses == ["is thinking…", ""]
    assert slack.calls_to("assistant.threads.setStatus")[0].args["thread_ts"] == "200.1"
    assert not slack.calls_to("reactions.add")


async def test_a_channel_thread_is_no_assistant_thread_and_gets_the_reaction(
    slack: FakeSlack, sender: SlackSender
) -> None:
    slack.assistant_enabled = True
    await sender.thinking(THREAD, True)
    await sender.show_status(THREAD, "is running `x`…")
    assert ("C1", "100.2", "eyes") in slack.reactions
    assert not slack.calls_to("assistant.threads.setStatus")


async def test_the_tools_status_replaces_thinking_and_goes_back_to_it(
    slack: FakeSlack, sender: SlackSender
) -> None:
    slack.assistant_enabled = True
    await sender.show_status(ASSISTANT, "is running `desk__lookup`…")
    await sender.show_status(ASSISTANT, "")
    statuses = [c.args["status"] for c in slack.calls_to("assistant.threads.setStatus")]
    assert statuses == ["is running `desk__lookup`…", "is thinking…"]


async def test_a_failing_status_never_breaks_the_turn_and_is_logged_once(
    slack: FakeSlack, sender: SlackSender, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="adapters.slack.sender")
    slack.assistant_enabled = True
    slack.fail_next("assistant.threads.setStatus", "invalid_thread_ts", times=2)
    slack.fail_next("assistant.threads.setStatus", retry_after=3)
    await sender.show_status(ASSISTANT, "is running `x`…")
    await sender.show_status(ASSISTANT, "")
    await sender.show_status(ASSISTANT, "")  # rate limited: dropped, not raised
    assert len(slack.calls_to("assistant.threads.setStatus")) == 3
    assert sender.assistant_status  # one thread's error is not the app's
    logged = [r.getMessage() for r in caplog.records if "setStatus" in r.getMessage()]
    assert len(logged) == 1 and "invalid_thread_ts" in logged[0]
    assert TOKEN not in caplog.text


async def test_thinking_in_a_top_level_dm_reacts(slack: FakeSlack, sender: SlackSender) -> None:
    slack.assistant_enabled = True
    await sender.thinking(DM, True)
    assert ("D1", "300.1", "eyes") in slack.reactions
    await sender.thinking(DM, True)  # already reacted is not an error
    await sender.thinking(DM, False)
    await sender.thinking(DM, False)  # already gone is not an error either
    assert not slack.reactions


@pytest.mark.parametrize("address", [THREAD, DM], ids=["thread", "top level"])
async def test_a_post_is_found_again_by_its_key(
    slack: FakeSlack, sender: SlackSender, address: Address
) -> None:
    answered = await sender.send(address, "someone else's", final=True)
    address = address.model_copy(update={"reply_to": answered})
    ts = await sender.send(address, "the reply", final=False, key="s:u1:0")
    await sender.send(address, "another turn's", final=True, key="s:u2:0")
    assert await sender.find_post(address, "s:u1:0") == ts
    assert await sender.find_post(address, "s:u3:0") is None
    assert slack.messages[ts].metadata == {
        "event_type": "gateway_reply",
        "event_payload": {"key": "s:u1:0"},
    }


async def test_a_post_is_found_after_the_message_it_answers_in_a_long_thread(
    slack: FakeSlack, sender: SlackSender
) -> None:
    """A page holds 15 messages (Slack's cap for apps outside its Marketplace): the look-up
    starts at the message the reply answers, not at the thread's start."""
    slack.page_cap = 15
    for number in range(20):
        earlier = await sender.send(THREAD, f"an earlier answer {number}", final=True)
    asked = THREAD.model_copy(update={"reply_to": earlier})  # the user spoke after those
    ts = await sender.send(asked, "the reply", final=False, key="s:u9:0")
    assert await sender.find_post(asked, "s:u9:0") == ts
    assert slack.calls_to("conversations.replies")[-1].args["oldest"] == earlier
    assert await sender.find_post(THREAD.model_copy(update={"reply_to": None}), "s:u9:0") is None


async def test_a_post_is_found_at_the_top_level_of_a_channel_busy_since(
    slack: FakeSlack, sender: SlackSender
) -> None:
    """Slack pages conversations.history 15 messages at a time, newest first: the look-up
    ends its window minutes after the answered message, so the 20 later messages do
    not hide the post."""
    slack.page_cap = 15
    answered = await sender.send(DM, "the question's stand-in", final=True)
    asked = DM.model_copy(update={"reply_to": answered})
    ts = await sender.send(asked, "the reply", final=False, key="s:u9:0")
    slack.clock += 3600  # the channel goes on talking, an hour later
    for number in range(20):
        await sender.send(DM, f"a later answer {number}", final=True)
    assert await sender.find_post(asked, "s:u9:0") == ts
    (call,) = slack.calls_to("conversations.history")
    assert float(call.args["latest"]) == pytest.approx(float(answered) + LOOK_WINDOW)


async def test_a_post_is_found_among_more_than_a_page_of_messages_right_after_it(
    slack: FakeSlack, sender: SlackSender
) -> None:
    """A channel busy within the window itself: the look-up follows the pages back."""
    slack.page_cap = 15
    answered = await sender.send(DM, "the question's stand-in", final=True)
    asked = DM.model_copy(update={"reply_to": answered})
    ts = await sender.send(asked, "the reply", final=False, key="s:u9:0")
    for number in range(40):
        await sender.send(DM, f"a later answer {number}", final=True)
    assert await sender.find_post(asked, "s:u9:0") == ts
    assert len(slack.calls_to("conversations.history")) == 3
    assert await sender.find_post(asked, "s:u8:0") is None


async def test_a_lookup_refused_is_a_platform_error(slack: FakeSlack, sender: SlackSender) -> None:
    slack.fail_next("conversations.history", "missing_scope")
    with pytest.raises(PlatformError, match="missing_scope"):
        await sender.find_post(DM, "s:u1:0")


async def test_a_refused_call_is_named_by_its_method(slack: FakeSlack, sender: SlackSender) -> None:
    """The core's error names the Web API method the SDK called, read from its URL."""
    slack.fail_next("conversations.history", "missing_scope")
    with pytest.raises(
        PlatformError, match=r"^Slack conversations\.history failed: missing_scope$"
    ):
        await sender.find_post(DM, "s:u1:0")


async def test_a_rerun_edits_the_reply_its_predecessor_posted_but_could_not_record(
    slack: FakeSlack, redis_url: str, llm: FakeLLM
) -> None:
    """The first run started its stream, then died before the message's id was stored:
    the run that takes the turn over finds the message by its key (the stream carries it
    from its start), closes it and edits it, so the thread shows one reply."""
    llm.reply, llm.duration = "the whole answer", 2.0
    sender = SlackSender(web_client(TOKEN, slack.api_url), edit_interval=0.2)
    message = inbound("a question", platform="slack", channel="C1", thread="100.1")
    key = message.session_key
    async with start_workers(redis_url, llm, 1, senders={"slack": sender}) as h:
        await h.ingest.receive(message)
        await h.lose_reply_ids(key)
        await h.idle(key, timeout=30)
    (reply,) = slack.messages.values()
    assert reply.shown == "the whole answer" and reply.thread_ts == "100.1"
    assert not reply.streaming
    assert len(slack.calls_to("chat.startStream")) == 1
    assert not slack.calls_to("chat.postMessage")
    assert len(slack.calls_to("conversations.replies")) == 1  # the re-run looked, once


async def test_a_side_answer_posted_before_a_crash_is_not_posted_again(
    slack: FakeSlack, redis_url: str, llm: FakeLLM
) -> None:
    """A side job whose worker died after posting its answer, before completing the job,
    is delivered again: that run finds the answer by the job's key and posts nothing.
    Another job's answer is posted as usual."""
    llm.reply = "what was decided"
    sender = SlackSender(web_client(TOKEN, slack.api_url), edit_interval=0.2)
    message = inbound("/btw what did we decide?", platform="slack", channel="C1", thread="100.1")
    payload = {"address": message.side_reply.model_dump(), "question": "what did we decide?"}
    job = Job(Keys.jobs("slack", 0), "1-0", "side", message.session_key, payload)
    async with start_workers(redis_url, llm, 1, senders={"slack": sender}) as h:
        answers = h.workers[0].answers
        await answers.side(job)
        await answers.side(dataclasses.replace(job, deliveries=2))  # the run that took it over
        assert len(slack.calls_to("chat.postMessage")) == 1
        await answers.side(dataclasses.replace(job, id="2-0", deliveries=2))
    assert len(slack.calls_to("chat.postMessage")) == 2
    assert len(slack.calls_to("conversations.replies")) == 2  # each re-run looked, once
    assert [m.text.endswith("what was decided") for m in slack.messages.values()] == [True] * 2

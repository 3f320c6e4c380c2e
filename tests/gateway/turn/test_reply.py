"""Replies: the stream a turn writes into (its ids kept under the lease for a re-run) and
the final text posted for each way a turn ends."""

from __future__ import annotations

import datetime as dt

from gateway.delivery.stream import ReplyStream
from gateway.errors import BudgetExceeded, ModelStalled, ModelTimeout
from gateway.feedback.store import FeedbackVerdict
from gateway.state.keys import Keys
from gateway.state.session import Claim
from gateway.turn.generation import TurnResult
from gateway.turn.reply import EMPTY_REPLY, STOPPED_NOTE
from gateway.turn.runner import TurnRunner
from tests.support.helpers import inbound
from tests.support.recording_sender import RecordingSender

MODEL = "openai/the-turns-model"


async def opened(
    turns: TurnRunner, sender: RecordingSender, *, feedback: bool = False
) -> tuple[ReplyStream, Claim, str]:
    message = inbound("question")
    await turns.sessions.append_user(message)
    claim = await turns.sessions.claim(message.session_key, "token", 5.0)
    assert claim.view is not None
    user_id = claim.view.entries[-1]["id"]
    stream = await turns.replies.open(
        message.session_key,
        "token",
        claim,
        sender,
        message.reply,
        user_id,
        recipient=message.speaker.id,
        feedback=feedback,
    )
    return stream, claim, message.session_key


async def test_a_finished_reply_is_posted_and_becomes_the_assistant_entry(
    turns: TurnRunner, sender: RecordingSender
) -> None:
    stream, claim, key = await opened(turns, sender)
    entry = await turns.replies.deliver(
        stream, TurnResult("  The answer.  "), claim.turn_id, key, model=MODEL
    )
    assert list(sender.messages.values()) == ["The answer."]
    assert entry is not None and entry["text"] == "The answer."
    assert entry["turn_id"] == claim.turn_id and entry["platform_message_ids"] == stream.ids


async def test_the_posted_messages_ids_are_kept_for_a_rerun_of_the_turn(
    turns: TurnRunner, sender: RecordingSender
) -> None:
    stream, claim, key = await opened(turns, sender)
    await turns.replies.deliver(stream, TurnResult("posted"), claim.turn_id, key, model=MODEL)
    assert claim.view is not None
    await turns.sessions.redis.delete(Keys.lease(key))  # the run dies before recording
    rerun = await turns.sessions.claim(key, "token-2", 5.0)
    assert rerun.rerun and rerun.ids_for(claim.view.entries[-1]["id"]) == tuple(stream.ids)


async def test_a_stopped_reply_says_so_and_records_what_was_said(
    turns: TurnRunner, sender: RecordingSender
) -> None:
    stream, claim, key = await opened(turns, sender)
    result = TurnResult("Half of it", stopped=True)
    entry = await turns.replies.deliver(stream, result, claim.turn_id, key, model=MODEL)
    assert list(sender.messages.values()) == [f"Half of it{STOPPED_NOTE}"]
    assert entry is not None and entry["text"] == "Half of it"


async def test_an_empty_answer_is_shown_as_empty_and_still_recorded(
    turns: TurnRunner, sender: RecordingSender
) -> None:
    stream, claim, key = await opened(turns, sender)
    entry = await turns.replies.deliver(stream, TurnResult("   "), claim.turn_id, key, model=MODEL)
    assert list(sender.messages.values()) == [EMPTY_REPLY]
    assert entry is not None and entry["text"] == EMPTY_REPLY


async def test_a_failed_call_tells_the_user_and_records_nothing(
    turns: TurnRunner, sender: RecordingSender
) -> None:
    stream, claim, key = await opened(turns, sender)
    result = TurnResult("", error=ModelTimeout("slow"))
    assert await turns.replies.deliver(stream, result, claim.turn_id, key, model=MODEL) is None
    [shown] = sender.messages.values()
    assert ModelTimeout.user_text in shown and "try again" in shown


async def test_a_spent_budget_says_which_and_not_to_try_again(
    turns: TurnRunner, sender: RecordingSender
) -> None:
    stream, claim, key = await opened(turns, sender)
    result = TurnResult("", error=BudgetExceeded("Your daily budget is spent; it resets at 00:00."))
    assert await turns.replies.deliver(stream, result, claim.turn_id, key, model=MODEL) is None
    assert list(sender.messages.values()) == ["⚠️ Your daily budget is spent; it resets at 00:00."]


async def test_a_stall_after_some_text_keeps_it_with_a_note_and_records_it(
    turns: TurnRunner, sender: RecordingSender
) -> None:
    stream, claim, key = await opened(turns, sender)
    result = TurnResult("The first part", error=ModelStalled("idle"))
    entry = await turns.replies.deliver(stream, result, claim.turn_id, key, model=MODEL)
    [shown] = sender.messages.values()
    assert shown.startswith("The first part") and "cut off" in shown
    assert entry is not None and entry["text"] == "The first part"


async def test_a_reply_with_feedback_buttons_takes_clicks_on_its_last_message(
    turns: TurnRunner, sender: RecordingSender
) -> None:
    stream, claim, key = await opened(turns, sender, feedback=True)
    await turns.replies.deliver(stream, TurnResult("The answer."), claim.turn_id, key, model=MODEL)
    address, store = stream.address, turns.replies.feedback
    (message_id,) = stream.ids
    verdict = await store.record(address.platform, address.channel, message_id, "U9", "up")
    assert verdict == FeedbackVerdict.RECORDED
    (vote,) = await store.since(dt.datetime(2000, 1, 1, tzinfo=dt.UTC))
    assert (vote.session, vote.turn, vote.model) == (key, claim.turn_id, MODEL)
    assert (vote.platform, vote.workspace) == (address.platform, address.workspace)


async def test_a_reply_without_feedback_buttons_takes_no_clicks(
    turns: TurnRunner, sender: RecordingSender
) -> None:
    stream, claim, key = await opened(turns, sender)
    await turns.replies.deliver(stream, TurnResult("The answer."), claim.turn_id, key, model=MODEL)
    address, store = stream.address, turns.replies.feedback
    (message_id,) = stream.ids
    verdict = await store.record(address.platform, address.channel, message_id, "U9", "up")
    assert verdict == FeedbackVerdict.UNKNOWN

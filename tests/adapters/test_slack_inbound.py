"""Slack events -> Inbound: sessions, threads, what is ignored."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.slack.inbound import BotIdentity, btw_inbound, session_thread, to_inbound

BOT = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1")


def body(event: dict[str, Any], event_id: str = "Ev1") -> dict[str, Any]:
    return {"type": "event_callback", "team_id": "T1", "event_id": event_id, "event": event}


def mention(**extra: Any) -> dict[str, Any]:
    event = {"type": "app_mention", "user": "U1", "channel": "C1", "ts": "100.1",
             "text": "<@UBOT> what is up?"}
    return {**event, **extra}


def message(**extra: Any) -> dict[str, Any]:
    event = {"type": "message", "channel_type": "channel", "user": "U1", "channel": "C1",
             "ts": "200.1", "text": "hello"}
    return {**event, **extra}


def test_a_top_level_mention_starts_a_thread_under_itself() -> None:
    inbound = to_inbound(body(mention()), BOT, "Ada")
    assert inbound is not None
    assert inbound.session_key == "slack:T1:C1:100.1"
    assert inbound.text == "what is up?"
    assert inbound.mentions_bot and not inbound.is_dm and not inbound.follows_thread
    assert inbound.reply.thread == "100.1" and inbound.reply.reply_to == "100.1"
    assert inbound.side_reply.thread == "100.1" and inbound.side_reply.side
    assert inbound.speaker.name == "Ada" and inbound.speaker.id == "U1"
    assert inbound.event_id == "Ev1" and inbound.message_id == "100.1"


def test_a_mention_inside_a_thread_belongs_to_that_thread() -> None:
    inbound = to_inbound(body(mention(ts="150.2", thread_ts="100.1")), BOT, "Ada")
    assert inbound is not None
    assert inbound.session_key == "slack:T1:C1:100.1"
    assert inbound.follows_thread
    assert inbound.reply.thread == "100.1" and inbound.reply.reply_to == "150.2"


def test_a_thread_follow_up_without_mention_is_passed_on_for_the_core_to_decide() -> None:
    inbound = to_inbound(body(message(ts="150.3", thread_ts="100.1", text="and then?")), BOT, "Ada")
    assert inbound is not None
    assert inbound.follows_thread and not inbound.mentions_bot
    assert inbound.session_key == "slack:T1:C1:100.1"


def test_the_message_copy_of_a_channel_mention_is_dropped() -> None:
    # Slack sends both app_mention and message for one mention, under two event ids.
    copy = message(ts="150.3", thread_ts="100.1", text="<@UBOT> again")
    assert to_inbound(body(copy, "Ev2"), BOT, "Ada") is None


def test_top_level_channel_chatter_is_dropped() -> None:
    assert to_inbound(body(message()), BOT, "Ada") is None


def test_a_dm_is_one_session_and_replies_at_top_level() -> None:
    inbound = to_inbound(body(message(channel="D1", channel_type="im", ts="300.1")), BOT, "Ada")
    assert inbound is not None
    assert inbound.is_dm and inbound.session_key == "slack:T1:D1"
    assert inbound.reply.thread is None and inbound.reply.reply_to == "300.1"
    assert inbound.side_reply.thread == "300.1"


def test_a_dm_thread_is_its_own_session() -> None:
    event = message(channel="D1", channel_type="im", ts="300.5", thread_ts="300.1")
    inbound = to_inbound(body(event), BOT, "Ada")
    assert inbound is not None
    assert inbound.session_key == "slack:T1:D1:300.1" and inbound.reply.thread == "300.1"


def test_a_mention_in_a_dm_is_kept_with_the_mention_stripped() -> None:
    event = message(channel="D1", channel_type="im", text="<@UBOT|gateway>  hi  there")
    inbound = to_inbound(body(event), BOT, "Ada")
    assert inbound is not None and inbound.text == "hi there" and inbound.mentions_bot


@pytest.mark.parametrize("event", [
    message(thread_ts="100.1", subtype="bot_message", bot_id="B2"),
    message(thread_ts="100.1", bot_id="B2"),
    message(thread_ts="100.1", user="UBOT"),
    mention(user="UBOT"),
    message(thread_ts="100.1", subtype="message_changed"),
    message(thread_ts="100.1", subtype="message_deleted"),
    message(thread_ts="100.1", subtype="channel_join"),
    message(channel="D1", channel_type="im", subtype="bot_message", bot_id="B2"),
    {"type": "reaction_added", "user": "U1", "item": {}},
    message(thread_ts="100.1", user=None),
])
def test_what_is_not_a_person_writing_is_ignored(event: dict[str, Any]) -> None:
    assert to_inbound(body(event), BOT, "Ada") is None


@pytest.mark.parametrize("subtype", ["thread_broadcast", "file_share"])
def test_person_subtypes_are_kept(subtype: str) -> None:
    event = message(thread_ts="100.1", ts="150.9", subtype=subtype,
                    files=[{"name": "a.png", "mimetype": "image/png", "url_private": "https://f/a"}])
    inbound = to_inbound(body(event), BOT, "Ada")
    assert inbound is not None
    assert inbound.attachments[0].kind == "image" and inbound.attachments[0].name == "a.png"


def test_native_btw_targets_the_latest_session_and_answers_under_the_quote() -> None:
    command = {"team_id": "T1", "channel_id": "C1", "user_id": "U1",
               "text": " what did we decide? ", "trigger_id": "trig-1", "command": "/btw"}
    inbound = btw_inbound(command, "slack:T1:C1:100.1", "400.1", "Ada")
    assert inbound.session_key == "slack:T1:C1:100.1"
    assert inbound.text == "/btw what did we decide?"
    assert inbound.event_id == "trig-1"
    assert inbound.side_reply.thread == "400.1" and inbound.side_reply.side
    assert inbound.mentions_bot and not inbound.is_dm


def test_native_btw_in_a_dm() -> None:
    command = {"team_id": "T1", "channel_id": "D1", "user_id": "U1", "text": "q", "trigger_id": "t"}
    inbound = btw_inbound(command, "slack:T1:D1", "400.2", "Ada")
    assert inbound.is_dm and inbound.thread is None and inbound.session_key == "slack:T1:D1"


def test_session_thread() -> None:
    assert session_thread("slack:T1:C1:100.1") == "100.1"
    assert session_thread("slack:T1:D1") is None

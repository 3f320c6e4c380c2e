"""Telegram update -> Inbound: what is a message to the bot, sessions, addresses."""

from __future__ import annotations

from typing import Any

from adapters.telegram.inbound import to_inbound

BOT_ID = 123456
BOT = "gw_test_bot"
ALICE = {"id": 42, "is_bot": False, "first_name": "Alice", "last_name": "Liddell"}


def update(
    text: str | None = "hello",
    *,
    chat: dict[str, Any] | None = None,
    update_id: int = 1,
    **message: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "message_id": 7,
        "date": 1700000000,
        "from": ALICE,
        "chat": chat or {"id": 42, "type": "private", "first_name": "Alice"},
    }
    if text is not None:
        body["text"] = text
    body.update(message)
    return {"update_id": update_id, "message": body}


GROUP = {"id": -1001234, "type": "supergroup", "title": "Team", "is_forum": True}


def mention(text: str, name: str = BOT) -> list[dict[str, Any]]:
    return [{"type": "mention", "offset": text.index("@" + name), "length": len(name) + 1}]


def command(text: str) -> list[dict[str, Any]]:
    return [{"type": "bot_command", "offset": 0, "length": len(text.split(" ")[0])}]


def test_private_message_is_a_dm_with_its_own_session() -> None:
    inbound = to_inbound(update("hi there", update_id=99), BOT_ID, BOT)
    assert inbound is not None
    assert inbound.is_dm and inbound.text == "hi there"
    assert inbound.session_key == "telegram:123456:42"
    assert inbound.event_id == "99" and inbound.message_id == "7"
    assert inbound.speaker.name == "Alice Liddell" and inbound.user_key == "telegram:42"
    assert inbound.reply.reply_to is None and inbound.reply.thread is None
    assert inbound.side_reply.reply_to == "7" and inbound.side_reply.side


def test_group_message_without_mention_is_not_addressed_to_the_bot() -> None:
    inbound = to_inbound(update("just chatting", chat=GROUP), BOT_ID, BOT)
    assert inbound is not None
    assert not inbound.is_dm and not inbound.mentions_bot and not inbound.replies_to_bot


def test_group_mention_is_seen_and_stripped() -> None:
    text = f"@{BOT} what is up?"
    inbound = to_inbound(update(text, chat=GROUP, entities=mention(text)), BOT_ID, BOT)
    assert inbound is not None
    assert inbound.mentions_bot and inbound.text == "what is up?"
    assert inbound.reply.reply_to == "7"  # a group answer quotes the question


def test_mention_offsets_are_utf16() -> None:
    text = f"😀 @{BOT} hi"
    entities = [{"type": "mention", "offset": 3, "length": len(BOT) + 1}]
    inbound = to_inbound(update(text, chat=GROUP, entities=entities), BOT_ID, BOT)
    assert inbound is not None and inbound.mentions_bot and inbound.text == "😀 hi"


def test_mention_of_someone_else_is_not_ours() -> None:
    text = "@somebody look"
    inbound = to_inbound(update(text, chat=GROUP, entities=mention(text, "somebody")), BOT_ID, BOT)
    assert inbound is not None and not inbound.mentions_bot


def test_reply_to_the_bot_counts() -> None:
    replied = {
        "message_id": 5,
        "date": 1700000000,
        "chat": GROUP,
        "from": {"id": BOT_ID, "is_bot": True, "first_name": "Gateway"},
        "text": "x",
    }
    inbound = to_inbound(update("and then?", chat=GROUP, reply_to_message=replied), BOT_ID, BOT)
    assert inbound is not None and inbound.replies_to_bot and inbound.reply_to == "5"


def test_topic_message_has_its_own_session_and_replies_in_the_topic() -> None:
    root = {
        "message_id": 77,
        "date": 1700000000,
        "chat": GROUP,
        "from": ALICE,
        "forum_topic_created": {"name": "Plans", "icon_color": 1},
    }
    text = f"@{BOT} hi"
    inbound = to_inbound(
        update(
            text,
            chat=GROUP,
            entities=mention(text),
            message_thread_id=77,
            is_topic_message=True,
            reply_to_message=root,
        ),
        BOT_ID,
        BOT,
    )
    assert inbound is not None
    assert inbound.thread == "77" and inbound.session_key == "telegram:123456:-1001234:77"
    assert inbound.reply.thread == "77" and inbound.side_reply.thread == "77"
    assert inbound.reply_to is None  # the topic root is not a reply the user made


def test_commands_addressed_to_us_are_kept_as_is_and_others_dropped() -> None:
    ours = "/btw@gw_test_bot what did we decide?"
    inbound = to_inbound(update(ours, chat=GROUP, entities=command(ours)), BOT_ID, BOT)
    assert inbound is not None and inbound.mentions_bot and inbound.text == ours
    theirs = "/btw@other_bot what?"
    assert to_inbound(update(theirs, chat=GROUP, entities=command(theirs)), BOT_ID, BOT) is None


def test_bare_command_of_ours_in_a_group_is_addressed() -> None:
    text = "/status"
    inbound = to_inbound(update(text, chat=GROUP, entities=command(text)), BOT_ID, BOT)
    assert inbound is not None and inbound.mentions_bot


def test_edits_service_messages_and_bots_are_ignored() -> None:
    edited = {"update_id": 3, "edited_message": update()["message"]}
    assert to_inbound(edited, BOT_ID, BOT) is None
    joined = update(None, chat=GROUP, new_chat_members=[ALICE])
    assert to_inbound(joined, BOT_ID, BOT) is None
    other_bot = update("beep", chat=GROUP)
    other_bot["message"]["from"] = {"id": 9, "is_bot": True, "first_name": "Other"}
    assert to_inbound(other_bot, BOT_ID, BOT) is None
    itself = update("echo", chat=GROUP)
    itself["message"]["from"] = {"id": BOT_ID, "is_bot": True, "first_name": "Gateway"}
    assert to_inbound(itself, BOT_ID, BOT) is None


def test_caption_is_the_text_of_a_photo() -> None:
    photo = [{"file_id": "f", "file_unique_id": "u", "width": 1, "height": 1}]
    inbound = to_inbound(update(None, photo=photo, caption="look at this"), BOT_ID, BOT)
    assert inbound is not None and inbound.text == "look at this"


def test_speaker_without_a_name_falls_back_to_username() -> None:
    body = update("hi")
    body["message"]["from"] = {"id": 8, "is_bot": False, "first_name": "", "username": "bob"}
    inbound = to_inbound(body, BOT_ID, BOT)
    assert inbound is not None and inbound.speaker.name == "bob"

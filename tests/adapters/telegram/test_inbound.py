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


def photo_sizes(*sizes: int | None) -> list[dict[str, Any]]:
    """PhotoSizes of growing dimensions, each with the declared file size given."""
    found = []
    for i, size in enumerate(sizes):
        side = 90 * (i + 1)
        found.append({"file_id": f"p{i}", "file_unique_id": f"u{i}", "width": side, "height": side})
        if size is not None:
            found[-1]["file_size"] = size
    return found


def test_a_photo_with_a_caption_is_a_message_with_an_image() -> None:
    raw = update(None, caption="what is this?", photo=photo_sizes(1_000, 50_000, 400_000))
    inbound = to_inbound(raw, BOT_ID, BOT)
    assert inbound is not None and inbound.text == "what is this?"
    [photo] = inbound.attachments
    assert (photo.kind, photo.file_id, photo.size) == ("image", "p2", 400_000)
    assert (photo.name, photo.mime_type, photo.url) == ("photo.jpg", "image/jpeg", None)


def test_a_bare_photo_is_a_message_too() -> None:
    inbound = to_inbound(update(None, photo=photo_sizes(1_000)), BOT_ID, BOT)
    assert inbound is not None and inbound.text == "" and len(inbound.attachments) == 1


def test_the_largest_photo_within_the_file_limit_is_chosen() -> None:
    raw = update(None, photo=photo_sizes(10_000, 900_000, 3_000_000))
    inbound = to_inbound(raw, BOT_ID, BOT, file_limit=1_000_000)
    assert inbound is not None and inbound.attachments[0].file_id == "p1"


def test_with_no_photo_within_the_limit_the_largest_is_taken_and_refused_later() -> None:
    raw = update(None, photo=photo_sizes(3_000_000, 9_000_000))
    inbound = to_inbound(raw, BOT_ID, BOT, file_limit=1_000_000)
    assert inbound is not None
    assert (inbound.attachments[0].file_id, inbound.attachments[0].size) == ("p1", 9_000_000)


def test_photo_sizes_without_a_declared_size_go_by_their_dimensions() -> None:
    inbound = to_inbound(update(None, photo=photo_sizes(None, None)), BOT_ID, BOT)
    assert inbound is not None and inbound.attachments[0].file_id == "p1"


def test_a_document_keeps_its_name_type_and_size() -> None:
    document = {
        "file_id": "d1",
        "file_unique_id": "ud1",
        "file_name": "report.pdf",
        "mime_type": "application/pdf",
        "file_size": 12_345,
    }
    inbound = to_inbound(update(None, caption="summarise", document=document), BOT_ID, BOT)
    assert inbound is not None and inbound.text == "summarise"
    [file] = inbound.attachments
    assert (file.kind, file.name, file.mime_type, file.size, file.file_id) == (
        "file",
        "report.pdf",
        "application/pdf",
        12_345,
        "d1",
    )


def test_an_image_sent_as_a_document_is_an_image() -> None:
    document = {
        "file_id": "d2",
        "file_unique_id": "u",
        "file_name": "a.png",
        "mime_type": "image/png",
    }
    inbound = to_inbound(update(None, document=document), BOT_ID, BOT)
    assert inbound is not None and inbound.attachments[0].kind == "image"


def test_voice_audio_and_video_notes_are_voice_with_stable_names() -> None:
    voice = {"file_id": "v1", "file_unique_id": "u", "duration": 3, "file_size": 9_000}
    audio = {"file_id": "a1", "file_unique_id": "u", "duration": 60, "mime_type": "audio/mpeg"}
    named = audio | {"file_name": "song.mp3"}
    note = {"file_id": "n1", "file_unique_id": "u", "length": 240, "duration": 5}
    found = {}
    for kind, body in (("voice", voice), ("audio", audio), ("audio", named), ("video_note", note)):
        inbound = to_inbound(update(None, **{kind: body}), BOT_ID, BOT)
        assert inbound is not None
        [file] = inbound.attachments
        assert file.kind == "voice"
        found[file.name] = (file.mime_type, file.file_id)
    assert found == {
        "voice.ogg": ("audio/ogg", "v1"),
        "audio.mp3": ("audio/mpeg", "a1"),
        "song.mp3": ("audio/mpeg", "a1"),
        "video_note.mp4": ("video/mp4", "n1"),
    }


def test_an_album_item_carries_its_media_group() -> None:
    raw = update(None, photo=photo_sizes(1_000), media_group_id="13579")
    inbound = to_inbound(raw, BOT_ID, BOT)
    assert inbound is not None and inbound.media_group == "13579"
    plain = to_inbound(update("hi"), BOT_ID, BOT)
    assert plain is not None and plain.media_group is None


def test_a_photo_in_a_group_is_addressed_by_a_mention_in_its_caption() -> None:
    caption = f"@{BOT} look"
    raw = update(
        None,
        chat=GROUP,
        caption=caption,
        caption_entities=mention(caption),
        photo=photo_sizes(1_000),
    )
    inbound = to_inbound(raw, BOT_ID, BOT)
    assert inbound is not None and inbound.mentions_bot and inbound.text == "look"


def test_a_sticker_alone_is_not_a_message() -> None:
    sticker = {
        "file_id": "s1",
        "file_unique_id": "u",
        "type": "regular",
        "width": 512,
        "height": 512,
        "is_animated": False,
        "is_video": False,
    }
    assert to_inbound(update(None, sticker=sticker), BOT_ID, BOT) is None


def test_a_file_whose_fields_are_not_of_the_documented_types_is_dropped() -> None:
    bad_size = {"file_id": "v", "file_unique_id": "u", "duration": 1, "file_size": "big"}
    bad_type = {"file_id": "v", "file_unique_id": "u", "duration": 1, "mime_type": ["audio"]}
    for voice in (bad_size, bad_type):
        assert to_inbound(update(None, voice=voice), BOT_ID, BOT) is None
    group = update(None, photo=photo_sizes(1), media_group_id=["not", "text"])
    assert to_inbound(group, BOT_ID, BOT) is None

"""The pure conversion of Discord messages and interactions to Inbound."""

from __future__ import annotations

from typing import Any

from adapters.discord.inbound import interaction_inbound, strip_mention, to_inbound
from adapters.discord.render import render
from gateway.messages import Attachment
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.discord_files import VOICE_MESSAGE_FLAG

BOT = "1100000000000000001"
GUILD, CHANNEL = "1200000000000000001", "1300000000000000001"
fake = FakeDiscord(bot_id=BOT)
alice = fake.user("42", "alice")
bot_user = fake.bot


def channel_message(content: str, **kw: Any) -> dict[str, Any]:
    return fake.message(CHANNEL, content, kw.pop("author", alice), guild_id=GUILD, **kw)


def test_a_dm_is_its_own_session_and_counts() -> None:
    inbound = to_inbound(fake.message("555", "hello", alice), bot_id=BOT, in_thread=False)
    assert inbound is not None
    assert inbound.is_dm and inbound.workspace == "dm" and inbound.channel == "555"
    assert inbound.session_key == "discord:dm:555"
    assert inbound.speaker.id == "42" and inbound.speaker.name == "Alice"
    assert inbound.reply.reply_to is None
    assert inbound.event_id == inbound.message_id


def test_a_mention_in_a_channel_is_stripped_and_quoted() -> None:
    message = channel_message(f"<@{BOT}> what is  up? <@!{BOT}>", mentions=(bot_user,))
    inbound = to_inbound(message, bot_id=BOT, in_thread=False)
    assert inbound is not None
    assert inbound.mentions_bot and not inbound.is_dm and not inbound.follows_thread
    assert inbound.text == "what is up?"
    assert inbound.session_key == f"discord:{GUILD}:{CHANNEL}"
    assert inbound.thread is None
    assert inbound.reply.reply_to == message["id"]


def test_a_channel_message_without_mention_is_not_addressed() -> None:
    inbound = to_inbound(channel_message("just chatting"), bot_id=BOT, in_thread=False)
    assert inbound is not None
    assert not (
        inbound.mentions_bot or inbound.replies_to_bot or inbound.is_dm or inbound.follows_thread
    )


def test_a_reply_to_the_bot_counts() -> None:
    earlier = fake.message(CHANNEL, "an answer", bot_user, guild_id=GUILD)
    message = channel_message("and then?", reply_to=earlier)
    inbound = to_inbound(message, bot_id=BOT, in_thread=False)
    assert inbound is not None
    assert inbound.replies_to_bot and inbound.reply_to == earlier["id"]


def test_a_thread_message_follows_the_thread_and_the_thread_is_the_session() -> None:
    inbound = to_inbound(
        fake.message("777", "more", alice, guild_id=GUILD), bot_id=BOT, in_thread=True
    )
    assert inbound is not None
    assert inbound.follows_thread and inbound.channel == "777" and inbound.thread is None
    assert inbound.reply.reply_to is None


def test_a_thread_created_from_the_message_takes_the_session_and_the_reply() -> None:
    message = channel_message(f"<@{BOT}> start", mentions=(bot_user,))
    inbound = to_inbound(message, bot_id=BOT, in_thread=False, session_channel=message["id"])
    assert inbound is not None
    assert inbound.channel == message["id"] == inbound.reply.channel
    assert inbound.reply.reply_to is None and inbound.side_reply.reply_to is None


def test_typed_btw_replies_to_the_question_as_a_side_message() -> None:
    message = channel_message(f"<@{BOT}> !btw what was decided?", mentions=(bot_user,))
    inbound = to_inbound(message, bot_id=BOT, in_thread=False)
    assert inbound is not None
    assert inbound.text == "!btw what was decided?"
    assert inbound.side_reply.side and inbound.side_reply.reply_to == message["id"]
    assert inbound.side_reply.channel == CHANNEL


def test_bots_webhooks_the_bot_itself_and_system_messages_are_dropped() -> None:
    other_bot = fake.user("99", "otherbot", bot=True)
    dropped = [
        channel_message("hi", author=other_bot, mentions=(bot_user,)),
        channel_message("hi", author=bot_user),
        channel_message("hi", webhook_id="5", mentions=(bot_user,)),
        channel_message("", kind=7),  # member joined
        channel_message("pinned", kind=6, mentions=(bot_user,)),
    ]
    assert [to_inbound(m, bot_id=BOT, in_thread=False) for m in dropped] == [None] * 5


def test_attachments_are_kept_by_reference() -> None:
    message = fake.message("555", "look", alice)
    message["attachments"] = [
        {"url": "https://cdn/x.png", "filename": "x.png", "content_type": "image/png"}
    ]
    inbound = to_inbound(message, bot_id=BOT, in_thread=False)
    assert inbound is not None
    assert inbound.attachments[0].kind == "image" and inbound.attachments[0].name == "x.png"


def test_an_attachment_keeps_its_declared_size() -> None:
    png = fake.cdn.add("x.png", b"\x89PNG" * 100, "image/png")
    inbound = to_inbound(
        fake.message("555", "look", alice, attachments=(png,)), bot_id=BOT, in_thread=False
    )
    assert inbound is not None
    [attachment] = inbound.attachments
    assert (attachment.kind, attachment.size, attachment.url) == ("image", 400, png["url"])


def test_a_voice_message_and_an_audio_file_are_voice() -> None:
    recording = fake.cdn.add("voice-message.ogg", b"OggS", "application/octet-stream", voice=True)
    flagged = fake.message("555", "", alice, attachments=(recording,), flags=VOICE_MESSAGE_FLAG)
    audio = fake.message(
        "555", "", alice, attachments=(fake.cdn.add("a.mp3", b"ID3", "audio/mpeg"),)
    )
    unflagged = fake.message("555", "", alice, attachments=(recording,))
    kinds = [
        [a.kind for a in inbound.attachments]
        for inbound in (
            to_inbound(m, bot_id=BOT, in_thread=False) for m in (flagged, audio, unflagged)
        )
        if inbound is not None
    ]
    assert kinds == [["voice"], ["voice"], ["file"]]


def test_attachments_of_the_wrong_shape_are_left_out() -> None:
    message = fake.message("555", "look", alice)
    message["attachments"] = ["x", {"filename": 3, "size": -1, "url": None}]
    inbound = to_inbound(message, bot_id=BOT, in_thread=False)
    assert inbound is not None
    assert inbound.attachments == (Attachment(kind="file"),)


def test_the_btw_command_carries_the_interaction_token_on_both_addresses() -> None:
    inbound = interaction_inbound(
        interaction_id="9",
        token="tok",
        channel_id=CHANNEL,
        guild_id=GUILD,
        user=alice,
        text="/btw why?",
    )
    assert inbound.text == "/btw why?" and inbound.event_id == "9"
    assert inbound.side_reply.token == "tok" and inbound.side_reply.side
    assert inbound.reply.token == "tok" and not inbound.reply.side
    assert "tok" not in repr(inbound.side_reply)
    assert inbound.session_key == f"discord:{GUILD}:{CHANNEL}"


def test_a_mention_of_the_bots_role_counts_as_a_mention() -> None:
    message = fake.role_mention(CHANNEL, GUILD, "hello", alice)
    role = fake.bot_role_id(GUILD)
    inbound = to_inbound(message, bot_id=BOT, in_thread=False, bot_role_id=role)
    assert inbound is not None and inbound.mentions_bot and inbound.text == "hello"
    unknown = to_inbound(message, bot_id=BOT, in_thread=False, bot_role_id=None)
    assert unknown is not None and not unknown.mentions_bot


def test_strip_mention_leaves_other_mentions() -> None:
    assert strip_mention(f"<@{BOT}> ask <@42>", BOT) == "ask <@42>"


def test_render_keeps_discord_markdown_and_code_blocks() -> None:
    text = "# Title\n#### Deep\n![cat](https://x/c.png)\n```\n#### not a heading\n```"
    assert render(text) == (
        "# Title\n**Deep**\n[cat](https://x/c.png)\n```\n#### not a heading\n```"
    )
    assert render("  ") == "…"

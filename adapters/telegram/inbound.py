"""Telegram update -> Inbound, a pure function.

What counts as a message to the bot: everything in a private chat; in groups,
a message that mentions `@botusername`, replies to one of the bot's messages,
or is a command addressed to the bot. The core applies that rule from the
flags set here (`is_dm`, `mentions_bot`, `replies_to_bot`); this module drops
what is never ours: edits, service messages, other bots (and the bot itself),
automatic forwards from a linked channel, and commands addressed to another
bot (`/cmd@otherbot`). An update whose ids or texts are not of the types the
Bot API documents (python-telegram-bot reads JSON without checking them) is
dropped too, with one log line (`adapters.fields`).

A click on an approval request's button arrives as a callback query whose data
is `a:<approval id>:y|n`; `to_decision` makes it a `Decision`, after the same
checks of its ids. A click on a reply's feedback buttons (`f:up`, `f:down`) is one
too; `to_feedback` makes it a `FeedbackClick` on the message it is under.

Sessions: one per chat, one per forum topic (`thread` = `message_thread_id`
when the message is a topic message). The session's workspace is the bot's id:
update ids, message ids and chats are all seen through one bot.

Files: a photo (the largest size Telegram offers within the per-file limit,
else the largest, which the worker then refuses by size), a document, a voice
note, an audio file or a video note becomes an Attachment carrying its
`file_id` (the worker asks getFile where it is, `adapters.telegram.files`),
declared size, type and a name (a voice note has none: `voice.ogg`). Voice,
audio and video notes are of kind "voice": they are transcribed. The caption is
the message's text. Each item of an album arrives as a message of its own
sharing a `media_group_id`, which the Inbound carries: ingest gathers the items
into one user message (`gateway/state/scripts/album.lua`).
"""

from __future__ import annotations

import logging
import mimetypes
from collections.abc import Sequence
from typing import Any

from telegram import CallbackQuery, Message, MessageEntity, PhotoSize, Update

from adapters.attachments import attachment
from adapters.buttons import (
    parse_approval_payload,
    parse_feedback_payload,
    valid_approval_payload,
    valid_feedback_payload,
)
from adapters.fields import (
    INT64_MAX,
    INT64_MIN,
    Check,
    Field,
    integer,
    invalid,
    is_text,
    one_of,
    optional,
    pattern,
)
from gateway.inbound import commands
from gateway.messages import Address, Attachment, Decision, FeedbackClick, Inbound, Speaker

log = logging.getLogger(__name__)

PLATFORM = "telegram"
# The Bot API's ids are integers of up to 64 bits; only a chat's may be negative (groups).
_UPDATE_ID = integer(0, INT64_MAX)
_POSITIVE_ID = integer(1, INT64_MAX)
_CHAT_ID = integer(INT64_MIN, INT64_MAX)
_QUERY_ID = pattern(r"[0-9]{1,32}")  # a callback query's id: digits, sent as a string
_CHAT_TYPE = one_of("private", "group", "supergroup", "channel")
_SIZE = optional(integer(0, INT64_MAX))
_DIMENSION = integer(0, INT64_MAX)
DEFAULT_FILE_LIMIT = 20_000_000  # GATEWAY_MEDIA_FILE_BYTES's default
# Kinds of file a message may carry, the name given when Telegram sends none, and
# the type assumed when it declares none (voice notes are Opus in OGG, video notes MP4).
_FILES = {
    "document": ("file", "document", None),
    "voice": ("voice", "voice.ogg", "audio/ogg"),
    "audio": ("voice", "audio", None),
    "video_note": ("voice", "video_note.mp4", "video/mp4"),
}


def to_inbound(
    update: Update | dict[str, Any],
    bot_id: int,
    bot_username: str,
    file_limit: int = DEFAULT_FILE_LIMIT,
) -> Inbound | None:
    """The Inbound for a new message to the bot, or None when the update is not one.

    `file_limit` is the per-file byte limit: a photo's size is chosen within it."""
    if isinstance(update, dict):
        update = Update.de_json(update, None)
    message = update.message  # edited_message, channel_post, ... are not ours
    if message is None or not _from_a_person(message):
        return None
    if invalid(PLATFORM, _fields(update, message)):
        return None
    text = (message.text if message.text is not None else message.caption) or ""
    files = attachments(message, file_limit)
    if not text and not files:
        return None  # a service message (members joined, topic created, ...) or a sticker
    command_target = _command_target(message)
    if command_target is not None and command_target != bot_username.lower():
        return None  # `/cmd@otherbot` belongs to another bot in the group
    is_dm = message.chat.type == "private"
    mentioned = _mentions(message, bot_username)
    addressed = command_target is not None or _is_our_bare_command(message)
    replied = _replied_message(message)
    return _build(
        update,
        message,
        bot_id,
        is_dm=is_dm,
        text=_strip_mentions(message, text, bot_username) if mentioned else text,
        mentions_bot=mentioned or addressed,
        replies_to_bot=replied is not None
        and replied.from_user is not None
        and replied.from_user.id == bot_id,
        reply_to=str(replied.message_id) if replied is not None else None,
        files=files,
    )


def attachments(message: Message, file_limit: int = DEFAULT_FILE_LIMIT) -> tuple[Attachment, ...]:
    """The files a message carries, as Attachments fetched later by `file_id`."""
    if message.photo:
        return (_photo(message.photo, file_limit),)
    for field_name, (kind, default_name, default_mime) in _FILES.items():
        sent = getattr(message, field_name)
        if sent is None:
            continue
        mime = getattr(sent, "mime_type", None) or default_mime
        name = getattr(sent, "file_name", None) or _named(default_name, mime)
        found = attachment(url=None, name=name, mime_type=mime)  # an image when its type says
        kind = kind if kind == "voice" else found.kind
        return (
            found.model_copy(
                update={"kind": kind, "size": sent.file_size, "file_id": sent.file_id}
            ),
        )
    return ()


def _photo(sizes: Sequence[PhotoSize], file_limit: int) -> Attachment:
    """The largest size whose declared bytes are within the limit, else the largest (which
    the worker refuses by its size, with a notice)."""
    ordered = sorted(sizes, key=lambda p: (p.file_size or 0, p.width * p.height))
    within = [p for p in ordered if p.file_size is not None and p.file_size <= file_limit]
    photo = (within or ordered)[-1]
    return Attachment(
        kind="image",
        name="photo.jpg",  # Telegram re-encodes every photo as JPEG
        mime_type="image/jpeg",
        size=photo.file_size,
        file_id=photo.file_id,
    )


def _named(default: str, mime: str | None) -> str:
    """`default`, with the suffix of its type when it has none (`audio` -> `audio.mp3`)."""
    if "." in default or not mime:
        return default
    suffix = mimetypes.guess_extension(mime)
    return default + suffix if suffix else default


def _build(
    update: Update,
    message: Message,
    bot_id: int,
    *,
    is_dm: bool,
    text: str,
    mentions_bot: bool,
    replies_to_bot: bool,
    reply_to: str | None,
    files: tuple[Attachment, ...],
) -> Inbound:
    user = message.from_user
    assert user is not None
    workspace, channel = str(bot_id), str(message.chat.id)
    thread = str(message.message_thread_id) if message.is_topic_message else None
    message_id = str(message.message_id)
    # In groups the first message of a reply quotes the user's message, so the
    # reader sees which of several people the bot answers; in a private chat
    # there is only one person and a quote would be noise.
    main_reply_to = None if is_dm else message_id
    reply = Address(
        platform=PLATFORM,
        workspace=workspace,
        channel=channel,
        thread=thread,
        reply_to=main_reply_to,
    )
    return Inbound(
        platform=PLATFORM,
        workspace=workspace,
        channel=channel,
        thread=thread,
        message_id=message_id,
        event_id=str(update.update_id),
        speaker=Speaker(id=str(user.id), name=_name(message)),
        text=text,
        is_dm=is_dm,
        mentions_bot=mentions_bot,
        reply_to=reply_to,
        replies_to_bot=replies_to_bot,
        attachments=files,
        media_group=message.media_group_id,
        reply=reply,
        side_reply=reply.model_copy(update={"reply_to": message_id, "side": True}),
    )


def _fields(update: Update, message: Message) -> list[Field]:
    """The ids and texts the conversion reads, each with the check of its documented type."""
    chat, user, replied = message.chat, message.from_user, message.reply_to_message
    fields: list[Field] = [
        ("update_id", update.update_id, _UPDATE_ID),
        ("message.message_id", message.message_id, _POSITIVE_ID),
        ("message.chat.id", getattr(chat, "id", None), _CHAT_ID),
        ("message.chat.type", getattr(chat, "type", None), _CHAT_TYPE),
        ("message.from.id", getattr(user, "id", None), _POSITIVE_ID),
        ("message.message_thread_id", message.message_thread_id, optional(_POSITIVE_ID)),
        ("message.text", message.text, optional(is_text)),
        ("message.caption", message.caption, optional(is_text)),
    ]
    if replied is not None:
        fields.append(("message.reply_to_message.message_id", replied.message_id, _POSITIVE_ID))
    return fields + _file_fields(message)


def _file_fields(message: Message) -> list[Field]:
    """The file fields the conversion reads: ids and names are strings, sizes integers."""
    sent: list[tuple[str, Any]] = [(f"message.photo[{i}]", p) for i, p in enumerate(message.photo)]
    sent += [(f"message.{name}", getattr(message, name)) for name in _FILES]
    fields: list[Field] = [("message.media_group_id", message.media_group_id, optional(is_text))]
    for where, file in sent:
        if file is None:
            continue
        fields += [
            (f"{where}.file_id", getattr(file, "file_id", None), is_text),
            (f"{where}.file_size", getattr(file, "file_size", None), _SIZE),
            (f"{where}.mime_type", getattr(file, "mime_type", None), optional(is_text)),
            (f"{where}.file_name", getattr(file, "file_name", None), optional(is_text)),
        ]
        if where.startswith("message.photo"):
            fields += [
                (f"{where}.width", getattr(file, "width", None), _DIMENSION),
                (f"{where}.height", getattr(file, "height", None), _DIMENSION),
            ]
    return fields


def to_decision(update: Update, bot_id: int) -> Decision | None:
    """A click on an approval button; None when malformed or a bot's (one log line)."""
    query = _a_persons_click(update, valid_approval_payload)
    if query is None:
        return None
    parsed = parse_approval_payload(query.data)
    assert parsed is not None  # checked by _click_fields
    return Decision(
        platform=PLATFORM,
        approval_id=parsed[0],
        user_id=str(query.from_user.id),
        approve=parsed[1],
        event_id=f"callback:{query.id}",
        address=_click_address(query, bot_id),
    )


def to_feedback(update: Update, bot_id: int) -> FeedbackClick | None:
    """A click on a reply's feedback button; None when malformed or a bot's."""
    query = _a_persons_click(update, valid_feedback_payload)
    if query is None:
        return None
    message = query.message
    assert message is not None  # checked by _click_fields
    message_id = getattr(message, "message_id", None)
    if invalid(PLATFORM, [("callback_query.message.message_id", message_id, _POSITIVE_ID)]):
        return None
    value = parse_feedback_payload(query.data)
    assert value is not None
    return FeedbackClick(
        platform=PLATFORM,
        channel=str(message.chat.id),
        message_id=str(message_id),
        user_id=str(query.from_user.id),
        value=value,
        address=_click_address(query, bot_id),
    )


def is_feedback(update: Update) -> bool:
    """Whether a callback query is a click on a feedback button (by its data's form)."""
    query = update.callback_query
    return query is not None and valid_feedback_payload(query.data)


def _a_persons_click(update: Update, data: Check) -> CallbackQuery | None:
    """The callback query when its ids are well formed, its data passes `data`, and a
    person clicked (a bot's click is dropped, with one log line)."""
    query = update.callback_query
    if query is None or invalid(PLATFORM, _click_fields(update, query, data)):
        return None
    if query.from_user.is_bot:
        log.info("telegram: a click by a bot dropped")
        return None
    return query


def _click_address(query: CallbackQuery, bot_id: int) -> Address:
    message = query.message
    assert message is not None
    thread = getattr(message, "message_thread_id", None)
    return Address(
        platform=PLATFORM,
        workspace=str(bot_id),
        channel=str(message.chat.id),
        thread=str(thread) if thread else None,
    )


def _click_fields(update: Update, query: CallbackQuery, data: Check) -> list[Field]:
    message = query.message
    return [
        ("update_id", update.update_id, _UPDATE_ID),
        ("callback_query.id", query.id, _QUERY_ID),
        ("callback_query.from.id", getattr(query.from_user, "id", None), _POSITIVE_ID),
        ("callback_query.data", query.data, data),
        ("callback_query.message.chat.id", getattr(getattr(message, "chat", None), "id", None),
         _CHAT_ID),
        ("callback_query.message.message_thread_id",
         getattr(message, "message_thread_id", None), optional(_POSITIVE_ID)),
    ]  # fmt: skip


def _from_a_person(message: Message) -> bool:
    user = message.from_user
    # Anonymous group admins and channel posts arrive "from" a bot account,
    # automatic forwards from a linked channel as the service user: neither is a person.
    return user is not None and not user.is_bot and not message.is_automatic_forward


def _name(message: Message) -> str:
    user = message.from_user
    assert user is not None
    return user.full_name or user.username or str(user.id)


def _entities(message: Message) -> dict[MessageEntity, str]:
    if message.text is not None:
        return message.parse_entities()
    return message.parse_caption_entities()


def _command_target(message: Message) -> str | None:
    """The lowercased `botname` of a leading `/cmd@botname`, None when there is no suffix."""
    for entity, value in _entities(message).items():
        if entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0 and "@" in value:
            return value.split("@", 1)[1].lower()
    return None


def _is_our_bare_command(message: Message) -> bool:
    """A leading `/btw` (no suffix) in a group: one of the commands we registered."""
    for entity, value in _entities(message).items():
        if entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0:
            return value[1:].lower() in commands.NAMES
    return False


def _mentions(message: Message, bot_username: str) -> bool:
    ours = "@" + bot_username.lower()
    return any(
        entity.type == MessageEntity.MENTION and value.lower() == ours
        for entity, value in _entities(message).items()
    )


def _strip_mentions(message: Message, text: str, bot_username: str) -> str:
    """Remove `@botusername` mentions (offsets are UTF-16 code units, hence the encoding)."""
    ours = "@" + bot_username.lower()
    spans = sorted(
        (entity.offset, entity.offset + entity.length)
        for entity, value in _entities(message).items()
        if entity.type == MessageEntity.MENTION and value.lower() == ours
    )
    encoded = text.encode("utf-16-le")
    kept, cursor = [], 0
    for start, end in spans:
        kept.append(encoded[cursor * 2 : start * 2])
        cursor = end + 1 if encoded[end * 2 : end * 2 + 2] == " ".encode("utf-16-le") else end
    kept.append(encoded[cursor * 2 :])
    return b"".join(kept).decode("utf-16-le").strip() or text


def _replied_message(message: Message) -> Message | None:
    """The message this one replies to, ignoring the topic root every topic message points at."""
    replied = message.reply_to_message
    if replied is None:
        return None
    if message.is_topic_message and (
        replied.forum_topic_created is not None or replied.message_id == message.message_thread_id
    ):
        return None
    return replied

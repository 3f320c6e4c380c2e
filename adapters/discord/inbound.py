"""Discord messages and interactions to `Inbound`: pure functions over Discord's JSON shapes.

`to_inbound` takes a message object as the API documents it (the body of a
MESSAGE_CREATE); `payload_of` reduces a discord.py `Message` to that shape, so
the rules below can be tested on plain dicts and run on live events alike.

Sessions: one per DM, one per thread, one per channel otherwise. A Discord
thread is a channel of its own, so `Inbound.channel` is the thread's id and
`Inbound.thread` stays unset; the workspace is the guild id, or "dm".

Ids are snowflakes: unsigned 64-bit integers, sent as strings of digits.
discord.py reads them with `int()`, which takes `-5` and `2**70` too, and it
keeps a message's content whatever its JSON type; so both functions check the
ids and text they read and drop an event whose do not fit, with one log line
(`adapters.fields`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

import discord

from adapters.attachments import attachment
from adapters.buttons import (
    parse_approval_payload,
    parse_feedback_payload,
    valid_approval_payload,
    valid_feedback_payload,
)
from adapters.fields import (
    Check,
    Field,
    first_invalid,
    invalid,
    is_mapping,
    is_text,
    optional,
    snowflake,
)
from adapters.mentions import strip_mentions
from gateway.messages import Address, Attachment, Decision, FeedbackClick, Inbound, Speaker

log = logging.getLogger(__name__)

PLATFORM = "discord"
DM_WORKSPACE = "dm"
# DEFAULT and REPLY are people talking; every other type is a join, a pin, a boost...
_CONVERSATION_TYPES = frozenset({0, 19})
VOICE_MESSAGE_FLAG = 1 << 13  # IS_VOICE_MESSAGE
PRIVATE_CHANNEL_CONTEXT = 2  # an interaction's context: a group DM, or a DM without the bot


def payload_of(message: discord.Message) -> dict[str, Any]:
    """The fields of a discord.py Message that `to_inbound` reads, in the API's shape."""
    author = message.author
    payload: dict[str, Any] = {
        "id": str(message.id),
        "channel_id": str(message.channel.id),
        "guild_id": str(message.guild.id) if message.guild else None,
        "type": message.type.value,
        "content": message.content,
        "webhook_id": str(message.webhook_id) if message.webhook_id else None,
        "author": {
            "id": str(author.id),
            "username": author.name,
            "global_name": author.global_name,
            "bot": author.bot,
        },
        "mentions": [{"id": str(user.id)} for user in message.mentions],
        # discord.py finds role mentions in the content: only a text has any to find.
        "mention_roles": (
            [str(role_id) for role_id in message.raw_role_mentions]
            if isinstance(message.content, str)
            else []
        ),
        "flags": message.flags.value,
        "attachments": [
            {"url": a.url, "filename": a.filename, "content_type": a.content_type, "size": a.size}
            for a in message.attachments
        ],
        "referenced_message": None,
    }
    reference = message.reference
    if reference is not None and reference.message_id:
        payload["message_reference"] = {"message_id": str(reference.message_id)}
    if reference is not None and isinstance(reference.resolved, discord.Message):
        payload["referenced_message"] = {
            "id": str(reference.resolved.id),
            "author": {"id": str(reference.resolved.author.id)},
        }
    return payload


def to_inbound(
    payload: Mapping[str, Any],
    *,
    bot_id: str,
    in_thread: bool,
    session_channel: str | None = None,
    bot_role_id: str | None = None,
) -> Inbound | None:
    """The Inbound for one MESSAGE_CREATE body, or None when it is not for the gateway.

    Dropped: the bot's own messages, other bots, webhooks, system messages.
    `in_thread` says the channel is a thread (the payload does not carry the
    channel's type); `session_channel`, when set, is a thread the adapter just
    created from this message, which becomes the session and takes the reply.
    `bot_role_id` is the bot's own role in the guild: people often pick it from
    the mention list instead of the bot user, and mean the bot all the same.
    """
    if invalid(PLATFORM, message_fields(payload, session_channel)):
        return None
    author = payload["author"]
    if author["id"] == bot_id or author.get("bot") or payload.get("webhook_id"):
        return None
    if payload.get("type", 0) not in _CONVERSATION_TYPES:
        return None
    guild_id = payload.get("guild_id")
    channel = session_channel or str(payload["channel_id"])
    message_id = str(payload["id"])
    mentions_bot = any(str(user["id"]) == bot_id for user in payload.get("mentions") or ())
    mentions_bot = mentions_bot or (
        bot_role_id is not None and bot_role_id in (payload.get("mention_roles") or ())
    )
    referenced = payload.get("referenced_message") or {}
    replies_to_bot = str((referenced.get("author") or {}).get("id", "")) == bot_id
    workspace = str(guild_id) if guild_id else DM_WORKSPACE
    # In a busy channel the answer quotes the question; in a DM or a thread the
    # conversation is already private to it, and a new thread holds only it.
    quote = guild_id is not None and not in_thread and session_channel is None
    reply = Address(
        platform=PLATFORM,
        workspace=workspace,
        channel=channel,
        reply_to=message_id if quote else None,
    )
    return Inbound(
        platform=PLATFORM,
        workspace=workspace,
        channel=channel,
        message_id=message_id,
        event_id=message_id,
        speaker=_speaker(author),
        text=strip_mention(payload["content"], bot_id, bot_role_id),
        is_dm=guild_id is None,
        mentions_bot=mentions_bot,
        replies_to_bot=replies_to_bot,
        reply_to=_reference_id(payload),
        follows_thread=in_thread or session_channel is not None,
        attachments=_attachments(payload.get("attachments"), voice=_is_voice(payload)),
        reply=reply,
        side_reply=Address(
            platform=PLATFORM,
            workspace=workspace,
            channel=channel,
            reply_to=None if session_channel else message_id,
            side=True,
        ),
    )


def message_fields(payload: Mapping[str, Any], session_channel: str | None) -> list[Field]:
    """The ids and text of a message that `to_inbound` reads, with their checks."""
    author = payload.get("author") or {}
    reference = payload.get("message_reference") or {}
    referenced = payload.get("referenced_message") or {}
    shape: list[Field] = [
        ("author", author, is_mapping),
        ("message_reference", reference, is_mapping),
        ("referenced_message", referenced, is_mapping),
    ]
    if first_invalid(shape) is not None:
        return shape
    return [
        ("id", payload.get("id"), snowflake),
        ("channel_id", payload.get("channel_id"), snowflake),
        ("guild_id", payload.get("guild_id"), optional(snowflake)),
        ("author.id", author.get("id"), snowflake),
        ("content", payload.get("content"), is_text),
        ("message_reference.message_id", reference.get("message_id"), optional(snowflake)),
        ("referenced_message.id", referenced.get("id"), optional(snowflake)),
        ("new thread's id", session_channel, optional(snowflake)),
    ]


def interaction_inbound(
    *,
    interaction_id: str,
    token: str,
    channel_id: str,
    guild_id: str | None,
    user: Mapping[str, Any],
    text: str,
    context: int | None = None,
) -> Inbound | None:
    """The Inbound for an application command; None when its ids are malformed.

    `text` is the typed form (`/stop`, `/btw <question>`), so the core parses it
    like a message; every reply (the answer, a refusal, a usage hint) goes out as
    the interaction's follow-up, which carries `token` and replaces the deferral,
    and so reaches the user where the bot is no member too (an app installed to
    the user's account, used in someone else's server or a group DM). `context`
    is Discord's: a private channel (2) other than the bot's DM is a group.
    """
    fields: list[Field] = [
        ("id", interaction_id, snowflake),
        ("channel_id", channel_id, snowflake),
        ("guild_id", guild_id, optional(snowflake)),
        ("user.id", user.get("id"), snowflake),
        ("token", token, is_text),
        ("text", text, is_text),
    ]
    if invalid(PLATFORM, fields):
        return None
    workspace = guild_id or DM_WORKSPACE
    address = Address(platform=PLATFORM, workspace=workspace, channel=channel_id, token=token)
    return Inbound(
        platform=PLATFORM,
        workspace=workspace,
        channel=channel_id,
        message_id=interaction_id,
        event_id=interaction_id,
        speaker=_speaker(user),
        text=text,
        is_dm=guild_id is None and context != PRIVATE_CHANNEL_CONTEXT,
        mentions_bot=True,
        reply=address,
        side_reply=address.model_copy(update={"side": True}),
    )


def to_decision(
    *,
    interaction_id: str,
    custom_id: object,
    channel_id: str,
    guild_id: str | None,
    user: Mapping[str, Any],
) -> Decision | None:
    """A click on an approval button (custom_id `a:<id>:y|n`); None when its ids or
    payload are malformed, or a bot clicked (one log line either way)."""
    click = (interaction_id, custom_id, valid_approval_payload, channel_id, guild_id, user)
    if not _a_persons_click(*click):
        return None
    parsed = parse_approval_payload(custom_id)
    assert parsed is not None
    return Decision(
        platform=PLATFORM,
        approval_id=parsed[0],
        user_id=str(user["id"]),
        approve=parsed[1],
        event_id=f"interaction:{interaction_id}",
        address=_click_address(channel_id, guild_id),
    )


def to_feedback(
    *,
    interaction_id: str,
    custom_id: object,
    message_id: str,
    channel_id: str,
    guild_id: str | None,
    user: Mapping[str, Any],
) -> FeedbackClick | None:
    """A click on a reply's feedback button (custom_id `f:up|down`) under `message_id`;
    None when its ids or payload are malformed, or a bot clicked."""
    click = (interaction_id, custom_id, valid_feedback_payload, channel_id, guild_id, user)
    if not _a_persons_click(*click):
        return None
    if invalid(PLATFORM, [("message.id", message_id, snowflake)]):
        return None
    value = parse_feedback_payload(custom_id)
    assert value is not None
    return FeedbackClick(
        platform=PLATFORM,
        channel=channel_id,
        message_id=message_id,
        user_id=str(user["id"]),
        value=value,
        address=_click_address(channel_id, guild_id),
    )


def _a_persons_click(
    interaction_id: str,
    custom_id: object,
    payload: Check,
    channel_id: str,
    guild_id: str | None,
    user: Mapping[str, Any],
) -> bool:
    """Whether a component interaction's ids are well formed, its custom_id passes
    `payload`, and a person clicked (a bot's click is dropped, with one log line)."""
    fields: list[Field] = [
        ("id", interaction_id, snowflake),
        ("channel_id", channel_id, snowflake),
        ("guild_id", guild_id, optional(snowflake)),
        ("user.id", user.get("id"), snowflake),
        ("data.custom_id", custom_id, payload),
    ]
    if invalid(PLATFORM, fields):
        return False
    if user.get("bot"):
        log.info("discord: a click by a bot dropped")
        return False
    return True


def _click_address(channel_id: str, guild_id: str | None) -> Address:
    return Address(platform=PLATFORM, workspace=guild_id or DM_WORKSPACE, channel=channel_id)


def strip_mention(text: str, bot_id: str, bot_role_id: str | None = None) -> str:
    """Remove the bot's own `<@id>` / `<@!id>` (and role `<@&id>`) mentions and their spaces."""
    mention = rf"<@!?{re.escape(bot_id)}>"
    if bot_role_id:
        mention += rf"|<@&{re.escape(bot_role_id)}>"
    return strip_mentions(text, re.compile(mention))


def _reference_id(payload: Mapping[str, Any]) -> str | None:
    reference = payload.get("message_reference") or {}
    referenced = payload.get("referenced_message") or {}
    value = reference.get("message_id") or referenced.get("id")
    return str(value) if value else None


def _speaker(author: Mapping[str, Any]) -> Speaker:
    name = author.get("global_name") or author.get("username") or str(author["id"])
    return Speaker(id=str(author["id"]), name=str(name), is_bot=bool(author.get("bot")))


def _is_voice(payload: Mapping[str, Any]) -> bool:
    """Whether the message is a voice message (its one attachment the recording)."""
    flags = payload.get("flags")
    return type(flags) is int and bool(flags & VOICE_MESSAGE_FLAG)


def _attachments(raw: object, *, voice: bool) -> tuple[Attachment, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(
        attachment(
            url=a.get("url"),
            name=a.get("filename"),
            mime_type=a.get("content_type"),
            size=a.get("size"),
            voice=voice,
        )
        for a in raw
        if isinstance(a, Mapping)
    )

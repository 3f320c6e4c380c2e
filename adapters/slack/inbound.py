"""Slack events to `Inbound`, as pure functions (no I/O: names are resolved by the caller).

Sessions: one per thread, one per DM. A mention at the top level of a channel
is answered in a new thread under it, so its session is named by the message's
own ts. In a DM the session is the DM itself, unless the user wrote inside a
DM thread. The workspace of a session is the installation's team, whoever
writes: in a Slack Connect channel the envelope's `team_id` is the author's.

Slack Connect: a member of another organisation (a shared channel's guest, the
other side of a Connect DM) is marked `external`, and the core refuses them
unless SLACK_ALLOW_EXTERNAL is set. The author's organisation is the event's
`user_team` (a mention, which may name an Enterprise Grid organisation rather
than a team), else its `team`, else the envelope's `team_id`; where that team
is the envelope's, the envelope's `enterprise_id` is the author's Grid org. The
installation is the envelope's first `authorizations` entry (team and Grid
org) and the bot's own team from auth.test. Sharing any id with it means the
same workspace or the same Grid organisation.

A click on an approval request's button (a `block_actions` payload) becomes a
`Decision`; its value is the approval id, its `action_ts` names the click. A click
on a reply's feedback buttons (the `feedback_buttons` element) becomes a
`FeedbackClick`: its value is up or down, the reply is the message it is under
(`container.message_ts`, else `message.ts`).

Before anything else, the ids and texts of a message event are checked against
the forms Slack gives them (`1710000000.000100` timestamps, `C…`/`D…`/`G…`
channels, `U…`/`W…`/`B…` users, `T…` teams and `E…` Grid organisations); an
event with one that does not fit is dropped, with one log line (`adapters.fields`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.attachments import attachment
from adapters.buttons import APPROVAL_ID, FEEDBACK_VALUES
from adapters.fields import (
    Check,
    Field,
    first_invalid,
    invalid,
    is_mapping,
    is_text,
    one_of,
    optional,
    pattern,
)
from adapters.mentions import strip_mentions
from gateway.messages import Address, Attachment, Decision, FeedbackClick, Inbound, Speaker

log = logging.getLogger(__name__)

PLATFORM = "slack"
APPROVE_ACTION, DECLINE_ACTION = "gw_approve", "gw_decline"
MESSAGE_EVENTS = ("app_mention", "message")
# Slack's id forms: a prefix letter, then capitals and digits (of no promised length).
TS = pattern(r"[0-9]{1,12}\.[0-9]{1,9}")
CHANNEL_ID = pattern(r"[CDG][A-Z0-9]+")
USER_ID = pattern(r"[UWB][A-Z0-9]+")
TEAM_ID = pattern(r"[TE][A-Z0-9]+")  # a workspace, or an Enterprise Grid organisation
EVENT_ID = pattern(r"[A-Za-z0-9]{1,64}")
# Subtypes that are still a person writing; every other one (bot_message,
# message_changed, message_deleted, channel_join, ...) is not a message to answer.
PERSON_SUBTYPES = frozenset({None, "thread_broadcast", "file_share", "me_message"})
# A shared file's modes whose contents Slack no longer serves.
CONTENTLESS_MODES = frozenset({"tombstone", "hidden_by_limit"})


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """The bot's own ids, from auth.test at startup."""

    user_id: str
    bot_id: str | None = None
    team_id: str | None = None

    def mention(self) -> re.Pattern[str]:
        return re.compile(rf"<@{re.escape(self.user_id)}(?:\|[^>]*)?>")


def author(event: Mapping[str, Any], bot: BotIdentity) -> str | None:
    """The user id of the person who wrote `event`, or None when it is not a person writing."""
    if event.get("subtype") not in PERSON_SUBTYPES or event.get("hidden"):
        return None
    if event.get("bot_id") or event.get("bot_profile"):
        return None
    user = event.get("user")
    if not isinstance(user, str) or not user or user == bot.user_id:
        return None
    return user


def wanted(body: Mapping[str, Any], bot: BotIdentity) -> str | None:
    """The author's user id when this event should become an Inbound, else None.

    Drops the `message` copy of a channel mention (Slack also sends `app_mention`
    for it, under another event id) and top-level channel messages without a
    mention, which nothing ever answers.
    """
    event = body.get("event") or {}
    kind = event.get("type")
    if kind not in ("app_mention", "message"):
        return None
    user = author(event, bot)
    if user is None or not event.get("channel") or not event.get("ts"):
        return None
    if kind == "message" and not _is_dm(event):
        if bot.mention().search(event.get("text") or ""):
            return None
        if not event.get("thread_ts"):
            return None
    return user


def to_inbound(body: Mapping[str, Any], bot: BotIdentity, speaker_name: str) -> Inbound | None:
    """Normalize an Events API `event_callback` body; None when it is not for the bot."""
    if invalid(PLATFORM, event_fields(body)):
        return None
    user = wanted(body, bot)
    if user is None:
        return None
    event = body["event"]
    channel, ts = str(event["channel"]), str(event["ts"])
    thread_ts = event.get("thread_ts") or None
    is_dm = _is_dm(event)
    raw_text = event.get("text") or ""
    workspace = installation_team(body, bot)
    session_thread = thread_ts if is_dm else (thread_ts or ts)
    return Inbound(
        platform=PLATFORM,
        workspace=workspace,
        channel=channel,
        thread=session_thread,
        message_id=ts,
        event_id=str(body.get("event_id") or f"{channel}:{ts}"),
        speaker=Speaker(id=user, name=speaker_name, external=is_external(body, bot)),
        text=strip_mention(raw_text, bot),
        is_dm=is_dm,
        mentions_bot=event.get("type") == "app_mention" or bool(bot.mention().search(raw_text)),
        follows_thread=bool(thread_ts) and thread_ts != ts,
        attachments=_attachments(event),
        reply=_address(workspace, channel, session_thread, reply_to=ts),
        side_reply=_address(workspace, channel, thread_ts or ts, reply_to=ts, side=True),
    )


def event_fields(body: Mapping[str, Any]) -> list[Field]:
    """The ids and texts of a message event that the conversion reads, with their checks."""
    event, authorizations = body.get("event"), body.get("authorizations")
    shape: list[Field] = [
        ("event", event, optional(is_mapping)),
        ("authorizations", authorizations, optional(_authorization_list)),
    ]
    if (
        first_invalid(shape) is not None
        or not isinstance(event, Mapping)
        or event.get("type") not in MESSAGE_EVENTS
    ):
        return shape  # malformed, or not a message event: `wanted` drops those as they are
    authorization = _authorization(body)
    return [
        *shape,
        ("event_id", body.get("event_id"), optional(EVENT_ID)),
        ("team_id", body.get("team_id"), optional(TEAM_ID)),
        ("enterprise_id", body.get("enterprise_id"), optional(TEAM_ID)),
        ("authorizations.team_id", authorization.get("team_id"), optional(TEAM_ID)),
        ("authorizations.enterprise_id", authorization.get("enterprise_id"), optional(TEAM_ID)),
        ("event.subtype", event.get("subtype"), optional(is_text)),
        ("event.channel", event.get("channel"), CHANNEL_ID),
        ("event.ts", event.get("ts"), TS),
        ("event.thread_ts", event.get("thread_ts"), optional(TS)),
        ("event.user", event.get("user"), optional(USER_ID)),
        ("event.team", event.get("team"), optional(TEAM_ID)),
        ("event.user_team", event.get("user_team"), optional(TEAM_ID)),
        ("event.text", event.get("text"), optional(is_text)),
    ]


def to_decision(body: Mapping[str, Any]) -> Decision | None:
    """A click on an approval button (`block_actions`); None when malformed or a bot's."""
    if not _a_persons_click(body, APPROVAL_ID):
        return None
    user, action = str(body["user"]["id"]), body["actions"][0]
    return Decision(
        platform=PLATFORM,
        approval_id=str(action["value"]),
        user_id=user,
        approve=action.get("action_id") == APPROVE_ACTION,
        event_id=f"{user}:{action['action_ts']}",
        address=_click_address(body),
    )


def to_feedback(body: Mapping[str, Any]) -> FeedbackClick | None:
    """A click on a reply's feedback buttons; None when malformed or a bot's."""
    if not _a_persons_click(body, one_of(*FEEDBACK_VALUES)):
        return None
    container, message = body.get("container") or {}, body.get("message") or {}
    message_ts = container.get("message_ts") or message.get("ts")
    if invalid(PLATFORM, [("container.message_ts", message_ts, TS)]):
        return None
    return FeedbackClick(
        platform=PLATFORM,
        channel=str(body["channel"]["id"]),
        message_id=str(message_ts),
        user_id=str(body["user"]["id"]),
        value=str(body["actions"][0]["value"]),
        address=_click_address(body),
        external=_clicker_external(body),
    )


def _clicker_external(body: Mapping[str, Any]) -> bool:
    """Whether the clicker is of another organisation: in a Slack Connect channel the
    payload's `team` is the installation's workspace and `user.team_id` the clicker's.
    In an Enterprise Grid organisation (`enterprise` set) a member of another of its
    workspaces is no outsider, and the payload cannot tell them from one: not external."""
    own, theirs = (body.get("team") or {}).get("id"), body["user"].get("team_id")
    return bool(own and theirs and own != theirs and not body.get("enterprise"))


def _a_persons_click(body: Mapping[str, Any], value: Check) -> bool:
    """Whether a `block_actions` payload is well formed, its action's value passing
    `value`, and a person's (a bot's click is dropped, with one log line)."""
    if invalid(PLATFORM, _click_shape(body)) or invalid(PLATFORM, _click_fields(body, value)):
        return False
    if str(body["user"]["id"]).startswith("B"):
        log.info("slack: a click by a bot dropped")
        return False
    return True


def _click_address(body: Mapping[str, Any]) -> Address:
    """Where a refusal of the click goes: the clicker's channel and thread."""
    container = body.get("container") or {}
    team = (body.get("team") or {}).get("id") or ""
    return _address(str(team), str(body["channel"]["id"]), container.get("thread_ts"))


def _click_shape(body: Mapping[str, Any]) -> list[Field]:
    actions = body.get("actions")
    return [
        ("user", body.get("user"), is_mapping),
        ("channel", body.get("channel"), is_mapping),
        ("team", body.get("team"), optional(is_mapping)),
        ("container", body.get("container"), optional(is_mapping)),
        ("message", body.get("message"), optional(is_mapping)),
        ("actions", actions, lambda v: isinstance(v, list) and len(v) == 1),
        ("actions[0]", actions[0] if isinstance(actions, list) and actions else None, is_mapping),
    ]


def _click_fields(body: Mapping[str, Any], value: Check) -> list[Field]:
    action, container = body["actions"][0], body.get("container") or {}
    return [
        ("user.id", body["user"].get("id"), USER_ID),
        ("channel.id", body["channel"].get("id"), CHANNEL_ID),
        ("team.id", (body.get("team") or {}).get("id"), optional(TEAM_ID)),
        ("user.team_id", body["user"].get("team_id"), optional(TEAM_ID)),
        ("container.thread_ts", container.get("thread_ts"), optional(TS)),
        ("actions.value", action.get("value"), value),
        ("actions.action_ts", action.get("action_ts"), TS),
    ]


def _authorization_list(value: object) -> bool:
    return isinstance(value, list) and (not value or isinstance(value[0], Mapping))


def command_fields(command: Mapping[str, Any]) -> list[Field]:
    """The ids of a slash command that `/btw` reads, with their checks."""
    return [
        ("channel_id", command.get("channel_id"), CHANNEL_ID),
        ("user_id", command.get("user_id"), USER_ID),
        ("team_id", command.get("team_id"), TEAM_ID),
        ("enterprise_id", command.get("enterprise_id") or None, optional(TEAM_ID)),
        ("text", command.get("text"), optional(is_text)),
    ]


def btw_inbound(
    command: Mapping[str, Any], session_key: str, quote_ts: str, speaker_name: str
) -> Inbound:
    """The native `/btw` slash command, aimed at the channel's latest session.

    `session_key` is that session (so the core snapshots it); the answer goes
    into the thread of the bot's message quoting the question (`quote_ts`).
    """
    channel = str(command["channel_id"])
    workspace = str(command.get("team_id") or "")
    thread = session_thread(session_key)
    # A command names the invoker's own team and Grid org; the session's workspace is
    # the installation's.
    invoker = {command.get("team_id"), command.get("enterprise_id")}
    return Inbound(
        platform=PLATFORM,
        workspace=workspace,
        channel=channel,
        thread=thread,
        message_id=quote_ts,
        event_id=str(command.get("trigger_id") or f"btw:{channel}:{quote_ts}"),
        speaker=Speaker(
            id=str(command["user_id"]),
            name=speaker_name,
            external=session_workspace(session_key) not in invoker,
        ),
        text=f"/btw {(command.get('text') or '').strip()}",
        is_dm=channel.startswith("D") or command.get("channel_name") == "directmessage",
        mentions_bot=True,
        reply=_address(workspace, channel, thread),
        side_reply=_address(workspace, channel, quote_ts, reply_to=quote_ts, side=True),
    )


def _address(
    workspace: str,
    channel: str,
    thread: str | None,
    *,
    reply_to: str | None = None,
    side: bool = False,
) -> Address:
    return Address(
        platform=PLATFORM,
        workspace=workspace,
        channel=channel,
        thread=thread,
        reply_to=reply_to,
        side=side,
    )


def session_thread(session_key: str) -> str | None:
    """The thread part of `slack:workspace:channel[:thread]`."""
    parts = session_key.split(":", 3)
    return parts[3] if len(parts) == 4 and parts[3] else None


def session_workspace(session_key: str) -> str:
    """The workspace part of `slack:workspace:channel[:thread]`."""
    parts = session_key.split(":", 3)
    return parts[1] if len(parts) > 1 else ""


def installation_team(body: Mapping[str, Any], bot: BotIdentity) -> str:
    """The team of the installation the event was delivered to."""
    event = body.get("event") or {}
    team = _authorization(body).get("team_id") or bot.team_id or body.get("team_id")
    return str(team or event.get("team") or "")


def is_external(body: Mapping[str, Any], bot: BotIdentity) -> bool:
    """Whether the event's author belongs to another organisation than the installation."""
    return not _installation(body, bot) & _authors_org(body)


def _installation(body: Mapping[str, Any], bot: BotIdentity) -> frozenset[str]:
    """The team and Grid organisation ids of the installation."""
    authorization = _authorization(body)
    ids = (authorization.get("team_id"), authorization.get("enterprise_id"), bot.team_id)
    return frozenset(str(i) for i in ids if i)


def _authors_org(body: Mapping[str, Any]) -> frozenset[str]:
    """The team and, where the event says, the Grid organisation ids of the event's author."""
    event = body["event"]
    team = event.get("user_team") or event.get("team") or body.get("team_id")
    enterprise = body.get("enterprise_id") if team == body.get("team_id") else None
    return frozenset(str(i) for i in (team, enterprise) if i)


def _authorization(body: Mapping[str, Any]) -> Mapping[str, Any]:
    authorizations = body.get("authorizations") or ()
    return authorizations[0] if authorizations else {}


def strip_mention(text: str, bot: BotIdentity) -> str:
    """The text without the bot's own `<@U...>` mentions."""
    return strip_mentions(text, bot.mention(), replacement="")


def _is_dm(event: Mapping[str, Any]) -> bool:
    if event.get("channel_type") is not None:
        return event.get("channel_type") == "im"
    return str(event.get("channel", "")).startswith("D")


def _attachments(event: Mapping[str, Any]) -> tuple[Attachment, ...]:
    files = event.get("files") or ()  # not a list at all: a delivery of the wrong shape (400)
    return tuple(file_attachment(f) for f in files if isinstance(f, Mapping))


def file_attachment(file: Mapping[str, Any]) -> Attachment:
    """One of a message's `files`. A deleted file (`mode: tombstone`) or one past a free
    workspace's history (`hidden_by_limit`) keeps its name but no address: it is named
    to the model, never fetched. Audio clips recorded in Slack are voice messages."""
    url = None
    if file.get("mode") not in CONTENTLESS_MODES:
        url = file.get("url_private_download") or file.get("url_private")
    return attachment(
        url=url,
        name=file.get("name") or file.get("title"),
        mime_type=file.get("mimetype"),
        size=file.get("size"),
        file_id=file.get("id"),
        voice=file.get("subtype") == "slack_audio",
    )

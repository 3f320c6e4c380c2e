"""The normalized shapes every adapter produces and the core consumes.

`Inbound` is one incoming message, whatever platform it came from; `Address`
says where a reply goes. Both are immutable and serialize to JSON, so they can
travel through Redis inside jobs and history entries.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Speaker(_Frozen):
    """Who wrote a message.

    `external` marks a member of another organisation than the one the bot is
    installed for (a Slack Connect guest in a shared channel or DM): the adapter
    knows the platform's notion of an organisation, the core only the flag.
    """

    id: str
    name: str
    is_bot: bool = False
    external: bool = False


class Attachment(_Frozen):
    """A file or image attached to a message (kept by reference, never downloaded here).

    `kind` is what the platform says it is: "image", "voice" (a voice note or
    audio file), "file". The worker downloads it through the platform's
    `FileSource` before the turn is compiled (`gateway.media`); `size` is the
    declared size in bytes, when the platform tells it (a file declared over
    the limit is refused without a download), and `file_id` the platform's own
    id, for platforms that fetch a file by id (Telegram's getFile).
    """

    kind: str  # "image", "voice", "file"
    url: str | None = None
    name: str | None = None
    mime_type: str | None = None
    size: int | None = None
    file_id: str | None = None


class Address(_Frozen):
    """Where a message is posted.

    `thread` is the thread or topic to post into; `reply_to` the platform id of
    a message to reply to (Telegram and Discord quote it, Slack uses it for the
    "thinking" reaction); `token` a short-lived reply token some platforms hand
    out (a Discord interaction token), never logged. `side` marks the address of
    a threaded side reply (a `/btw` answer).
    """

    platform: str
    workspace: str
    channel: str
    thread: str | None = None
    reply_to: str | None = None
    token: str | None = Field(default=None, repr=False)
    side: bool = False

    @property
    def chat_key(self) -> str:
        """The chat a send pacing applies to (platforms rate-limit per chat)."""
        return f"{self.platform}:{self.workspace}:{self.channel}"


class Inbound(_Frozen):
    """One incoming message, normalized.

    `thread` names the session's thread (Slack thread ts, Telegram forum topic);
    a platform whose threads are channels of their own (Discord) leaves it unset.
    `follows_thread` is true when the message sits in a thread where the bot
    answers without a mention once it takes part; `reply` and `side_reply` are
    where the main reply and a `/btw` answer go. `media_group` names an album
    whose items arrive as messages of their own (Telegram's `media_group_id`):
    ingest gathers them into one user message.
    """

    platform: str
    workspace: str
    channel: str
    thread: str | None = None
    message_id: str
    event_id: str
    speaker: Speaker
    text: str
    is_dm: bool
    mentions_bot: bool = False
    reply_to: str | None = None
    replies_to_bot: bool = False
    follows_thread: bool = False
    attachments: tuple[Attachment, ...] = ()
    media_group: str | None = None
    received_at: float = Field(default_factory=time.time)
    reply: Address
    side_reply: Address

    @property
    def session_key(self) -> str:
        """`platform:workspace:channel[:thread]`, the name of this conversation."""
        base = f"{self.platform}:{self.workspace}:{self.channel}"
        return f"{base}:{self.thread}" if self.thread else base

    @property
    def channel_key(self) -> str:
        return f"{self.platform}:{self.workspace}:{self.channel}"

    @property
    def user_key(self) -> str:
        """`platform:user_id`, the form `GATEWAY_ALLOWED_USERS` uses."""
        return f"{self.platform}:{self.speaker.id}"


class Decision(_Frozen):
    """A click on an approval request's button, as every adapter reports it.

    `user_id` is the clicker's platform id: only the person whose message led
    to the tool call may decide. `address` is where a refusal goes (the
    platform's ephemeral form where it has one). `event_id` dedupes a retried
    delivery of the same click.
    """

    platform: str
    approval_id: str
    user_id: str
    approve: bool
    event_id: str
    address: Address


class FeedbackClick(_Frozen):
    """A click on a reply's thumbs up or down, as every adapter reports it.

    The reply is the message clicked (`platform`, `channel`, `message_id`: a message
    id is unique within its channel on every platform); `value` is the button's
    (`up` or `down`), `user_id` the clicker's platform id, `external` whether they
    are of another organisation (a Slack Connect guest), as `Speaker.external`.
    `address` is where a refusal goes (the platform's ephemeral form where it has one).
    """

    platform: str
    channel: str
    message_id: str
    user_id: str
    value: str
    address: Address
    external: bool = False

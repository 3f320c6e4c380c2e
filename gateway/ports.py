"""What the core asks of every platform: a Sender for replies, a FileSource for the
files users share (a Platform, in `gateway/platform.py`, for the rest).

The core never imports a platform SDK; it talks to platforms only through
these shapes. Platform rules (message limits, edit pacing, threading) are
declared here as data the core reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from gateway.errors import DownloadFailed
from gateway.messages import Address, Attachment


@dataclass(frozen=True, slots=True)
class Limits:
    """How a platform wants to be written to.

    `max_length` is one message's limit in the unit `Sender.measure` counts;
    `edit_interval` the least time between two edits of one message;
    `chat_interval`, when set, the least time between any two sends into one
    chat, shared by every worker through Redis (platforms that ban per chat);
    `typing_interval`, when set, how often the "thinking" signal is renewed
    until the first text appears.
    """

    max_length: int
    edit_interval: float
    chat_interval: float | None = None
    typing_interval: float | None = None


class Sender(Protocol):
    """Posts and edits messages. Text arrives as Markdown; the sender renders it.

    Raises `gateway.errors.RateLimited` when the platform asks to wait,
    `MessageRejected` when it refuses the content, `PlatformError` otherwise.
    Editing a message to the text it already has is not an error.
    """

    platform: str

    def limits(self, address: Address) -> Limits: ...

    def measure(self, markdown: str) -> int:
        """Length of `markdown` once rendered, in the unit `Limits.max_length` uses."""
        ...

    async def send(
        self,
        address: Address,
        markdown: str,
        *,
        final: bool,
        key: str | None = None,
        feedback: bool = False,
    ) -> str:
        """Post a new message; returns its platform id. `feedback` (a reply's last
        message, final) asks for the thumbs up and down buttons under it, where the
        platform has them.

        `key` names the message the same way on every run of the same turn, so a run
        that died (or lost the answer) after the platform took its post does not leave
        a duplicate. How depends on the platform: Discord's enforced nonce returns the
        first message for a second post with the same key; Slack's post carries the key
        in its metadata, where a re-run finds it (`PostFinder`); Telegram's Bot API has
        neither, and its sender ignores the key.
        """
        ...

    async def edit(
        self,
        address: Address,
        message_id: str,
        markdown: str,
        *,
        final: bool,
        feedback: bool = False,
    ) -> None: ...

    async def thinking(self, address: Address, on: bool) -> None:
        """Show (or clear) that the bot is working: typing, a reaction, a status."""
        ...

    async def ask_approval(self, address: Address, markdown: str, approval_id: str) -> str:
        """Post `markdown` (the tool and its arguments) with two buttons, Approve and
        Decline, whose clicks come back as a `Decision` for `approval_id`; returns
        the message's platform id."""
        ...

    async def settle_approval(self, address: Address, message_id: str, markdown: str) -> None:
        """Edit an approval request to its outcome, without its buttons."""
        ...

    async def aclose(self) -> None: ...


STEP_STATES = ("pending", "in_progress", "complete", "error")


@dataclass(frozen=True, slots=True)
class Step:
    """One tool call on a reply's timeline: its call id, what it is (the tool's name and
    a short, safe summary of its arguments) and its state, one of STEP_STATES."""

    id: str
    title: str
    state: str
    details: str = ""


class LiveMessage(Protocol):
    """One message of a reply written through the platform's own streaming surface
    (Slack's chat.startStream/appendStream/stopStream, Telegram's sendMessageDraft).

    Every call raises `RateLimited` when the platform asks to wait, `StreamRefused` when
    it will not stream here (the reply goes on edited in place), `PlatformError`
    otherwise. `message_id` is the platform message the live message already is (Slack's
    stream ts, after its first `show`), None while it is none (a Telegram draft).
    `interval` is the least time between two calls; `refresh`, when set, the most time
    the message may go without one before it lapses (a draft's life).
    """

    message_id: str | None
    interval: float
    refresh: float | None

    async def show(self, markdown: str, steps: Sequence[Step]) -> None:
        """The message shows `markdown` (the text so far, which only grows while it
        streams) and the timeline `steps`."""
        ...

    async def close(self, markdown: str, steps: Sequence[Step], *, feedback: bool) -> str:
        """The message ends showing exactly `markdown`, as a real message of the
        conversation, with feedback buttons when `feedback`; returns its id."""
        ...


@runtime_checkable
class NativeStreams(Protocol):
    """A Sender with the platform's own streaming surface, optional: the core checks for
    it. Which mechanism a reply uses is decided here, per call."""

    def native_mechanism(self, address: Address) -> str | None:
        """The name of the streaming surface a reply at `address` uses ("stream",
        "draft"), or None where only edit-in-place applies."""
        ...

    def open_live(self, address: Address, *, recipient: str, key: str | None = None) -> LiveMessage:
        """A live message for a reply to `recipient` (the asker's user id), not shown yet:
        no call is made before its first `show`. `key` names the message as `Sender.send`'s
        does (the same on every run of the turn), where the platform can keep it on a live
        message that is a message, for a re-run's `PostFinder` to find it by."""
        ...

    async def close_live(self, address: Address, message_id: str) -> None:
        """End a live message a run that died left streaming, so that it can be edited
        (a re-run, or a fallback). Not an error when it is not streaming any more;
        raises `PlatformError` when the platform cannot be reached."""
        ...


@runtime_checkable
class StatusSender(Protocol):
    """A Sender whose platform has a status line of its own beside the conversation
    (Slack's assistant threads), optional: the core checks for it. The reply's own
    status line is shown either way."""

    async def show_status(self, address: Address, status: str) -> None:
        """Show what the bot is doing ("is running `x`…"); "" goes back to the thinking
        status. Failures are the sender's to log: this never raises."""
        ...


@runtime_checkable
class PostFinder(Protocol):
    """A Sender whose platform lets the bot find its own recent messages (Slack),
    optional: the core checks for it. A re-run of a turn asks it for what a run that
    died after posting, before storing the message's id, left on the platform."""

    async def find_post(self, address: Address, key: str) -> str | None:
        """The id of the bot's message posted under `key` (`Sender.send`) among the
        latest of `address`'s conversation, or None. Raises `PlatformError`."""
        ...


@runtime_checkable
class AdminCheck(Protocol):
    """A Sender that can tell who administers a conversation's place, optional: the core
    checks for it before `/config` changes a channel's settings. A platform whose sender
    lacks it has no admins in chat (its settings change through `gateway settings`)."""

    async def is_admin(self, address: Address, user_id: str, *, dm: bool) -> bool:
        """Whether `user_id` administers where `address` is (Slack: a workspace admin or
        owner; Telegram: a group administrator or creator; Discord: a member with Manage
        Server); in a direct message (`dm`), whether the platform makes the user its
        admin. Raises PlatformError when the platform cannot say."""
        ...


@dataclass(frozen=True, slots=True)
class Download:
    """Where one attachment's bytes are fetched from, and with which headers.

    `url` and `headers` may hold the bot's token (Telegram's file URL, Slack's
    `Authorization: Bearer`): never logged, never shown, left out of the repr.
    `local` marks a file on this machine (a `file://` URL the console's user
    named); a download from any other source refuses one.
    """

    url: str = field(repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    local: bool = False


class FileSource(Protocol):
    """Tells the worker how to fetch a platform's attachments (the worker downloads).

    Slack answers the file's private URL with the bot token in a header;
    Telegram turns `file_id` into its file path (getFile); Discord's URL is
    fetched as it is. Raises `gateway.errors.DownloadFailed` when the platform
    cannot say where the file is.
    """

    async def locate(self, attachment: Attachment) -> Download: ...


@runtime_checkable
class WorkspaceFiles(Protocol):
    """A FileSource whose access differs by workspace (Slack installed in many, a token
    each), optional: the worker asks it for the source of the session's workspace."""

    def in_workspace(self, workspace: str) -> FileSource: ...


class PlainSource:
    """The attachment's own URL, no headers: for platforms whose file URLs are public."""

    async def locate(self, attachment: Attachment) -> Download:
        if not attachment.url:
            raise DownloadFailed("the platform gave no address for it")
        return Download(attachment.url)


@dataclass(frozen=True, slots=True)
class Operator:
    """Who signed in to the operator console through a platform, and whether they may."""

    user_key: str  # `platform:user_id`
    name: str
    admin: bool  # a workspace admin or owner, or named in GATEWAY_ADMIN_USERS


class OperatorSignIn(Protocol):
    """ "Sign in with <platform>" for the operator console (OpenID Connect), optional: a
    platform that offers it gives one (`Platform.operator_sign_in`)."""

    platform: str  # its name, as the console's sign-in link shows it

    def authorize_url(self, state: str, nonce: str, redirect_uri: str) -> str:
        """The platform's page where the operator agrees to sign in."""
        ...

    async def identify(self, code: str, nonce: str, redirect_uri: str) -> Operator | None:
        """The operator the redirect's one-time `code` stands for; None when the platform
        refuses it or its nonce is not `nonce`. Raises PlatformError when the platform
        cannot be asked."""
        ...

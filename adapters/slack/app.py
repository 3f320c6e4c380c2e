"""The slack-bolt AsyncApp: events and the `/btw` command, turned into ingest calls.

The same app serves HTTP (`POST /slack/events`, bolt's own v0 signature check
stays on) and Socket Mode. Listeners run before the acknowledgement is sent
(`process_before_response`): ingest is a few Redis round trips, so Slack still
gets its answer well within 3 s, and an event Redis could not take gets a 5xx,
which makes Slack deliver it again instead of losing it. An event or `/btw`
whose ids or text are not of Slack's form is acknowledged and dropped by the
inbound checks (one log line), and a delivery of another wrong shape gets a
400 and one log line, not bolt's 500 with a stack trace.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from slack_bolt import BoltResponse
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.common import invalid
from adapters.slack.inbound import PLATFORM, BotIdentity, btw_inbound, command_fields, to_inbound
from adapters.slack.mrkdwn import escape
from adapters.slack.names import UserNames
from adapters.slack.sender import platform_error
from gateway.errors import GatewayError, PlatformError
from gateway.http_limits import one_line

if TYPE_CHECKING:
    from gateway.ingest import Ingest

log = logging.getLogger(__name__)

Ack = Callable[..., Awaitable[Any]]
NO_SESSION = ("There is no conversation in this channel yet: mention me first, "
              "then `/btw` asks about it.")
CANNOT_POST = ("I could not post in this channel; invite me first (`/invite @gateway`), "
               "or ask with `!btw <question>` in the conversation's thread.")
# What reading a field of the wrong type raises, in bolt or in the listeners below.
SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)
BTW_USAGE = ("Usage: `/btw <question>` asks a side question about this channel's "
             "latest conversation.")


class Listeners:
    """What the bolt app does with each kind of request."""

    def __init__(self, ingest: Ingest, client: AsyncWebClient, names: UserNames,
                 identity: Callable[[], Awaitable[BotIdentity]]) -> None:
        self.ingest = ingest
        self.client = client
        self.names = names
        self.identity = identity

    async def on_message(self, body: dict[str, Any]) -> None:
        """`app_mention` and `message` events (channels, groups, DMs, threads)."""
        bot = await self.identity()
        # Converted before the name is looked up (and cached): a malformed event fails
        # here, having written nothing.
        inbound = to_inbound(body, bot, "")
        if inbound is None:
            return
        name = await self.names.get(inbound.speaker.id)
        speaker = inbound.speaker.model_copy(update={"name": name})
        inbound = inbound.model_copy(update={"speaker": speaker})
        outcome = await self.ingest.receive(inbound)
        log.debug("slack event %s -> %s", inbound.event_id, outcome)

    async def on_btw(self, ack: Ack, command: dict[str, Any]) -> None:
        """The native `/btw`: a side question about the channel's latest session."""
        if invalid(PLATFORM, command_fields(command)):
            await ack()
            return
        question = (command.get("text") or "").strip()
        if not question:
            await ack(text=BTW_USAGE, response_type="ephemeral")
            return
        channel = str(command["channel_id"])
        channel_key = f"{PLATFORM}:{command.get('team_id') or ''}:{channel}"
        session_key = await self.ingest.latest_session(channel_key)
        if session_key is None:
            await ack(text=NO_SESSION, response_type="ephemeral")
            return
        user = str(command["user_id"])
        # Posted before the ack (well within Slack's 3 s), so a refusal can still be
        # answered in the ack itself.
        try:
            quote_ts = await self._post_quote(channel, user, question)
        except PlatformError as exc:
            log.warning("/btw in %s: could not post the question: %s", channel, exc)
            await ack(text=CANNOT_POST, response_type="ephemeral")
            return
        await ack()
        inbound = btw_inbound(command, session_key, quote_ts, await self.names.get(user))
        outcome = await self.ingest.receive(inbound)
        log.debug("slack /btw %s -> %s", inbound.event_id, outcome)

    async def _post_quote(self, channel: str, user: str, question: str) -> str:
        quoted = "\n".join(f"> {escape(line)}" for line in question.splitlines())
        try:
            posted = await self.client.chat_postMessage(
                channel=channel, text=f"<@{user}> asked /btw:\n{quoted}")
        except SlackApiError as exc:
            raise platform_error(exc, "chat.postMessage") from None
        return str(posted["ts"])


async def _ignore() -> None:
    """Events the gateway subscribes to implicitly (joins, reactions...): acknowledged only."""


class _TokenFromEnvironment(logging.Filter):
    """bolt reads SLACK_BOT_TOKEN itself and warns that the client's token wins: it is the
    same token, so the warning is noise."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "`token` will be unused" not in record.getMessage()


BOLT_LOG = logging.getLogger("adapters.slack.bolt")
BOLT_LOG.addFilter(_TokenFromEnvironment())


def build_app(client: AsyncWebClient, listeners: Listeners, *,
              signing_secret: str | None) -> AsyncApp:
    """The bolt app; `signing_secret` None means Socket Mode (no HTTP signature to check)."""
    app = AsyncApp(
        client=client,
        signing_secret=signing_secret,
        request_verification_enabled=signing_secret is not None,
        process_before_response=True,
        logger=BOLT_LOG,
    )
    app.event("app_mention")(listeners.on_message)
    app.event("message")(listeners.on_message)
    app.command("/btw")(listeners.on_btw)
    # Anything else (other events, interactivity) is acknowledged so Slack does not retry it.
    app.event(re.compile(".*"))(_ignore)
    app.action(re.compile(".*"))(_ack_only)
    app.error(_failed)
    return app


async def _failed(error: Exception) -> BoltResponse:
    """bolt's answer when a listener or middleware raised: 5xx when Slack should deliver
    it again, 400 when the delivery itself is malformed; either way one log line."""
    if isinstance(error, GatewayError | RedisError):
        log.warning("slack: delivery not stored (%s), answered 500 so that Slack sends it again",
                    one_line(error, 120))
        return BoltResponse(status=500, body="")
    if isinstance(error, SHAPE_ERRORS):
        log.warning("slack: delivery of the wrong shape refused with 400 (%s)", one_line(error))
        return BoltResponse(status=400, body="")
    log.error("slack: a listener failed", exc_info=error)
    return BoltResponse(status=500, body="")


async def _ack_only(ack: Ack) -> None:
    await ack()

"""The bolt app: what it does with each kind of Slack request, and how it is wired.

`Listeners` turns events and the `/btw` command into ingest calls, and holds the
clicks' handler (`clicks.py`: approvals and feedback); `build_app` wires them into one bolt
AsyncApp for HTTP and Socket Mode alike, with bolt's OAuth flow and
installation-store authorize when the app is installed in many workspaces.
Listeners run before the acknowledgement is sent (`process_before_response`):
ingest is a few Redis round trips, so Slack still gets its answer well within
3 s, and an event Redis could not take gets a 5xx, which makes Slack deliver it
again instead of losing it. Assistant threads' events and first messages
(`assistant.py`) make their Slack calls after the acknowledgement.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from slack_bolt import BoltResponse
from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_bolt.authorization.async_authorize import AsyncInstallationStoreAuthorize
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.buttons import FEEDBACK_ACTION
from adapters.fields import SHAPE_ERRORS, invalid
from adapters.slack.assistant import AssistantThreads
from adapters.slack.clicks import Ack, Clicks
from adapters.slack.errors import core_error
from adapters.slack.inbound import (
    APPROVE_ACTION,
    DECLINE_ACTION,
    PLATFORM,
    BotIdentity,
    btw_inbound,
    command_fields,
    to_inbound,
)
from adapters.slack.names import UserNames
from adapters.slack.render import escape
from adapters.slack.rotation import StoreRotates
from adapters.slack.workspaces import Workspaces
from gateway.errors import GatewayError, PlatformError
from gateway.logs import one_line

if TYPE_CHECKING:
    from gateway.inbound.ingest import Ingest

log = logging.getLogger(__name__)

Identity = Callable[[AsyncBoltContext], Awaitable[BotIdentity]]
NO_SESSION = (
    "There is no conversation in this channel yet: mention me first, then `/btw` asks about it."
)
CANNOT_POST = (
    "I could not post in this channel; invite me first (`/invite @gateway`), "
    "or ask with `!btw <question>` in the conversation's thread."
)
BTW_USAGE = (
    "Usage: `/btw <question>` asks a side question about this channel's latest conversation."
)


class Listeners:
    """What the bolt app does with each kind of request. The `client` bolt passes a
    listener is the request's own, with the token of the workspace it came from."""

    def __init__(
        self,
        ingest: Ingest,
        names: UserNames,
        identity: Identity,
        workspaces: Workspaces | None = None,
        assistant: AssistantThreads | None = None,
    ) -> None:
        self.ingest = ingest
        self.names = names
        self.identity = identity
        self.workspaces = workspaces
        self.assistant = assistant
        self.clicks = Clicks(ingest)

    async def on_message(
        self, body: dict[str, Any], context: AsyncBoltContext, client: AsyncWebClient
    ) -> None:
        """`app_mention` and `message` events (channels, groups, DMs, threads)."""
        bot = await self.identity(context)
        # Converted before the name is looked up (and cached): a malformed event fails
        # here, having written nothing.
        inbound = to_inbound(body, bot, "")
        if inbound is None:
            return
        await self._note_org(inbound.workspace, context)
        name = await self.names.get(inbound.speaker.id, client)
        speaker = inbound.speaker.model_copy(update={"name": name})
        inbound = inbound.model_copy(update={"speaker": speaker})
        outcome = await self.ingest.receive(inbound)
        log.debug("slack event %s -> %s", inbound.event_id, outcome)
        if self.assistant is not None:
            self.assistant.first_message(inbound, client)

    async def on_btw(self, ack: Ack, command: dict[str, Any], client: AsyncWebClient) -> None:
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
            quote_ts = await self._post_quote(client, channel, user, question)
        except PlatformError as exc:
            log.warning("/btw in %s: could not post the question: %s", channel, exc)
            await ack(text=CANNOT_POST, response_type="ephemeral")
            return
        await ack()
        name = await self.names.get(user, client)
        inbound = btw_inbound(command, session_key, quote_ts, name)
        outcome = await self.ingest.receive(inbound)
        log.debug("slack /btw %s -> %s", inbound.event_id, outcome)

    async def _note_org(self, workspace: str, context: AsyncBoltContext) -> None:
        """A workspace served by its org's org-wide install: noted, so that workers find
        the org's token for its replies."""
        enterprise = context.enterprise_id
        if self.workspaces is not None and context.is_enterprise_install and enterprise:
            await self.workspaces.note_org(workspace, enterprise)

    async def _post_quote(
        self, client: AsyncWebClient, channel: str, user: str, question: str
    ) -> str:
        quoted = "\n".join(f"> {escape(line)}" for line in question.splitlines())
        try:
            posted = await client.chat_postMessage(
                channel=channel, text=f"<@{user}> asked /btw:\n{quoted}"
            )
        except SlackApiError as exc:
            raise core_error(exc) from None
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


def build_app(
    client: AsyncWebClient,
    listeners: Listeners,
    *,
    signing_secret: str | None,
    oauth: AsyncOAuthSettings | None = None,
) -> AsyncApp:
    """The bolt app; `signing_secret` None means Socket Mode (no HTTP signature to check),
    `oauth` the app installed in many workspaces."""
    app = AsyncApp(
        client=client,
        signing_secret=signing_secret,
        request_verification_enabled=signing_secret is not None,
        process_before_response=True,
        logger=BOLT_LOG,
        **_installed(client, oauth),
    )
    if oauth is not None:
        app.enable_token_revocation_listeners()  # before the catch-all below
    app.event("app_mention")(listeners.on_message)
    app.event("message")(listeners.on_message)
    app.command("/btw")(listeners.on_btw)
    if listeners.assistant is not None:
        app.event("assistant_thread_started")(listeners.assistant.on_started)
        app.event("assistant_thread_context_changed")(listeners.assistant.on_context_changed)
        app.event("app_home_opened")(listeners.assistant.on_home_opened)
    app.action(APPROVE_ACTION)(listeners.clicks.handle)
    app.action(DECLINE_ACTION)(listeners.clicks.handle)
    app.action(FEEDBACK_ACTION)(listeners.clicks.feedback)
    # Anything else (other events, interactivity) is acknowledged so Slack does not retry it.
    app.event(re.compile(".*"))(_ignore)
    app.action(re.compile(".*"))(_ack_only)
    app.error(_failed)
    return app


def _installed(client: AsyncWebClient, oauth: AsyncOAuthSettings | None) -> dict[str, Any]:
    """bolt's arguments for many workspaces: the OAuth flow, and an authorize that reads
    the installation store and keeps each token's auth.test answer (one call per token,
    not per event). The store refreshes expiring tokens under its lock, so bolt's own
    rotator, which has none, is replaced (`StoreRotates`)."""
    if oauth is None:
        return {}
    authorize = AsyncInstallationStoreAuthorize(
        logger=BOLT_LOG,
        installation_store=oauth.installation_store,
        client_id=oauth.client_id,
        client_secret=oauth.client_secret,
        cache_enabled=True,
        client=client,
    )
    authorize.token_rotator = StoreRotates(
        client_id=oauth.client_id, client_secret=oauth.client_secret, client=client
    )
    return {
        "oauth_settings": oauth,
        "installation_store": oauth.installation_store,
        "authorize": authorize,
    }


async def _failed(error: Exception) -> BoltResponse:
    """bolt's answer when a listener or middleware raised: 5xx when Slack should deliver
    it again, 400 when the delivery itself is malformed; either way one log line."""
    if isinstance(error, GatewayError | RedisError):
        log.warning(
            "slack: delivery not stored (%s), answered 500 so that Slack sends it again",
            one_line(error, 120),
        )
        return BoltResponse(status=500, body="")
    if isinstance(error, SHAPE_ERRORS):
        log.warning("slack: delivery of the wrong shape refused with 400 (%s)", one_line(error))
        return BoltResponse(status=400, body="")
    log.error("slack: a listener failed", exc_info=error)
    return BoltResponse(status=500, body="")


async def _ack_only(ack: Ack) -> None:
    await ack()


async def request_identity(context: AsyncBoltContext) -> BotIdentity:
    """The bot's ids in the request's workspace, as bolt's authorize found them."""
    if not context.bot_user_id:
        raise PlatformError("Slack: the request's installation has no bot user")
    return BotIdentity(user_id=context.bot_user_id, bot_id=context.bot_id, team_id=context.team_id)

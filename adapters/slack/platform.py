"""Slack as the core sees it: settings checks, the bolt app, the HTTP route, Socket Mode.

The bolt AsyncApp turns events and the `/btw` command into ingest calls. The
same app serves HTTP (`POST /slack/events` in `http.py`, bolt's own v0
signature check stays on) and Socket Mode (`connection.py`), so it is built
here, where both are wired. Listeners run before the acknowledgement is sent
(`process_before_response`): ingest is a few Redis round trips, so Slack still
gets its answer well within 3 s, and an event Redis could not take gets a 5xx,
which makes Slack deliver it again instead of losing it. An event or `/btw`
whose ids or text are not of Slack's form is acknowledged and dropped by the
inbound checks (one log line), and a delivery of another wrong shape gets a
400 and one log line, not bolt's 500 with a stack trace.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import aiohttp
from redis.exceptions import RedisError
from slack_bolt import BoltResponse
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from starlette.routing import BaseRoute

from adapters.common import SHAPE_ERRORS, invalid, refusal_text
from adapters.slack.connection import Backoff, SocketSupervisor, Timing
from adapters.slack.files import SlackFileSource
from adapters.slack.http import events_route
from adapters.slack.inbound import (
    APPROVE_ACTION,
    DECLINE_ACTION,
    PLATFORM,
    BotIdentity,
    btw_inbound,
    command_fields,
    to_decision,
    to_inbound,
)
from adapters.slack.names import UserNames
from adapters.slack.render import escape
from adapters.slack.sender import SlackSender, platform_error, web_client
from gateway.errors import ConfigError, GatewayError, PlatformError
from gateway.http_limits import one_line
from gateway.model import Address
from gateway.ports import Mode, Platform

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from gateway.config import Settings
    from gateway.health import Health
    from gateway.ingest import Ingest

log = logging.getLogger(__name__)

Ack = Callable[..., Awaitable[Any]]
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
    """What the bolt app does with each kind of request."""

    def __init__(
        self,
        ingest: Ingest,
        client: AsyncWebClient,
        names: UserNames,
        identity: Callable[[], Awaitable[BotIdentity]],
    ) -> None:
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

    async def on_approval(self, ack: Ack, body: dict[str, Any]) -> None:
        """A click on an approval request's button: acknowledged, then decided; a click
        that does not count is answered to the clicker alone."""
        await ack()
        decision = to_decision(body)
        if decision is None:
            return
        refusal = refusal_text(await self.ingest.decide(decision))
        if refusal is not None:
            await self._tell(decision.user_id, decision.address, refusal)

    async def _tell(self, user: str, address: Address, text: str) -> None:
        """An ephemeral message through the Web API (the client every reply uses, so its
        errors and rate limits read alike) rather than the payload's response_url."""
        try:
            await self.client.chat_postEphemeral(
                channel=address.channel, user=user, thread_ts=address.thread, text=text
            )
        except SlackApiError as exc:
            log.warning("slack: could not tell %s: %s", user, platform_error(exc, "postEphemeral"))

    async def _post_quote(self, channel: str, user: str, question: str) -> str:
        quoted = "\n".join(f"> {escape(line)}" for line in question.splitlines())
        try:
            posted = await self.client.chat_postMessage(
                channel=channel, text=f"<@{user}> asked /btw:\n{quoted}"
            )
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


def build_app(
    client: AsyncWebClient, listeners: Listeners, *, signing_secret: str | None
) -> AsyncApp:
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
    app.action(APPROVE_ACTION)(listeners.on_approval)
    app.action(DECLINE_ACTION)(listeners.on_approval)
    # Anything else (other events, interactivity) is acknowledged so Slack does not retry it.
    app.event(re.compile(".*"))(_ignore)
    app.action(re.compile(".*"))(_ack_only)
    app.error(_failed)
    return app


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


NEEDS_APP_TOKEN = "SLACK_APP_TOKEN is required for Slack Socket Mode (gateway slack)"


class SlackPlatform(Platform):
    """Slack over the Events API (`gateway web`) or Socket Mode (`gateway slack`)."""

    name = "slack"
    # Socket Mode pacing; tests shorten it to watch a reconnect in well under a second.
    socket_timing = Timing()
    socket_backoff = Backoff()

    def __init__(self, settings: Settings, redis: Redis) -> None:
        super().__init__(settings, redis)
        self._bot: BotIdentity | None = None
        self._client: AsyncWebClient | None = None
        self._identity_lock: asyncio.Lock | None = None

    def validate(self, mode: Mode) -> None:
        settings = self.settings
        if settings.slack_bot_token is None:
            raise ConfigError("SLACK_BOT_TOKEN is required for Slack")
        # With an app token Slack runs over Socket Mode, and `gateway web` serves no Slack route.
        if mode == "http" and self.uses_http() and settings.slack_signing_secret is None:
            raise ConfigError(
                "SLACK_SIGNING_SECRET is required for Slack over HTTP "
                "(gateway web); set it, or set SLACK_APP_TOKEN for Socket Mode"
            )
        if mode == "connect":
            app_token = settings.slack_app_token
            if app_token is None:
                raise ConfigError(NEEDS_APP_TOKEN)
            if not app_token.get_secret_value().startswith("xapp-"):
                raise ConfigError("SLACK_APP_TOKEN must be an app-level token (xapp-...)")

    def uses_http(self) -> bool:
        return self.settings.slack_bot_token is not None and self.settings.slack_app_token is None

    @property
    def client(self) -> AsyncWebClient:
        if self._client is None:
            self._client = web_client(self._bot_token(), self.settings.slack_api_url)
        return self._client

    def sender(self) -> SlackSender:
        return SlackSender(
            web_client(self._bot_token(), self.settings.slack_api_url),
            self.settings.slack_edit_interval,
        )

    def file_source(self) -> SlackFileSource:
        """Files' private URLs, fetched with the bot token (Slack's hosts only)."""
        return SlackFileSource(self._bot_token(), self.settings.slack_api_url)

    async def startup(self) -> None:
        """Learn the bot's own ids (so its messages are never taken for a user's)."""
        await self.identity()

    async def identity(self) -> BotIdentity:
        if self._bot is None:
            self._identity_lock = self._identity_lock or asyncio.Lock()
            async with self._identity_lock:
                if self._bot is None:
                    self._bot = await self._auth_test()
        return self._bot

    async def _auth_test(self) -> BotIdentity:
        try:
            auth = await self.client.auth_test()
        except SlackApiError as exc:
            raise platform_error(exc, "auth.test") from None
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise PlatformError(f"Slack auth.test failed: {type(exc).__name__}") from None
        log.info(
            "Slack bot is %s (%s) in team %s",
            auth.get("user"),
            auth.get("user_id"),
            auth.get("team_id"),
        )
        return BotIdentity(
            user_id=str(auth["user_id"]), bot_id=auth.get("bot_id"), team_id=auth.get("team_id")
        )

    def listeners(self, ingest: Ingest) -> Listeners:
        return Listeners(ingest, self.client, UserNames(self.redis, self.client), self.identity)

    def routes(self, ingest: Ingest) -> Sequence[BaseRoute]:
        secret = self.settings.slack_signing_secret
        if secret is None:
            raise ConfigError("SLACK_SIGNING_SECRET is required for Slack over HTTP (gateway web)")
        app = build_app(
            self.client, self.listeners(ingest), signing_secret=secret.get_secret_value()
        )
        return [events_route(app, secret.get_secret_value())]

    async def connect(self, ingest: Ingest, health: Health) -> None:
        app_token = self.settings.slack_app_token
        if app_token is None:
            raise ConfigError(NEEDS_APP_TOKEN)
        await health.report(False, "connecting")
        app = build_app(self.client, self.listeners(ingest), signing_secret=None)
        supervisor = SocketSupervisor(
            app,
            app_token.get_secret_value(),
            health,
            timing=self.socket_timing,
            backoff=self.socket_backoff,
        )
        await supervisor.run()

    async def shutdown(self) -> None:
        """slack-sdk opens an HTTP session per call: nothing is held open here."""

    async def doctor(self) -> str:
        bot = await self._auth_test()
        detail = f"bot user {bot.user_id} in team {bot.team_id}"
        if self.settings.slack_app_token is not None:
            detail += await self._doctor_socket()
        return detail

    async def _doctor_socket(self) -> str:
        token = self.settings.slack_app_token
        assert token is not None
        try:
            await self.client.apps_connections_open(app_token=token.get_secret_value())
        except SlackApiError as exc:
            raise PlatformError(f"SLACK_APP_TOKEN refused: {exc.response.get('error')}") from None
        return "; Socket Mode token accepted"

    def _bot_token(self) -> str:
        token = self.settings.slack_bot_token
        if token is None:
            raise ConfigError("SLACK_BOT_TOKEN is required for Slack")
        return token.get_secret_value()

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

Two ways to hold tokens. One workspace: SLACK_BOT_TOKEN, the bot's ids from
auth.test at start. Many (SLACK_CLIENT_ID): installs through bolt's OAuth flow
(`oauth.py`) into the installation store (`installations.py`, tokens encrypted
with GATEWAY_SECRET_KEY); bolt authorizes each request with its workspace's
installation, so a listener's `client` and `context` (the bot's ids) are that
workspace's, and `app_uninstalled` / `tokens_revoked` remove what they name.
Workers pick each reply's token by its workspace (`workspaces.py`).
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
from slack_bolt.async_app import AsyncApp, AsyncBoltContext
from slack_bolt.authorization.async_authorize import AsyncInstallationStoreAuthorize
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from starlette.routing import BaseRoute

from adapters.common import SHAPE_ERRORS, invalid, refusal_text
from adapters.slack.client import web_client
from adapters.slack.connection import Backoff, SocketSupervisor, Timing
from adapters.slack.files import SlackFileSource, WorkspaceFileSource
from adapters.slack.http import events_route, oauth_routes
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
from adapters.slack.installations import RedisInstallationStore
from adapters.slack.names import UserNames
from adapters.slack.oauth import oauth_settings
from adapters.slack.render import escape
from adapters.slack.sender import SlackSender, platform_error
from adapters.slack.workspaces import Workspaces
from gateway.cipher import TokenCipher
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
    """What the bolt app does with each kind of request."""

    def __init__(
        self,
        ingest: Ingest,
        names: UserNames,
        identity: Identity,
        workspaces: Workspaces | None = None,
    ) -> None:
        """`client` in each listener is bolt's for the request: the workspace's token."""
        self.ingest = ingest
        self.names = names
        self.identity = identity
        self.workspaces = workspaces

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

    async def on_approval(self, ack: Ack, body: dict[str, Any], client: AsyncWebClient) -> None:
        """A click on an approval request's button: acknowledged, then decided; a click
        that does not count is answered to the clicker alone."""
        await ack()
        decision = to_decision(body)
        if decision is None:
            return
        refusal = refusal_text(await self.ingest.decide(decision))
        if refusal is not None:
            await self._tell(client, decision.user_id, decision.address, refusal)

    async def _note_org(self, workspace: str, context: AsyncBoltContext) -> None:
        """A workspace served by its org's org-wide install: noted, so that workers find
        the org's token for its replies."""
        enterprise = context.enterprise_id
        if self.workspaces is not None and context.is_enterprise_install and enterprise:
            await self.workspaces.note_org(workspace, enterprise)

    async def _tell(self, client: AsyncWebClient, user: str, address: Address, text: str) -> None:
        """An ephemeral message through the Web API (as every reply is, so its errors and
        rate limits read alike) rather than the payload's response_url."""
        try:
            await client.chat_postEphemeral(
                channel=address.channel, user=user, thread_ts=address.thread, text=text
            )
        except SlackApiError as exc:
            log.warning("slack: could not tell %s: %s", user, platform_error(exc, "postEphemeral"))

    async def _post_quote(
        self, client: AsyncWebClient, channel: str, user: str, question: str
    ) -> str:
        quoted = "\n".join(f"> {escape(line)}" for line in question.splitlines())
        try:
            posted = await client.chat_postMessage(
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
    app.action(APPROVE_ACTION)(listeners.on_approval)
    app.action(DECLINE_ACTION)(listeners.on_approval)
    # Anything else (other events, interactivity) is acknowledged so Slack does not retry it.
    app.event(re.compile(".*"))(_ignore)
    app.action(re.compile(".*"))(_ack_only)
    app.error(_failed)
    return app


def _installed(client: AsyncWebClient, oauth: AsyncOAuthSettings | None) -> dict[str, Any]:
    """bolt's arguments for many workspaces: the OAuth flow, and an authorize that reads
    the installation store and keeps each token's auth.test answer (one call per token,
    not per event)."""
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


NEEDS_APP_TOKEN = "SLACK_APP_TOKEN is required for Slack Socket Mode (gateway slack)"
BOTH_MODES = (
    "SLACK_BOT_TOKEN and SLACK_CLIENT_ID are both set: set SLACK_BOT_TOKEN for one "
    "workspace, or SLACK_CLIENT_ID and SLACK_CLIENT_SECRET to install into many, not both"
)
MANY_OVER_HTTP = (
    "Slack in many workspaces (SLACK_CLIENT_ID) runs over HTTP (gateway web), "
    "not Socket Mode (gateway slack)"
)


async def _request_identity(context: AsyncBoltContext) -> BotIdentity:
    """The bot's ids in the request's workspace, as bolt's authorize found them."""
    if not context.bot_user_id:
        raise PlatformError("Slack: the request's installation has no bot user")
    return BotIdentity(user_id=context.bot_user_id, bot_id=context.bot_id, team_id=context.team_id)


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
        self._workspaces: Workspaces | None = None

    def validate(self, mode: Mode) -> None:
        settings = self.settings
        if settings.slack_many_workspaces:
            self._validate_many(mode)
            return
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

    def _validate_many(self, mode: Mode) -> None:
        """Installs into many workspaces: the OAuth app's credentials, the signing secret
        (events come over HTTP) and the key that encrypts the stored tokens."""
        settings = self.settings
        if settings.slack_bot_token is not None:
            raise ConfigError(BOTH_MODES)
        if mode == "connect":
            raise ConfigError(MANY_OVER_HTTP)
        because = "for Slack in many workspaces (SLACK_CLIENT_ID is set)"
        for name, value in (
            ("SLACK_CLIENT_SECRET", settings.slack_client_secret),
            ("SLACK_SIGNING_SECRET", settings.slack_signing_secret),
            ("GATEWAY_SECRET_KEY", settings.secret_key),
        ):
            if value is None:
                raise ConfigError(f"{name} is required {because}")

    def uses_http(self) -> bool:
        if self.settings.slack_many_workspaces:
            return True
        return self.settings.slack_bot_token is not None and self.settings.slack_app_token is None

    @property
    def client(self) -> AsyncWebClient:
        """The bot token's client; in many workspaces one without a token, which bolt
        copies for each request with the request's workspace's token."""
        if self._client is None:
            token = None if self.settings.slack_many_workspaces else self._bot_token()
            self._client = web_client(token, self.settings.slack_api_url)
        return self._client

    @property
    def workspaces(self) -> Workspaces:
        """The installations' tokens by workspace (in many workspaces only)."""
        if self._workspaces is None:
            self._workspaces = Workspaces(self.installations(), self.settings.slack_api_url)
        return self._workspaces

    def installations(self) -> RedisInstallationStore:
        key = self.settings.secret_key
        if key is None:
            raise ConfigError("GATEWAY_SECRET_KEY is required for Slack in many workspaces")
        return RedisInstallationStore(self.redis, TokenCipher(key.get_secret_value()))

    def sender(self) -> SlackSender:
        api_url, interval = self.settings.slack_api_url, self.settings.slack_edit_interval
        if self.settings.slack_many_workspaces:
            return SlackSender(web_client(None, api_url), interval, workspaces=self.workspaces)
        return SlackSender(web_client(self._bot_token(), api_url), interval)

    def file_source(self) -> SlackFileSource | WorkspaceFileSource:
        """Files' private URLs, fetched with the bot token (Slack's hosts only)."""
        if self.settings.slack_many_workspaces:
            return WorkspaceFileSource(self.workspaces, self.settings.slack_api_url)
        return SlackFileSource(self._bot_token(), self.settings.slack_api_url)

    async def preflight(self) -> None:
        """In many workspaces: the stored tokens must open with GATEWAY_SECRET_KEY
        (WrongSecretKey, one line naming the variable, when they do not)."""
        if self.settings.slack_many_workspaces:
            count = await self.installations().check_key()
            log.info("Slack is installed in %d workspace(s)", count)

    async def startup(self) -> None:
        """Learn the bot's own ids (so its messages are never taken for a user's); in
        many workspaces bolt learns them per request, from the installation's token."""
        if not self.settings.slack_many_workspaces:
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
        names = UserNames(self.redis, self.client)
        if self.settings.slack_many_workspaces:
            return Listeners(ingest, names, _request_identity, self.workspaces)
        return Listeners(ingest, names, self._own_identity)

    async def _own_identity(self, context: AsyncBoltContext) -> BotIdentity:
        return await self.identity()

    def routes(self, ingest: Ingest) -> Sequence[BaseRoute]:
        secret = self.settings.slack_signing_secret
        if secret is None:
            raise ConfigError("SLACK_SIGNING_SECRET is required for Slack over HTTP (gateway web)")
        oauth = None
        if self.settings.slack_many_workspaces:
            oauth = oauth_settings(self.settings, self.redis, self.installations())
        app = build_app(
            self.client,
            self.listeners(ingest),
            signing_secret=secret.get_secret_value(),
            oauth=oauth,
        )
        routes = [events_route(app, secret.get_secret_value())]
        if app.oauth_flow is not None:
            routes.extend(oauth_routes(app.oauth_flow))
        return routes

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
        if self.settings.slack_many_workspaces:
            count = await self.installations().check_key()
            return f"installed in {count} workspace(s); GATEWAY_SECRET_KEY decrypts their tokens"
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

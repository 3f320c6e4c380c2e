"""Slack as the core sees it: settings checks, the HTTP route, Socket Mode, the tokens.

The bolt app (`app.py`) serves HTTP (`POST /slack/events` in `http.py`, bolt's
own v0 signature check stays on) and Socket Mode (`connection.py`); it is
built here, where both are wired. An event or `/btw` whose ids or text are not
of Slack's form is acknowledged and dropped by the inbound checks (one log
line), and a delivery of another wrong shape gets a 400 and one log line, not
bolt's 500 with a stack trace.

Two ways to hold tokens. One workspace: SLACK_BOT_TOKEN, the bot's ids from
auth.test at start. Many (SLACK_CLIENT_ID): installs through bolt's OAuth flow
(`oauth.py`) into the installation store (`installations.py`, tokens encrypted
with GATEWAY_SECRET_KEY); bolt authorizes each request with its workspace's
installation, so a listener's `client` and `context` (the bot's ids) are that
workspace's, and `app_uninstalled` / `tokens_revoked` remove what they name.
Workers pick each reply's token by its workspace (`workspaces.py`). Both read
the store that refreshes expiring tokens (token rotation, `rotation.py`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.assistant import AssistantThreads
from adapters.slack.client import web_client
from adapters.slack.connection import SOCKET_BACKOFF, SocketSupervisor, Timing
from adapters.slack.errors import core_error
from adapters.slack.files import SlackFileSource, WorkspaceFileSource
from adapters.slack.inbound import BotIdentity
from adapters.slack.installations import RedisInstallationStore
from adapters.slack.names import UserNames
from adapters.slack.rotation import Rotation, rotating_store
from adapters.slack.sender import SlackSender
from adapters.slack.signin import SlackSignIn
from adapters.slack.workspaces import Workspaces
from gateway.errors import ConfigError, PlatformError
from gateway.platform import Mode, Platform
from gateway.settings.scoped import ScopedSettings
from gateway.state.cipher import TokenCipher

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from slack_bolt.async_app import AsyncBoltContext
    from starlette.routing import BaseRoute

    from adapters.slack.app import Listeners
    from gateway.inbound.ingest import Ingest
    from gateway.settings.env import Settings
    from gateway.state.health import Health

log = logging.getLogger(__name__)

NEEDS_APP_TOKEN = "SLACK_APP_TOKEN is required for Slack Socket Mode (gateway slack)"
BOTH_MODES = (
    "SLACK_BOT_TOKEN and SLACK_CLIENT_ID are both set: set SLACK_BOT_TOKEN for one "
    "workspace, or SLACK_CLIENT_ID and SLACK_CLIENT_SECRET to install into many, not both"
)
MANY_OVER_HTTP = (
    "Slack in many workspaces (SLACK_CLIENT_ID) runs over HTTP (gateway web), "
    "not Socket Mode (gateway slack)"
)


class SlackPlatform(Platform):
    """Slack over the Events API (`gateway web`) or Socket Mode (`gateway slack`)."""

    name = "slack"
    # Socket Mode pacing; tests shorten it to watch a reconnect in well under a second.
    socket_timing = Timing()
    socket_backoff = SOCKET_BACKOFF
    # When expiring tokens are refreshed; tests shorten it to tokens of a few seconds.
    token_rotation = Rotation()

    def __init__(self, settings: Settings, redis: Redis) -> None:
        super().__init__(settings, redis)
        self._bot: BotIdentity | None = None
        self._client: AsyncWebClient | None = None
        self._identity_lock: asyncio.Lock | None = None
        self._workspaces: Workspaces | None = None
        self._assistant: AssistantThreads | None = None
        self._opened: list[SlackSender] = []  # senders made for the web process, closed with it

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
        """The installation store, refreshing expiring tokens with the app's credentials."""
        settings = self.settings
        key, client_id, secret = (
            settings.secret_key,
            settings.slack_client_id,
            settings.slack_client_secret,
        )
        if key is None:
            raise ConfigError("GATEWAY_SECRET_KEY is required for Slack in many workspaces")
        cipher = TokenCipher(key.get_secret_value())
        if client_id is None or secret is None:
            return RedisInstallationStore(self.redis, cipher)
        return rotating_store(
            self.redis,
            cipher,
            web_client(None, settings.slack_api_url),
            client_id,
            secret.get_secret_value(),
            self.token_rotation,
        )

    def sender(self) -> SlackSender:
        api_url, interval = self.settings.slack_api_url, self.settings.slack_edit_interval
        if self.settings.slack_many_workspaces:
            return SlackSender(web_client(None, api_url), interval, workspaces=self.workspaces)
        return SlackSender(web_client(self._bot_token(), api_url), interval)

    def operator_sign_in(self) -> SlackSignIn | None:
        """Sign in with Slack for the console, where the app's client id and secret are set."""
        settings, secret = self.settings, self.settings.slack_client_secret
        if settings.slack_client_id is None or secret is None:
            return None
        sender = self.sender()
        self._opened.append(sender)
        return SlackSignIn(
            web_client(None, settings.slack_api_url),
            sender,
            settings.slack_client_id,
            secret.get_secret_value(),
            settings.slack_api_url,
            settings.admin_users,
        )

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
            raise core_error(exc) from None
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

    @property
    def assistant_threads(self) -> AssistantThreads:
        """Assistant threads' prompts and titles, set from the process that takes events."""
        if self._assistant is None:
            scoped = ScopedSettings(self.redis, self.settings)
            self._assistant = AssistantThreads(self.redis, scoped)
        return self._assistant

    def listeners(self, ingest: Ingest) -> Listeners:
        # bolt (app.py, http.py, oauth.py) is loaded by the processes that take events
        # only: a worker sends through slack_sdk and never builds an app (5 MB less).
        from adapters.slack.app import Listeners, request_identity

        names = UserNames(self.redis, self.client)
        if self.settings.slack_many_workspaces:
            return Listeners(
                ingest, names, request_identity, self.workspaces, self.assistant_threads
            )
        return Listeners(ingest, names, self._own_identity, assistant=self.assistant_threads)

    async def _own_identity(self, context: AsyncBoltContext) -> BotIdentity:
        return await self.identity()

    def routes(self, ingest: Ingest) -> Sequence[BaseRoute]:
        from adapters.slack.app import build_app
        from adapters.slack.http import events_route, oauth_routes
        from adapters.slack.oauth import oauth_settings

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
        from adapters.slack.app import build_app

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
        """The senders made for the web process (the console's sign-in) close their
        shared HTTP session."""
        opened, self._opened = self._opened, []
        for sender in opened:
            await sender.aclose()

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

"""Slack as the core sees it: settings checks, the HTTP route, Socket Mode, the Sender."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from starlette.routing import BaseRoute

from adapters.slack.app import Listeners, build_app
from adapters.slack.http import events_route
from adapters.slack.inbound import BotIdentity
from adapters.slack.names import UserNames
from adapters.slack.sender import SlackSender, platform_error, web_client
from adapters.slack.socket import Backoff, SocketSupervisor, Timing
from gateway.errors import ConfigError, PlatformError
from gateway.ports import Mode, Platform

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from gateway.config import Settings
    from gateway.health import Health
    from gateway.ingest import Ingest

log = logging.getLogger(__name__)

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
            raise ConfigError("SLACK_SIGNING_SECRET is required for Slack over HTTP "
                              "(gateway web); set it, or set SLACK_APP_TOKEN for Socket Mode")
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
        return SlackSender(web_client(self._bot_token(), self.settings.slack_api_url),
                           self.settings.slack_edit_interval)

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
        log.info("Slack bot is %s (%s) in team %s", auth.get("user"), auth.get("user_id"),
                 auth.get("team_id"))
        return BotIdentity(user_id=str(auth["user_id"]), bot_id=auth.get("bot_id"),
                           team_id=auth.get("team_id"))

    def listeners(self, ingest: Ingest) -> Listeners:
        return Listeners(ingest, self.client, UserNames(self.redis, self.client), self.identity)

    def routes(self, ingest: Ingest) -> Sequence[BaseRoute]:
        secret = self.settings.slack_signing_secret
        if secret is None:
            raise ConfigError("SLACK_SIGNING_SECRET is required for Slack over HTTP (gateway web)")
        app = build_app(self.client, self.listeners(ingest),
                        signing_secret=secret.get_secret_value())
        return [events_route(app, secret.get_secret_value())]

    async def connect(self, ingest: Ingest, health: Health) -> None:
        app_token = self.settings.slack_app_token
        if app_token is None:
            raise ConfigError(NEEDS_APP_TOKEN)
        await health.report(False, "connecting")
        app = build_app(self.client, self.listeners(ingest), signing_secret=None)
        supervisor = SocketSupervisor(app, app_token.get_secret_value(), health,
                                      timing=self.socket_timing, backoff=self.socket_backoff)
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

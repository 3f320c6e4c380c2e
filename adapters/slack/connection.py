"""Socket Mode, held by a supervisor that notices a dead connection and says so.

slack-sdk's client reconnects by itself at a fixed interval and its state is
invisible from outside, so a gateway built on it alone can lose its socket and
keep reporting healthy. Here the supervisor owns reconnection: it asks
apps.connections.open for a URL, connects, watches `is_connected()` (closed
socket, failed ping-pong), reports to `Health` on every change and every few
seconds, and reconnects with capped exponential backoff and jitter.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp
from redis.exceptions import RedisError
from slack_sdk.errors import SlackApiError

from adapters.health import RENEW_INTERVAL
from gateway.backoff import Backoff
from gateway.state.health import Health

if TYPE_CHECKING:  # bolt is loaded by the processes that serve Slack, not by workers
    from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
    from slack_bolt.async_app import AsyncApp

log = logging.getLogger(__name__)


class ConnectFailed(Exception):
    """One connection attempt failed (the reason is safe to show: no token)."""


# Many processes lose Socket Mode together when Slack drops connections: jittered.
SOCKET_BACKOFF = Backoff(first=1.0, limit=60.0, jitter=0.5)


@dataclass(frozen=True, slots=True)
class Timing:
    """How often to ping Slack, to check the connection, and how long one connect may take."""

    ping_interval: float = 10.0
    check_interval: float = 1.0
    connect_timeout: float = 20.0
    renew_interval: float = RENEW_INTERVAL


class SocketSupervisor:
    """Runs one Socket Mode connection for `app` until cancelled."""

    def __init__(
        self,
        app: AsyncApp,
        app_token: str,
        health: Health,
        *,
        timing: Timing | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.app = app
        self.app_token = app_token
        self.health = health
        self.timing = timing or Timing()
        self.backoff = backoff or SOCKET_BACKOFF
        self.connects = 0

    async def run(self) -> None:
        attempt = 0
        try:
            while True:
                failure = await self._session()
                if failure is None:
                    attempt = 0
                    log.warning("Socket Mode connection lost; reconnecting")
                    await self.health.report(False, "connection lost; reconnecting")
                    continue
                delay = self.backoff.delay(attempt)
                attempt += 1
                log.warning("Socket Mode connect failed (%s); retrying in %.1fs", failure, delay)
                await self._wait(delay, f"cannot connect: {failure}")
        finally:
            await self._report_stopped()

    async def _session(self) -> str | None:
        """Connect and hold one connection until it dies; the reason when it never opened."""
        handler = self._handler()
        try:
            try:
                await self._open(handler)
            except ConnectFailed as exc:
                return str(exc)
            self.connects += 1
            log.info("Socket Mode connected")
            await self._watch(handler)
            return None
        finally:
            await self._close(handler)

    async def _report_stopped(self) -> None:
        try:
            await asyncio.shield(self.health.report(False, "stopped"))
        except (RedisError, OSError, asyncio.CancelledError) as exc:
            log.debug("could not report the stop: %s", type(exc).__name__)

    def _handler(self) -> AsyncSocketModeHandler:
        from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler

        handler = AsyncSocketModeHandler(
            self.app, self.app_token, ping_interval=self.timing.ping_interval
        )
        # The supervisor reconnects (with backoff, visible in health); the SDK's own
        # fixed-interval reconnect would fight it.
        handler.client.default_auto_reconnect_enabled = False
        handler.client.auto_reconnect_enabled = False
        return handler

    async def _open(self, handler: AsyncSocketModeHandler) -> None:
        client = handler.client
        try:
            opened = await client.web_client.apps_connections_open(app_token=self.app_token)
        except SlackApiError as exc:
            raise ConnectFailed(f"apps.connections.open: {exc.response.get('error')}") from None
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise ConnectFailed(f"apps.connections.open: {type(exc).__name__}") from None
        client.wss_uri = str(opened["url"])
        try:
            # The SDK's connect() retries a failing websocket forever; bound it.
            connecting = client.connect()  # type: ignore[no-untyped-call]
            await asyncio.wait_for(connecting, self.timing.connect_timeout)
        except TimeoutError:
            raise ConnectFailed("websocket did not open in time") from None
        if not await client.is_connected():
            raise ConnectFailed("websocket closed at once")
        await self.health.report(True, "connected")

    async def _watch(self, handler: AsyncSocketModeHandler) -> None:
        """Return once the connection has been down for two checks in a row."""
        renewed = time.monotonic()
        misses = 0
        while misses < 2:
            await asyncio.sleep(self.timing.check_interval)
            misses = 0 if await handler.client.is_connected() else misses + 1
            if misses == 0 and time.monotonic() - renewed >= self.timing.renew_interval:
                await self.health.report(True, "connected")
                renewed = time.monotonic()

    async def _wait(self, delay: float, detail: str) -> None:
        """Sleep `delay` seconds, keeping the "down" report alive meanwhile."""
        deadline = time.monotonic() + delay
        while True:
            await self.health.report(False, detail)
            left = deadline - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(left, self.timing.renew_interval))

    @staticmethod
    async def _close(handler: AsyncSocketModeHandler) -> None:
        # Shielded: a cancelled supervisor must still release the socket and its session.
        try:
            await asyncio.shield(handler.close_async())  # type: ignore[no-untyped-call]
        except (aiohttp.ClientError, OSError, RuntimeError, asyncio.CancelledError) as exc:
            log.debug("closing the Socket Mode client: %s", type(exc).__name__)

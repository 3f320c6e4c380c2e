"""A platform's connection to the core: checked, started, served, stopped.

The CLI builds one Platform per configured platform from the settings; `Mode`
names what a command asks of it (receive over HTTP, hold a connection, or only
send). What the core asks of it while working, a Sender and a FileSource, is in
`gateway/ports.py`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from gateway.ports import FileSource, OperatorSignIn, PlainSource, Sender

if TYPE_CHECKING:
    from redis.asyncio import Redis
    from starlette.routing import BaseRoute

    from gateway.inbound.ingest import Ingest
    from gateway.settings.env import Settings
    from gateway.state.health import Health

Mode = Literal["http", "connect", "send"]


class Platform(ABC):
    """One platform's connection to the core, built by the CLI from the settings."""

    name: str

    def __init__(self, settings: Settings, redis: Redis) -> None:
        self.settings = settings
        self.redis = redis

    @abstractmethod
    def validate(self, mode: Mode) -> None:
        """Raise ConfigError (one line, no secret) when `mode` cannot run with these settings."""

    @abstractmethod
    def sender(self) -> Sender:
        """The Sender workers use to reply on this platform."""

    def file_source(self) -> FileSource:
        """Where workers fetch this platform's attachments (their own URLs by default)."""
        return PlainSource()

    def routes(self, ingest: Ingest) -> Sequence[BaseRoute]:
        """HTTP routes mounted on `gateway web` (none by default)."""
        return ()

    def operator_sign_in(self) -> OperatorSignIn | None:
        """How operators sign in to the console with this platform (none by default)."""
        return None

    def uses_http(self) -> bool:
        """Whether this platform, as configured, receives events over `gateway web`."""
        return False

    async def preflight(self) -> None:
        """Checks of what is stored, before anything serves or works (stored tokens that
        open with the configured key...): raise ConfigError, one line, no secret."""

    async def startup(self) -> None:
        """Called once before routes serve or `connect` runs (learn the bot's own ids...)."""

    async def shutdown(self) -> None:
        """Release clients opened by `startup`."""

    async def connect(self, ingest: Ingest, health: Health) -> None:
        """Hold the platform connection (Socket Mode, polling, gateway) until cancelled."""
        raise NotImplementedError(f"{self.name} has no long-lived connection")

    @abstractmethod
    async def doctor(self) -> str:
        """Check the token against the platform; return a short detail or raise PlatformError."""

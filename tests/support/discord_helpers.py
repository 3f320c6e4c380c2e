"""The Discord adapter's test pieces: the fake guilds' ids, an Ingest and a Health that
remember what they were given, and `Gateway`, the real connection running in a task."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis

from adapters.discord import DiscordPlatform
from gateway.inbound.ingest import Ingest, Receipt
from gateway.messages import Inbound
from gateway.settings.env import Settings
from gateway.state.health import Health, read_all
from tests.fakes.discord_api import FakeDiscord

GUILD, CHANNEL = "1200000000000000001", "1300000000000000001"
# A guild whose id lands on shard 1 of 2: (id >> 22) % 2 == 1.
GUILD_B, CHANNEL_B = str(1 << 22 | 7), "1300000000000000002"
INTENTS = (1 << 0) | (1 << 9) | (1 << 12) | (1 << 15)


class RecordingIngest(Ingest):
    """The real Ingest, remembering what the adapter handed it."""

    def __init__(self, settings: Settings, redis: Redis) -> None:
        super().__init__(settings, redis)
        self.seen: list[tuple[Inbound, Receipt]] = []

    async def receive(self, inbound: Inbound) -> Receipt:
        outcome = await super().receive(inbound)
        self.seen.append((inbound, outcome))
        return outcome


class RecordingHealth(Health):
    """The real Health, remembering each report: a drop that resumes within milliseconds is
    over before a poll of Redis could see it."""

    def __init__(self, redis: Redis, component: str) -> None:
        super().__init__(redis, component)
        self.reported: list[bool] = []

    async def report(self, up: bool, detail: str = "") -> None:
        await super().report(up, detail)
        self.reported.append(up)


class Gateway:
    """`DiscordPlatform.connect` running in a task, with its Ingest and Health."""

    def __init__(self, fake: FakeDiscord, redis: Redis, **settings: Any) -> None:
        self.settings = Settings(
            **{
                "DISCORD_BOT_TOKEN": fake.token,
                "DISCORD_API_URL": fake.api_url,
                "DISCORD_GATEWAY_URL": fake.gateway_url,
                "DISCORD_ALLOW_ALL": True,
                **settings,
            }
        )
        self.platform = DiscordPlatform(self.settings, redis)
        self.ingest = RecordingIngest(self.settings, redis)
        self.health = RecordingHealth(redis, "discord")
        self.redis = redis
        self.task: asyncio.Task[None] | None = None
        self._reports: dict[str, dict[str, Any]] = {}

    async def __aenter__(self) -> Gateway:
        self.platform.validate("connect")
        await self.platform.startup()
        self.task = asyncio.create_task(self.platform.connect(self.ingest, self.health))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        await self.platform.shutdown()

    async def until(
        self, fake: FakeDiscord, condition: Callable[[], Any], within: float = 30.0
    ) -> Any:
        """Poll `condition` (with `reports` fresh), failing at once if the connection ended."""
        deadline = time.monotonic() + within
        while True:
            if self.task is not None and self.task.done():
                self.task.result()
                raise AssertionError("the gateway connection ended")
            self._reports = await read_all(self.redis)
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError("condition not met before the deadline")
            await asyncio.sleep(0.02)

    async def seen(self, fake: FakeDiscord, count: int = 1) -> list[tuple[Inbound, Receipt]]:
        await self.until(fake, lambda: len(self.ingest.seen) >= count)
        return self.ingest.seen

    async def ready(self, fake: FakeDiscord) -> None:
        await self.until(fake, lambda: self.reports.get("discord", {}).get("up"))

    @property
    def reports(self) -> dict[str, dict[str, Any]]:
        """The health reports in Redis, as /healthz shows them (refreshed by `until`)."""
        return self._reports

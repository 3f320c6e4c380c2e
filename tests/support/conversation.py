"""A conversation driven through the real Ingest and Worker, for long-conversation tests.

Messages go in through `Ingest.receive`, a real `Worker` runs the turns
against the loopback fake model, replies land in a RecordingSender.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from gateway.inbound.ingest import Ingest
from gateway.models.litellm_backend import load_litellm
from gateway.settings.env import Settings
from gateway.state.keys import Keys
from gateway.state.session import SessionStore
from gateway.worker import Worker
from tests.fakes.llm_server import FakeLLM
from tests.support.helpers import inbound
from tests.support.recording_sender import RecordingSender
from tests.support.redis_servers import client_for

MAIN = "openai/main-model"
STATEFUL_MAIN = "openai/responses/main-model"
COMPRESSOR = "openai/compress-model"
SIDE = "openai/side-model"
SYSTEM = "You are a test assistant."


def make_settings(redis_url: str, llm: FakeLLM, **values: Any) -> Settings:
    base: dict[str, Any] = {
        "REDIS_URL": redis_url,
        "GATEWAY_MODEL": MAIN,
        "GATEWAY_SIDE_MODEL": SIDE,
        "GATEWAY_COMPRESSION_MODEL": COMPRESSOR,
        "GATEWAY_API_BASE": llm.api_base,
        "GATEWAY_API_KEY": "sk-test",
        "GATEWAY_MODEL_RETRIES": 0,
        "GATEWAY_SYSTEM_PROMPT": SYSTEM,
        "GATEWAY_LEASE_TTL": 10.0,  # no lease lost to a loaded machine here
        "GATEWAY_ALLOWED_USERS": "test:U1",
        "GATEWAY_MODEL_PROCESSES": 0,  # as in helpers.settings
    }
    base.update(values)
    return Settings(_env_file=None, **base)


@dataclass
class Conversation:
    settings: Settings
    redis: aioredis.Redis
    llm: FakeLLM
    ingest: Ingest
    sessions: SessionStore
    sender: RecordingSender
    workers: list[Worker] = field(default_factory=list)
    stops: list[asyncio.Event] = field(default_factory=list)
    runs: list[asyncio.Task[None]] = field(default_factory=list)
    clients: list[aioredis.Redis] = field(default_factory=list)
    channel: str = "C1"

    @property
    def key(self) -> str:
        return f"test:W:{self.channel}"

    async def start_worker(self) -> Worker:
        client = aioredis.Redis.from_url(str(self.settings.redis_url), decode_responses=True)
        worker = Worker(self.settings, client, {"test": self.sender})
        stop = asyncio.Event()
        self.clients.append(client)
        self.workers.append(worker)
        self.stops.append(stop)
        self.runs.append(asyncio.create_task(worker.run(stop)))
        await worker.ready.wait()
        return worker

    async def stop_worker(self, index: int) -> None:
        """Stop a worker's loops; its background compressions go on running."""
        self.stops[index].set()
        await self.runs[index]

    async def send(self, text: str) -> None:
        await self.ingest.receive(inbound(text, channel=self.channel))

    async def say(self, text: str, timeout: float = 20.0) -> None:
        """Send a message and wait until its turn is done."""
        await self.send(text)
        await self.idle(timeout)

    async def idle(self, timeout: float = 20.0) -> None:
        async with asyncio.timeout(timeout):
            while await self.sessions.owed(self.key) > 0:
                await asyncio.sleep(0.01)

    async def settled(self, timeout: float = 20.0) -> None:
        """Idle, and no compression running in any worker."""
        await self.idle(timeout)
        async with asyncio.timeout(timeout):
            while any(w.turns.compressor.background for w in self.workers):
                await asyncio.sleep(0.01)

    async def segments(self) -> list[dict[str, Any]]:
        return await self.sessions.segments(self.key)

    async def history(self) -> list[dict[str, Any]]:
        return await self.sessions.history(self.key)

    async def meta(self) -> dict[str, str]:
        return await self.sessions.meta(self.key)

    async def preload(self, entries: list[dict[str, Any]]) -> None:
        """Answered history written as earlier turns would have left it."""
        await self.redis.rpush(Keys.history(self.key), *[json.dumps(e) for e in entries])
        await self.redis.hset(Keys.meta(self.key), mapping={"answered": len(entries)})

    def main_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.llm.requests if r.model in ("main-model", "responses/main-model")]

    def compression_requests(self) -> list[dict[str, Any]]:
        return self.llm.requests_for(COMPRESSOR)


@asynccontextmanager
async def conversation(
    redis_url: str, llm: FakeLLM, *, workers: int = 1, **values: Any
) -> AsyncIterator[Conversation]:
    settings = make_settings(redis_url, llm, **values)
    load_litellm()  # seconds of import, paid here rather than inside a timed wait
    client = client_for(redis_url)
    talk = Conversation(
        settings, client, llm, Ingest(settings, client), SessionStore(client), RecordingSender()
    )
    try:
        for _ in range(workers):
            await talk.start_worker()
        yield talk
    finally:
        for stop in talk.stops:
            stop.set()
        llm.release_hangs()
        await asyncio.gather(*talk.runs, return_exceptions=True)
        for worker in talk.workers:
            for task in list(worker.turns.compressor.background):
                task.cancel()
            await asyncio.gather(*worker.turns.compressor.background, return_exceptions=True)
        for each in [*talk.clients, client]:
            await each.aclose()


def user_entry(text: str, entry_id: str) -> dict[str, Any]:
    return {
        "id": entry_id,
        "role": "user",
        "speaker": {"id": "U1", "name": "Alice"},
        "text": text,
        "attachments": [],
        "group": False,
        "reply": {"platform": "test", "workspace": "W", "channel": "C1"},
    }


def assistant_entry(text: str, entry_id: str, **extra: Any) -> dict[str, Any]:
    return {"id": entry_id, "role": "assistant", "text": text, **extra}


def content_of(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content", "")) for m in messages)

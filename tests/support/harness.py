"""Workers run in the test's own process against a real Redis and the loopback model.

`start_workers` yields a Harness: the ingest door, the session store, the recording
sender and the running workers; tests/gateway/conftest.py makes fixtures of it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

from gateway.inbound.ingest import Ingest
from gateway.ports import FileSource, Sender
from gateway.state.keys import Keys
from gateway.state.session import SessionStore
from gateway.worker import Worker
from tests.fakes.llm_server import FakeLLM
from tests.support.helpers import settings
from tests.support.recording_sender import RecordingSender
from tests.support.redis_servers import client_for


@dataclass
class Harness:
    ingest: Ingest
    sessions: SessionStore
    sender: RecordingSender
    llm: FakeLLM
    workers: list[Worker]

    async def idle(self, session_key: str, timeout: float = 15.0) -> None:
        """Wait until every job of the session is done; fail saying what is still owed."""
        try:
            async with asyncio.timeout(timeout):
                while await self.sessions.owed(session_key) > 0:
                    await asyncio.sleep(0.02)
        except TimeoutError:
            meta = await self.sessions.meta(session_key)
            inbox = await self.sessions.inbox(session_key)
            raise AssertionError(
                f"{session_key} not idle after {timeout:g} s: "
                f"meta {meta}, {len(inbox)} in its inbox"
            ) from None

    async def metrics(self) -> dict[str, str]:
        """The `/metrics` counters in Redis, once every worker wrote what it gathered."""
        for worker in self.workers:
            await worker.metrics.flush()
        return cast(dict[str, str], await self.sessions.redis.hgetall(Keys.METRICS))

    async def take_over(self, session_key: str) -> None:
        """What a running turn meets when its lease expired and another run claimed the
        session and died too: the key gone, and the last claim not its own (a lease that
        expired with nobody taking it is taken again, not lost)."""
        redis = self.sessions.redis
        await redis.hset(Keys.meta(session_key), "claimant", "a-run-that-died")
        await redis.delete(Keys.lease(session_key))

    async def lose_reply_ids(self, session_key: str) -> None:
        """What a run that died between posting and storing its message's id leaves: once
        the running turn has stored its ids (it has posted), the turn is taken over and
        the ids are deleted."""
        redis = self.sessions.redis
        async with asyncio.timeout(10):
            while not await redis.exists(Keys.replies(session_key)):
                await asyncio.sleep(0.02)
        await self.take_over(session_key)
        await redis.delete(Keys.replies(session_key))

    async def history(self, session_key: str) -> list[dict[str, Any]]:
        return await self.sessions.history(session_key)


@asynccontextmanager
async def start_workers(
    redis_url: str,
    llm: FakeLLM,
    count: int,
    sources: Mapping[str, FileSource] | None = None,
    *,
    senders: Mapping[str, Sender] | None = None,
    **values: Any,
) -> AsyncIterator[Harness]:
    """`count` workers; they reply through the recording sender (platform "test"), or
    through `senders` when given (a platform's real sender against its fake, closed on
    the way out)."""
    defaults: dict[str, Any] = {
        "GATEWAY_MODEL": "openai/main-model",
        "GATEWAY_SIDE_MODEL": "openai/side-model",
        "GATEWAY_API_BASE": llm.api_base,
        "GATEWAY_API_KEY": "sk-test-key",
        "GATEWAY_MODEL_RETRIES": 1,
    }
    config = settings(redis_url, **(defaults | values))
    clients = [client_for(redis_url) for _ in range(count + 1)]
    sender = RecordingSender()
    given = dict(senders or {})
    senders = given or {"test": sender}
    workers = [Worker(config, client, senders, sources=sources) for client in clients[1:]]
    stop = asyncio.Event()
    runs = [asyncio.create_task(w.run(stop)) for w in workers]
    await asyncio.gather(*(w.ready.wait() for w in workers))
    try:
        yield Harness(Ingest(config, clients[0]), SessionStore(clients[0]), sender, llm, workers)
    finally:
        stop.set()
        llm.release_hangs()
        await asyncio.gather(*runs, return_exceptions=True)
        for given_sender in given.values():  # as the CLI closes its senders
            await given_sender.aclose()
        for client in clients:
            await client.aclose()


def texts(sender: RecordingSender) -> list[str]:
    return list(sender.messages.values())

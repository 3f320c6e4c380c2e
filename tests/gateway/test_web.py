"""`gateway web` itself: `/healthz` and `/metrics` with Redis up, busy or gone, and body limits.

The real parts: the app from `create_app`, the production Redis client
(`store.connect`, with its retries) on a redis-server of the test's own that a
test can kill, httpx through ASGITransport, and a real uvicorn on a loopback
port where the test needs the wire itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx
import pytest
import redis
import uvicorn
from redis.asyncio import Redis
from starlette.applications import Starlette

from gateway import store
from gateway.config import load_settings
from gateway.health import REPORT_TTL, Health, read_all
from gateway.ingest import Ingest
from gateway.web import create_app
from tests.conftest import free_port


@dataclass
class OwnRedis:
    """A redis-server only this test talks to (so it can be killed, and its counters are ours)."""

    url: str
    process: subprocess.Popen[bytes]

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)

    def commands_processed(self, counter: redis.Redis) -> int:
        """Redis's count of commands run so far (asked over `counter`, one connection held open,
        so that each question costs exactly one command)."""
        return int(counter.info("stats")["total_commands_processed"])


@pytest.fixture
def own_redis() -> Iterator[OwnRedis]:
    workdir = tempfile.mkdtemp(prefix="gw-web-redis-")
    port = free_port()
    process = subprocess.Popen(
        [store.find_redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir,
         "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = OwnRedis(f"redis://127.0.0.1:{port}", process)
    _wait_until_it_answers(server)
    yield server
    if process.poll() is None:
        server.kill()


def _wait_until_it_answers(server: OwnRedis) -> None:
    client = redis.Redis.from_url(server.url)
    deadline = time.monotonic() + 10
    try:
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if server.process.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
    finally:
        client.close()


@contextlib.asynccontextmanager
async def web_app(url: str) -> AsyncIterator[tuple[Redis, httpx.AsyncClient]]:
    """The app with no platform mounted, over the production client (retries and all)."""
    client = store.connect(url)
    settings = load_settings(_env_file=None, REDIS_URL=url)
    app = create_app(client, Ingest(settings, client), [], ["slack", "telegram"])
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
            yield client, http
    finally:
        await client.aclose()


async def timed_get(http: httpx.AsyncClient, path: str) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = await http.get(path)
    return response, time.perf_counter() - started


# -- /healthz and /metrics ---------------------------------------------------------

async def test_healthz_answers_503_within_a_second_once_redis_is_gone(
        own_redis: OwnRedis) -> None:
    async with web_app(own_redis.url) as (_, http):
        assert (await http.get("/healthz")).status_code == 200
        own_redis.kill()
        response, seconds = await timed_get(http, "/healthz")
    assert response.status_code == 503
    assert response.json() == {"status": "down", "redis": "down"}
    assert seconds < 1.0


async def test_metrics_answers_503_within_a_second_once_redis_is_gone(
        own_redis: OwnRedis) -> None:
    async with web_app(own_redis.url) as (_, http):
        assert (await http.get("/metrics")).status_code == 200
        own_redis.kill()
        response, seconds = await timed_get(http, "/metrics")
    assert response.status_code == 503
    assert seconds < 1.0


async def test_healthz_work_does_not_grow_with_the_keyspace(own_redis: OwnRedis) -> None:
    async with web_app(own_redis.url) as (client, http):
        await Health(client, "slack").report(True, "connected")
        async with client.pipeline(transaction=False) as pipe:
            for n in range(10_000):  # dedupe marks pile up like this in a busy deployment
                pipe.set(store.Keys.seen(f"slack:T1:C{n % 50}", f"Ev{n}"), "1")
            await pipe.execute()
        await http.get("/healthz")  # connects the pool, so only the request itself is counted
        with redis.Redis.from_url(own_redis.url, single_connection_client=True) as counter:
            before = own_redis.commands_processed(counter)
            response = await http.get("/healthz")
            after = own_redis.commands_processed(counter)
    assert response.status_code == 200
    assert response.json()["connections"]["slack"]["up"] is True
    assert after - before - 1 <= 2  # the first INFO is counted too


async def test_healthz_shows_each_report_and_is_degraded_while_one_is_down(
        redis_url: str) -> None:
    async with web_app(redis_url) as (client, http):
        await Health(client, "slack").report(True, "connected")
        await Health(client, "telegram").report(False, "network: refused")
        body = (await http.get("/healthz")).json()
    assert body["status"] == "degraded" and body["redis"] == "up"
    assert body["connections"]["slack"]["up"] is True
    assert body["connections"]["telegram"] == {
        "up": False, "detail": "network: refused", "at": body["connections"]["telegram"]["at"]}


async def test_a_report_its_process_stopped_renewing_is_no_longer_shown(redis_url: str) -> None:
    client = Redis.from_url(redis_url, decode_responses=True)
    try:
        await Health(client, "discord").report(True, "1 of 1 shards connected")
        assert "discord" in await read_all(client)
        later = time.time() + REPORT_TTL + 1
        assert await read_all(client, now=later) == {}
    finally:
        await client.aclose()


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # pytest keeps its own signal handlers


@contextlib.asynccontextmanager
async def serving(app: Starlette) -> AsyncIterator[int]:
    """The app on a real uvicorn on a loopback port; yields the port."""
    port = free_port()
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off",
                                    log_level="warning", access_log=False))
    task = asyncio.create_task(server.serve())
    deadline = time.monotonic() + 10
    while not server.started:
        assert not task.done() and time.monotonic() < deadline, "uvicorn did not start"
        await asyncio.sleep(0.01)
    try:
        yield port
    finally:
        server.should_exit = True
        await task

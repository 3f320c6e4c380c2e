"""`gateway web` itself: `/healthz` and `/metrics` with Redis up, busy or gone, and body limits.

The real parts: the app from `create_app`, the production Redis client
(`keys.connect`, with its retries) on a redis-server of the test's own that a
test can kill, httpx through ASGITransport, and a real uvicorn on a loopback
port where the test needs the wire itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx
import pytest
import redis
import uvicorn
from redis.asyncio import Redis
from starlette.applications import Starlette

from gateway.http.app import create_app
from gateway.http.limits import MAX_BODY
from gateway.inbound.ingest import Ingest
from gateway.settings.env import load_settings
from gateway.state import keys
from gateway.state.health import REPORT_TTL, Health, read_all
from tests.support.redis_servers import free_port, start_redis

CHUNK = 64 * 1024


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
    process, url = start_redis(prefix="gw-web-redis-")
    server = OwnRedis(url, process)
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
    client = keys.connect(url)
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


async def test_healthz_answers_503_within_a_second_once_redis_is_gone(own_redis: OwnRedis) -> None:
    async with web_app(own_redis.url) as (_, http):
        assert (await http.get("/healthz")).status_code == 200
        own_redis.kill()
        response, seconds = await timed_get(http, "/healthz")
    assert response.status_code == 503
    assert response.json() == {"status": "down", "redis": "down"}
    assert seconds < 1.0


async def test_metrics_answers_503_within_a_second_once_redis_is_gone(own_redis: OwnRedis) -> None:
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
                pipe.set(keys.Keys.seen(f"slack:T1:C{n % 50}", f"Ev{n}"), "1")
            await pipe.execute()
        await http.get("/healthz")  # connects the pool, so only the request itself is counted
        with redis.Redis.from_url(own_redis.url, single_connection_client=True) as counter:
            before = own_redis.commands_processed(counter)
            response = await http.get("/healthz")
            after = own_redis.commands_processed(counter)
    assert response.status_code == 200
    assert response.json()["connections"]["slack"]["up"] is True
    assert after - before - 1 <= 2  # the first INFO is counted too


async def test_healthz_shows_each_report_and_is_degraded_while_one_is_down(redis_url: str) -> None:
    async with web_app(redis_url) as (client, http):
        await Health(client, "slack").report(True, "connected")
        await Health(client, "telegram").report(False, "network: refused")
        body = (await http.get("/healthz")).json()
    assert body["status"] == "degraded" and body["redis"] == "up"
    assert body["connections"]["slack"]["up"] is True
    assert body["connections"]["telegram"] == {
        "up": False,
        "detail": "network: refused",
        "at": body["connections"]["telegram"]["at"],
    }


async def test_a_report_its_process_stopped_renewing_is_no_longer_shown(redis_url: str) -> None:
    client = Redis.from_url(redis_url, decode_responses=True)
    try:
        await Health(client, "discord").report(True, "1 of 1 shards connected")
        assert "discord" in await read_all(client)
        later = time.time() + REPORT_TTL + 1
        assert await read_all(client, now=later) == {}
    finally:
        await client.aclose()


# -- body limits -------------------------------------------------------------------


async def test_a_content_length_over_the_limit_is_413_before_any_body_is_sent(
    redis_url: str,
) -> None:
    async with serving(bare_app(redis_url)) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /anything HTTP/1.1\r\nHost: gateway\r\n"
            b"Content-Type: application/json\r\nContent-Length: 5000000000\r\n\r\n"
        )
        await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 5)
        writer.close()
    assert status.startswith(b"HTTP/1.1 413")


async def test_a_chunked_body_is_cut_off_at_the_limit(redis_url: str) -> None:
    sent = 0

    async def endless() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(1024):  # 64 MiB, if anyone kept reading
            sent += CHUNK
            yield b"x" * CHUNK

    transport = httpx.ASGITransport(app=bare_app(redis_url))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        response = await http.post("/anything", content=endless())
    assert response.status_code == 413
    assert sent <= MAX_BODY + 2 * CHUNK


async def test_a_chunked_body_over_the_limit_is_413_on_the_wire(redis_url: str) -> None:
    async with serving(bare_app(redis_url)) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(
            b"POST /anything HTTP/1.1\r\nHost: gateway\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        chunk = b"%x\r\n" % CHUNK + b"x" * CHUNK + b"\r\n"
        for _ in range(MAX_BODY // CHUNK + 1):  # just over the limit, then wait for the answer
            writer.write(chunk)
            await writer.drain()
        status = await asyncio.wait_for(reader.readline(), 5)
        writer.close()
    assert status.startswith(b"HTTP/1.1 413")


async def test_a_body_within_the_limit_reaches_the_route(redis_url: str) -> None:
    transport = httpx.ASGITransport(app=bare_app(redis_url))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        response = await http.post("/healthz", content=b"x" * (MAX_BODY - 1))
    assert response.status_code == 405  # the route's own answer: the body was let through


def bare_app(redis_url: str) -> Starlette:
    client = Redis.from_url(redis_url, decode_responses=True)
    settings = load_settings(_env_file=None, REDIS_URL=redis_url)
    return create_app(client, Ingest(settings, client), [], [])


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # pytest keeps its own signal handlers


@contextlib.asynccontextmanager
async def serving(app: Starlette) -> AsyncIterator[int]:
    """The app on a real uvicorn on a loopback port; yields the port."""
    port = free_port()
    server = _Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=port, lifespan="off", log_level="warning", access_log=False
        )
    )
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


async def test_a_report_with_redis_gone_is_logged_not_raised(
    own_redis: OwnRedis, caplog: pytest.LogCaptureFixture
) -> None:
    client = keys.connect(own_redis.url)
    try:
        reporter = Health(client, "slack")
        await reporter.report(True, "connected")
        own_redis.kill()
        with caplog.at_level(logging.WARNING, logger="gateway.state.health"):
            await reporter.report(False, "connection lost; reconnecting")
    finally:
        await client.aclose()
    (logged,) = [r.getMessage() for r in caplog.records if r.name == "gateway.state.health"]
    # Its timeout while the client retries, or at once: a write the server may have
    # taken before it died is not sent again (gateway/state/connection.py).
    assert logged in {
        f"health of slack not reported: Redis does not answer ({name})"
        for name in ("TimeoutError", "OutcomeUnknown")
    }

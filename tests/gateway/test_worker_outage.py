"""A worker through an outage of its Redis: a redis-server killed and started again on the
same port without persistence (its streams and their consumer group gone with it). The
worker says so once, says once that it reads again, and answers what comes after: the
job stream's group, lost with the server's data, is made again."""

from __future__ import annotations

import asyncio
import logging
import tempfile

import pytest
import redis.asyncio as aioredis

from tests.fakes.llm_server import FakeLLM
from tests.support.harness import start_workers, texts
from tests.support.helpers import inbound
from tests.support.redis_servers import free_port, redis_command, serve, until


async def _answering(port: int) -> None:
    client = aioredis.Redis(port=port)
    try:
        async with asyncio.timeout(20):
            while True:
                try:
                    await client.ping()
                    return
                except (OSError, aioredis.ConnectionError):
                    await asyncio.sleep(0.05)
    finally:
        await client.aclose()


async def test_a_worker_says_once_that_redis_is_gone_and_answers_once_it_is_back(
    llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    command = redis_command(port, tempfile.mkdtemp(prefix="gw-outage-"), "--appendonly", "no")
    server = serve(command)
    await _answering(port)
    caplog.set_level(logging.DEBUG, logger="gateway")
    llm.reply = "answered"

    def said(text: str) -> int:
        return sum(text in r.getMessage() for r in caplog.records)

    try:
        async with start_workers(f"redis://127.0.0.1:{port}", llm, 1) as h:
            before = inbound("before")
            await h.ingest.receive(before)
            await h.idle(before.session_key)

            server.kill()
            server.wait()
            await until(lambda: said("reading jobs: still failing") >= 3)
            server = serve(command)
            await _answering(port)
            await until(lambda: said("reading jobs works again") >= 1)

            after = inbound("after", channel="C-after")
            await h.ingest.receive(after)
            await h.idle(after.session_key)
            assert texts(h.sender) == ["answered", "answered"]

        warned = [
            r.getMessage().split(" (")[0]
            for r in caplog.records
            if r.name == "gateway.worker" and r.levelno >= logging.WARNING
        ]
        assert warned.count("reading jobs failed") == 1
        assert said("had lost its group; made again") >= 1
    finally:
        server.kill()
        server.wait()

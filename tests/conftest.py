"""Shared fixtures: a real redis-server started for the test run, a clean database per test."""

from __future__ import annotations

import gc
import itertools
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
import redis.asyncio as aioredis

from adapters.telegram.client import prepare_process
from gateway.state import shards
from tests.support.clusters import Cluster, start_cluster
from tests.support.redis_servers import client_for, start_redis
from tests.support.sentinel import SentinelSet
from tests.support.web_server import SCREENSHOTS

pytest_plugins = ["tests.fakes.fixtures", "tests.support.leaks"]


_STARTED = time.time()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Names the folder of the console's screenshots when this run took any."""
    if SCREENSHOTS.is_dir() and any(
        shot.stat().st_mtime >= _STARTED for shot in SCREENSHOTS.glob("*.png")
    ):
        terminalreporter.write_line(f"console screenshots: {SCREENSHOTS}")


@pytest.fixture(scope="session", autouse=True)
def telegram_process() -> None:
    """The test process set up as the CLI's is when it starts Telegram, whichever test
    builds a Telegram client first."""
    prepare_process()


# The suite names its keys for one job shard (streams such as `Keys.jobs("test", 0)`
# are then every job of a platform); the processes it starts are told the same
# (tests/support/processes.py). The tests of the shards themselves, and those run
# against a Redis Cluster, set their own count (`tests/support/clusters.py`).
TEST_SHARDS = 1


def pytest_configure(config: pytest.Config) -> None:
    """Before collection: test modules name keys at import."""
    shards.configure(TEST_SHARDS)


@pytest.fixture(autouse=True)
def collect_after_each() -> Iterator[None]:
    """With TEST_COLLECT_EACH=1, a garbage collection after every test, so that an
    unclosed socket or connection fails the test that left it rather than a later one
    (slower; with PYTHONTRACEMALLOC=20 the warning also says where it was opened)."""
    yield
    if os.environ.get("TEST_COLLECT_EACH") == "1":
        gc.collect()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """A real redis-server on a loopback port, for the whole run; yields its base URL."""
    for _ in range(5):  # a free port can be taken by another process before Redis binds it
        process, url = start_redis("--databases", "64")
        if _answers(process, url):
            break
        process.kill()
        process.wait()
    else:
        raise RuntimeError("could not start the test redis-server")
    yield url
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="session")
def sentinel_set() -> Iterator[SentinelSet]:
    """One primary, one replica and three sentinels on loopback, started the first time a
    test of this run (of this xdist worker) asks for them, stopped at its end."""
    started = SentinelSet().start()
    yield started
    started.stop()


def _answers(process: subprocess.Popen[bytes], url: str) -> bool:
    """True once this process's server answers PING at `url`."""
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    try:
        while process.poll() is None and time.monotonic() < deadline:
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                time.sleep(0.02)
            except redis.RedisError:
                return False  # something else listens there
        return False
    finally:
        client.close()


_db_counter = itertools.cycle(range(1, 64))


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """A URL of a database of its own, emptied before the test."""
    db = next(_db_counter)
    url = f"{redis_server}/{db}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    yield url


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = client_for(redis_url)
    yield client
    await client.aclose()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[Cluster]:
    """A Redis Cluster (three primaries, a replica each) for the whole run, started by
    the first test that asks for it: only the test process that runs cluster tests
    (tests/test_cluster.py) pays its two seconds."""
    cluster = start_cluster()
    yield cluster
    cluster.stop()

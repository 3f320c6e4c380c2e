"""redis-server processes for tests and benchmarks: a free loopback port, the command line.

tests/conftest.py starts the run's shared server with these; the crash tests and the
benchmarks start servers of their own.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import tempfile
from collections.abc import Callable

import redis.asyncio as aioredis

from gateway.state.connection import parse_url
from gateway.state.embedded_redis import find_redis_server
from gateway.state.keys import connect


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis(*extra: str, prefix: str = "gw-redis-") -> tuple[subprocess.Popen[bytes], str]:
    """A redis-server on a free loopback port, without persistence, its files in a new
    temporary directory: its process and base URL. It may not answer yet."""
    port = free_port()
    command = redis_command(port, tempfile.mkdtemp(prefix=prefix), "--appendonly", "no", *extra)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return process, f"redis://127.0.0.1:{port}"


def serve(command: list[str]) -> subprocess.Popen[bytes]:
    """`command` (a `redis_command`) running, its output dropped: started again with the same
    command, a server comes back on the same port."""
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def until(condition: Callable[[], bool], within: float = 15.0) -> None:
    """Wait for `condition`, polling; TimeoutError after `within` seconds."""
    async with asyncio.timeout(within):
        while not condition():
            await asyncio.sleep(0.02)


def redis_command(port: int, data: str, *options: str) -> list[str]:
    """A redis-server command: loopback `port`, its files in `data`, no snapshots."""
    return [
        find_redis_server(),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        data,
        "--save",
        "",
        *options,
    ]


def client_for(url: str) -> aioredis.Redis:
    """A test's own asyncio client of `url`: the gateway's for a Cluster or a Sentinel set
    (tests/support/clusters.py, sentinel.py), a plain one for one server."""
    if parse_url(url).mode != "standalone":
        return connect(url)
    return aioredis.Redis.from_url(url, decode_responses=True)

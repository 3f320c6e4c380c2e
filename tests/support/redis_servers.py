"""redis-server processes for tests and benchmarks: a free loopback port, the command line.

tests/conftest.py starts the run's shared server with these; the crash tests and the
benchmarks start servers of their own.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile

from gateway.state.embedded_redis import find_redis_server


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

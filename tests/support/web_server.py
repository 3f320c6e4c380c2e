"""An ASGI app on a real uvicorn on a loopback port, for tests that need the wire itself
(server-sent events, a browser)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import uvicorn

from tests.support.redis_servers import free_port

# Where the browser tests save a screenshot of each console page: CONSOLE_SCREENSHOTS, or
# a folder of the system's temporary directory.
SCREENSHOTS = Path(
    os.environ.get("CONSOLE_SCREENSHOTS")
    or Path(tempfile.gettempdir()) / "chat-gateway-console-screenshots"
)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # pytest keeps its own signal handlers


@contextlib.asynccontextmanager
async def serving(app: Any, **options: Any) -> AsyncIterator[int]:
    """`app` served on 127.0.0.1 until the block ends (`options` for uvicorn's Config);
    yields the port. Streams still open at the end are cancelled after a second."""
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        lifespan="off",
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=1,
        **options,
    )
    server = _Server(config)
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

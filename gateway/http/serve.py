"""The HTTP app served: uvicorn on HOST:PORT until the command's stop is asked for.

uvicorn is imported only here, and only when a command serves (the console and the
worker need none of it). Our own signal handlers set the stop; uvicorn must not take
them over, and what it is serving when the stop comes is finished first.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

from gateway.settings.env import Settings

# What still runs this long after the stop is cancelled: the console's live pages
# (server-sent events) never end by themselves, and a webhook is answered well within it.
STOP_GRACE = 5  # seconds


async def serve_web(settings: Settings, app: Any, stop: asyncio.Event) -> None:
    """uvicorn on HOST:PORT until `stop` is set; what it is serving then is finished first.
    A server that fails first raises its error."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # our own handlers set `stop`; uvicorn must not take them over

    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=STOP_GRACE,
    )
    server = Server(config)
    serving = asyncio.create_task(server.serve())
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait((serving, stopped), return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    server.should_exit = True
    await serving

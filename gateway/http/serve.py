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
DATE_REFRESH = 1.0  # seconds: how often the Date header uvicorn sends is brought up to date


async def serve_web(settings: Settings, app: Any, stop: asyncio.Event) -> None:
    """uvicorn on HOST:PORT until `stop` is set; what it is serving then is finished first.
    A server that fails first raises its error."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # our own handlers set `stop`; uvicorn must not take them over

        async def main_loop(self) -> None:
            """uvicorn's own wakes ten times a second to see whether it should stop
            (2 ms of CPU a second, idle, on these machines); this one wakes once a
            second, for the Date header, and at once when `stop` is set."""
            counter = 0  # uvicorn's tick count: a multiple of 10 refreshes the Date header
            while not await self.on_tick(counter):
                counter = (counter + 10) % 864_000
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), DATE_REFRESH)
                if stop.is_set():
                    self.should_exit = True

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

"""What every loopback fake shares: an aiohttp app on 127.0.0.1, and the log of its calls.

A fake subclasses `LoopbackServer`, builds its routes in `_app()` and closes what it
holds open (websockets, hanging streams) in `_before_close()`. It serves either in
the test's running loop (`serve()` / `close()`, for async tests) or on a loop and
thread of its own (`serve_in_thread()` / `close_thread()`, for synchronous tests and
for SDKs that block), and keeps its own `start()` / `stop()` over one of the two.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from aiohttp import web

C = TypeVar("C")


class CallLog(list[C]):
    """Every request a fake received, oldest first.

    A list, so tests read it as one; `record`, `where` and `snapshot` hold a lock
    because a threaded fake appends from its own thread while the test reads.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()

    def record(self, call: C) -> C:
        with self._lock:
            self.append(call)
        return call

    def where(self, match: Callable[[C], bool]) -> list[C]:
        with self._lock:
            return [call for call in self if match(call)]

    def snapshot(self) -> list[C]:
        with self._lock:
            return list(self)

    def forget(self) -> None:
        with self._lock:
            self.clear()


class LoopbackServer:
    """An aiohttp application on a loopback port (0 picks a free one)."""

    thread_name: ClassVar[str] = "fake-server"
    runner_options: ClassVar[dict[str, Any]] = {}

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """`http://host:port`, without a trailing slash."""
        return f"http://{self.host}:{self.port}"

    def _app(self) -> web.Application:
        raise NotImplementedError

    async def _before_close(self) -> None:
        """Close what the fake holds open, so the runner's cleanup does not wait on it."""

    # -- in the running loop ----------------------------------------------------------

    async def serve(self) -> None:
        """Bind and serve in the running loop; returns once the port is listening."""
        self._runner = web.AppRunner(self._app(), access_log=None, **self.runner_options)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def close(self) -> None:
        await self._before_close()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- on a thread of its own -------------------------------------------------------

    def serve_in_thread(self) -> None:
        """Serve on a new event loop in a daemon thread; returns once the port is listening."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._loop_thread = threading.Thread(
            target=loop.run_forever, name=self.thread_name, daemon=True
        )
        self._loop_thread.start()
        asyncio.run_coroutine_threadsafe(self.serve(), loop).result(timeout=10)

    def close_thread(self, *, tolerate_a_slow_close: bool = False) -> None:
        """Close the server, then stop its loop and join its thread.

        `tolerate_a_slow_close` still stops the thread when the close itself times out
        or finds the loop gone (a fake with requests hanging at the end of a test).
        """
        loop, thread = self._loop, self._loop_thread
        if loop is None or thread is None:
            return
        closing = asyncio.run_coroutine_threadsafe(self.close(), loop)
        if tolerate_a_slow_close:
            with contextlib.suppress(TimeoutError, RuntimeError):
                closing.result(timeout=10)
        else:
            closing.result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
        self._loop = self._loop_thread = None

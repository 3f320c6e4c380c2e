"""One MCP server kept connected by a task of its own, restarted with backoff when it fails.

The SDK's transports and `ClientSession` are anyio context managers whose task
groups must be entered and left by the same task, so each server has one
long-lived task (`run`) that opens the transport, initializes, lists the tools
and then waits: for the connection to end, for `notifications/tools/list_changed`
(the tools are listed again), or for the ping interval (a server that no longer
answers is dropped and reconnected). Calls come from other tasks and only use
the session while it is up; the SDK's request machinery is task-safe.

The end of a stdio server (its process exited, was killed) shows as the end of
its read stream, which this module watches, so the server is marked down at
once rather than at the next ping.

The task is stopped by `close()`, which cancels an anyio cancel scope around it,
not by `Task.cancel()`: the SDK ends a stdio server inside a shielded scope (close
stdin, wait, kill, close the subprocess transport), and only anyio's cancellation
respects the shield; a raw `Task.cancel()` cuts that shutdown short and leaves the
transport to the garbage collector. The scope's cancel is also level-triggered, so
it is not lost when a task group raises a child's error in its place (anyio, like
asyncio.TaskGroup since CPython gh-95704). For a raw cancel from elsewhere (the
process shutting down), every `except Exception` around the SDK asks
`cancel_requested()` before carrying on.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TextIO

import anyio
from mcp.client.session import ClientSession, IncomingMessage
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage
from mcp_types import (
    CONNECTION_CLOSED,
    CallToolResult,
    Implementation,
    PaginatedRequestParams,
    Tool,
    ToolListChangedNotification,
)

from gateway.backoff import Backoff
from gateway.errors import ToolServerUnavailable
from gateway.tools.config import ServerConfig

log = logging.getLogger(__name__)
CLIENT_INFO = Implementation(name="chat-gateway", version="0.1.0")
REASON_CHARS = 200
Streams = tuple[Any, Any]


RECONNECT = Backoff(first=1.0, limit=30.0)  # a server's restarts after it failed


@dataclass(frozen=True)
class Timing:
    """How long connecting may take, and how often a quiet connection is pinged."""

    connect_timeout: float = 30.0
    ping_interval: float = 15.0
    backoff: Backoff = RECONNECT


class ServerConnection:
    """One server's session, its listed tools, and why it is down when it is."""

    def __init__(
        self,
        config: ServerConfig,
        timing: Timing,
        on_tools: Callable[[], None],
        errlog: TextIO | None = None,
    ) -> None:
        self.config = config
        self.tools: tuple[Tool, ...] = ()
        self.error: str | None = "not connected yet"
        # Why its command cannot be run at all (a mistake in the file, not retried).
        self.cannot_run: str | None = None
        self.attempts = 0
        self.settled = asyncio.Event()  # set after the first attempt, up or failed
        self._timing = timing
        self._on_tools = on_tools
        self._errlog = errlog
        self._session: ClientSession | None = None
        self._wake = asyncio.Event()
        self._broken: str | None = None
        self._relist = False
        self._was_up = False
        self._stop = anyio.CancelScope()

    @property
    def up(self) -> bool:
        return self._session is not None

    async def run(self) -> None:
        """Connect, serve, and after any failure wait the backoff and connect again, until
        `close()`."""
        with self._stop:
            await self._keep_connected()

    def close(self) -> None:
        """Stop `run()`: the connection ends as it would on any cancel, but the server's
        shutdown runs to its end (see the module's docstring); `run()` then returns."""
        self._stop.cancel()

    async def _keep_connected(self) -> None:
        delays = self._timing.backoff.delays()
        while True:
            try:
                await self._connect_and_serve()
            except CannotRun as exc:  # not retried; the process stops with this line
                self.cannot_run = str(exc)
                self._mark_down(self.cannot_run, quiet=True)
                return
            except Exception as exc:  # whatever a transport or server does ends this attempt
                if cancel_requested():
                    raise asyncio.CancelledError from exc
                self._mark_down(short_reason(exc, self.config.secrets))
            if self._was_up:  # a connection that came up starts the backoff over
                delays = self._timing.backoff.delays()
                self._was_up = False
            await asyncio.sleep(next(delays))

    async def call_tool(
        self, tool: str, arguments: dict[str, Any], timeout: float
    ) -> CallToolResult:
        """One `tools/call` on the live session; raises ToolServerUnavailable when there is none."""
        session = self._session
        if session is None:
            raise ToolServerUnavailable(self.error or "not connected")
        try:
            return await session.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                raise
            self.lost("the connection closed during the call")
            raise ToolServerUnavailable("the connection closed during the call") from None

    def lost(self, reason: str) -> None:
        """The connection is gone: the task drops it and reconnects after the backoff."""
        if self._broken is None:
            self._broken = reason
        self._wake.set()

    async def _connect_and_serve(self) -> None:
        self._broken, self._relist = None, False
        async with AsyncExitStack() as stack:
            read, write = await stack.enter_async_context(self._transport())
            watched = WatchedStream(read, lambda: self.lost("the server closed the connection"))
            session = ClientSession(
                watched, write, message_handler=self._on_message, client_info=CLIENT_INFO
            )
            await stack.enter_async_context(session)
            with anyio.fail_after(self._timing.connect_timeout):
                await session.initialize()
                await self._list(session)
            self._mark_up(session)
            try:
                await self._serve(session)
            finally:
                self._session = None

    def _transport(self) -> AbstractAsyncContextManager[Streams]:
        config = self.config
        if config.command is not None:
            params = StdioServerParameters(
                command=config.command,
                args=list(config.args),
                env=dict(config.env) or None,
                cwd=config.cwd,
            )
            return _spawned(stdio_client(params, errlog=self._errlog or sys.stderr), config)
        return _http_transport(config)

    async def _serve(self, session: ClientSession) -> None:
        """Wait on the live session: relist when told, ping when quiet, return when lost."""
        while True:
            self._wake.clear()
            if self._broken is not None:
                raise ToolServerUnavailable(self._broken)
            if self._relist:
                self._relist = False
                await self._list(session)
                continue
            with anyio.move_on_after(self._timing.ping_interval) as quiet:
                await self._wake.wait()
            if quiet.cancelled_caught:
                with anyio.fail_after(self._timing.connect_timeout):
                    await session.send_ping()

    async def _list(self, session: ClientSession) -> None:
        """Every page of the server's tools; the change is announced to the owner."""
        tools: list[Tool] = []
        cursor: str | None = None
        while True:
            page = await session.list_tools(params=_page(cursor))
            tools.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        self.tools = tuple(tools)
        self._on_tools()

    async def _on_message(self, message: IncomingMessage) -> None:
        # Called from the session's read loop: only flags here, the listing is done by run().
        if isinstance(message, ToolListChangedNotification):
            self._relist = True
            self._wake.set()
        elif isinstance(message, Exception):
            log.warning(
                "MCP server %s: %s",
                self.config.name,
                short_reason(message, self.config.secrets),
            )

    def _mark_up(self, session: ClientSession) -> None:
        self._session, self.error, self._was_up = session, None, True
        self.attempts += 1
        self.settled.set()
        log.info("MCP server %s is up with %d tools", self.config.name, len(self.tools))

    def _mark_down(self, reason: str, *, quiet: bool = False) -> None:
        was_up = self._was_up
        self._session, self.error = None, reason
        self.attempts += 1
        self.settled.set()
        self._on_tools()
        if quiet:
            return
        if was_up:
            log.warning("MCP server %s is down: %s", self.config.name, reason)
        else:
            log.warning("MCP server %s could not start: %s", self.config.name, reason)


def _page(cursor: str | None) -> PaginatedRequestParams | None:
    return None if cursor is None else PaginatedRequestParams(cursor=cursor)


class CannotRun(Exception):
    """A stdio server's command could not be started at all: not found, not executable,
    or its `cwd` missing. Retrying cannot help; the file must change."""


@asynccontextmanager
async def _spawned(
    transport: AbstractAsyncContextManager[Streams], config: ServerConfig
) -> AsyncIterator[Streams]:
    """The stdio transport, with a spawn that failed (before the process existed) told
    apart from a server that started and then failed: only the first is `CannotRun`."""
    started = False
    try:
        async with transport as streams:
            started = True
            yield streams
    except OSError as exc:  # the SDK raises the spawn's own error, before any task group
        if started:
            raise
        raise CannotRun(_spawn_failure(exc, config)) from None


def _spawn_failure(exc: OSError, config: ServerConfig) -> str:
    """Why a command could not be started, naming the command (or the `cwd`), never `env`."""
    what = f"its cwd {config.cwd!r}" if _missing_cwd(exc, config) else repr(config.command)
    return masked(f"{what} cannot be run: {exc.strerror or type(exc).__name__}", config.secrets)


def _missing_cwd(exc: OSError, config: ServerConfig) -> bool:
    return config.cwd is not None and exc.filename == config.cwd


@asynccontextmanager
async def _http_transport(config: ServerConfig) -> AsyncIterator[Streams]:
    """Streamable HTTP with the server's headers on every request (the SDK's client defaults)."""
    assert config.url is not None
    async with (
        create_mcp_http_client(headers=dict(config.headers)) as client,
        streamable_http_client(config.url, http_client=client) as streams,
    ):
        yield streams


class WatchedStream:
    """A transport's read stream that reports its end, so a dead server is seen at once."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        # The dispatcher reads it to run handlers in the sender's context (HTTP only).
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._on_end()
            raise
        return item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def cancel_requested() -> bool:
    """True when the running task was cancelled and has not taken the cancel yet: an
    error a task group raised in its place (see the module's docstring) is that cancel."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def short_reason(exc: BaseException, secrets: tuple[str, ...]) -> str:
    """One line on why: the innermost error of a group, cut short, with secrets masked."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc) or type(exc).__name__
    if not isinstance(exc, MCPError | ToolServerUnavailable):
        text = f"{type(exc).__name__}: {text}" if str(exc) else text
    return masked(text, secrets)


def masked(text: str, secrets: tuple[str, ...]) -> str:
    """`text` on one line, cut short, with every secret in it replaced."""
    for secret in secrets:
        text = text.replace(secret, "***")
    line = " ".join(text.split())
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 1] + "…"

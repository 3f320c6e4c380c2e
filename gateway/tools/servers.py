"""The MCP servers of one worker process, shared by every conversation on it.

`start()` connects to each configured server; each then lives in a task of its
own (`gateway.tools.connection`), reconnected with backoff when it fails.
`tools()` is what the model may call now, `down()` the servers it cannot reach,
and `call()` runs one call and always answers with a `ToolResult`: a bad
argument, an unknown name, a server's own error, a timeout or a dead server
become text the model reads. Only cancellation propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT
from redis.exceptions import RedisError

from gateway.errors import ConfigError, ToolServerUnavailable
from gateway.metrics import Metrics
from gateway.settings.env import Settings
from gateway.tools.config import ToolsConfig, load_tool_config
from gateway.tools.connection import ServerConnection, Timing, cancel_requested
from gateway.tools.mcp_results import from_call
from gateway.tools.results import ToolResult, capped, parse_arguments
from gateway.tools.spec import ToolSpec, assign_names, build_spec, openai_tool

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    """The settings a call obeys: its default timeout and the longest result kept."""

    call_timeout: float = 60.0
    result_chars: int = 16_000


@dataclass(frozen=True)
class ServerReport:
    """One server as `gateway tools list` and `gateway doctor` show it."""

    name: str
    transport: str
    ok: bool
    tools: tuple[str, ...] = ()
    error: str | None = None


class ToolServers:
    """Every configured MCP server, their tools by public name, and the calls to them."""

    def __init__(
        self,
        config: ToolsConfig,
        limits: Limits = Limits(),
        *,
        timing: Timing | None = None,
        metrics: Metrics | None = None,
        errlog: TextIO | None = None,
    ) -> None:
        self._limits = limits
        self._metrics = metrics
        self._timing = timing = timing or Timing()
        self._connections = {
            server.name: ServerConnection(server, timing, self._rebuild, errlog)
            for server in config.servers
        }
        self._specs: dict[str, ToolSpec] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._recording: set[asyncio.Task[None]] = set()

    @classmethod
    def for_settings(cls, settings: Settings, metrics: Metrics | None = None) -> ToolServers:
        """The servers `GATEWAY_MCP_CONFIG` names (none when it is unset)."""
        limits = Limits(settings.tool_timeout, settings.tool_result_chars)
        return cls(load_tool_config(settings.mcp_config), limits, metrics=metrics)

    async def start(self) -> None:
        """Connect to every server and wait until each is up or has failed once.

        A server that failed goes on being retried in the background; `reports()`
        says why it is down.
        """
        for name, connection in self._connections.items():
            task = asyncio.create_task(connection.run(), name=f"mcp-server-{name}")
            self._tasks.append(task)
        waits = [c.settled.wait() for c in self._connections.values()]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*waits), self._timing.connect_timeout + 5)

    def check_commands(self) -> None:
        """Raise ConfigError naming the first stdio server whose command could not be run
        at all (not found, not executable): after `start()`, a mistake in the file stops
        the process rather than being retried. A server that ran and failed is retried."""
        for name, connection in self._connections.items():
            if connection.cannot_run is not None:
                raise ConfigError(f"MCP server {name!r}: {connection.cannot_run}")

    def reports(self) -> list[ServerReport]:
        """Each server: up with its tools' public names, or down with a short reason."""
        by_server: dict[str, list[str]] = {name: [] for name in self._connections}
        for spec in self._specs.values():
            by_server[spec.server].append(spec.name)
        return [
            ServerReport(
                name=name,
                transport="stdio" if c.config.command else "http",
                ok=c.up,
                tools=tuple(by_server[name]) if c.up else (),
                error=None if c.up else c.error,
            )
            for name, c in self._connections.items()
        ]

    def tools(self) -> list[ToolSpec]:
        """The tools the model may call now (the allowlisted tools of servers that are up)."""
        return [s for s in self._specs.values() if self._connections[s.server].up]

    def openai_tools(self) -> list[dict[str, Any]]:
        """`tools()` in OpenAI's function format, for the model call's `tools=`."""
        return [openai_tool(spec) for spec in self.tools()]

    def down(self) -> list[str]:
        """The servers that cannot take a call now."""
        return [name for name, c in self._connections.items() if not c.up]

    def spec(self, name: str) -> ToolSpec | None:
        """The tool behind a public name, whether or not its server is up."""
        return self._specs.get(name)

    async def call(self, name: str, arguments: str) -> ToolResult:
        """Run one tool call from the model's raw JSON arguments; failures are results.

        The call's metrics are written beside the turn, not before it goes on: a
        tool step waits for the tool, not for the counters.
        """
        started = time.monotonic()
        result = await self._call(name, arguments)
        recording = asyncio.create_task(self._record(name, result, time.monotonic() - started))
        self._recording.add(recording)
        recording.add_done_callback(self._recording.discard)
        return result

    async def aclose(self) -> None:
        """Stop every server: stdio processes are ended and waited for (the SDK bounds
        each wait of that shutdown), and the last calls' metrics written."""
        await asyncio.gather(*self._recording, return_exceptions=True)
        for connection in self._connections.values():
            connection.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _call(self, name: str, raw_arguments: str) -> ToolResult:
        spec = self._specs.get(name)
        if spec is None:
            return ToolResult(f"There is no tool named {name!r}.", "unknown")
        arguments = parse_arguments(raw_arguments)
        if isinstance(arguments, str):
            return ToolResult(f"The call to {name} was not made: {arguments}.", "invalid")
        connection = self._connections[spec.server]
        try:
            answer = await connection.call_tool(spec.tool, arguments, spec.timeout)
        except ToolServerUnavailable as exc:
            return ToolResult(
                f"The {spec.server} tools are unavailable now ({exc}).", "unavailable"
            )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                text = f"{name} did not answer within {spec.timeout:g} seconds; it was cancelled."
                return ToolResult(text, "timeout")
            return ToolResult(self._cap(f"{name} failed: {exc.message}"), "error")
        except Exception as exc:  # an answer the SDK could not read; the turn must go on
            if cancel_requested():
                raise asyncio.CancelledError from exc
            log.warning("tool %s: unreadable answer: %s", name, type(exc).__name__)
            return ToolResult(f"{name} sent an answer that could not be read.", "error")
        return from_call(answer, self._limits.result_chars)

    def _cap(self, text: str) -> str:
        return capped(text, self._limits.result_chars)

    async def _record(self, name: str, result: ToolResult, seconds: float) -> None:
        if self._metrics is None:
            return
        label = name if name in self._specs else "unknown"  # a model's invented names stay out
        try:
            await self._metrics.tool_call(label, result.outcome, seconds)
        except RedisError as exc:
            log.warning("tool call metrics not recorded: %s", type(exc).__name__)

    def _rebuild(self) -> None:
        """Recompute every public name and spec after any server's tool list changed."""
        listed = [
            (c.config, tool)
            for c in self._connections.values()
            for tool in c.tools
            if c.config.allows(tool.name)
        ]
        names = assign_names((config.name, tool.name) for config, tool in listed)
        self._specs = {
            names[(config.name, tool.name)]: build_spec(
                config, tool, names[(config.name, tool.name)], self._limits.call_timeout
            )
            for config, tool in listed
        }


async def describe_servers(settings: Settings) -> list[ServerReport]:
    """Start every configured server once and say how each went (for `tools list`, `doctor`)."""
    servers = ToolServers.for_settings(settings)
    try:
        await servers.start()
        return servers.reports()
    finally:
        await servers.aclose()


def report_lines(reports: Sequence[ServerReport]) -> list[str]:
    """The reports as lines a terminal shows, one per server."""
    lines = []
    for report in reports:
        if report.ok:
            lines.append(f"{report.name} ({report.transport}): {', '.join(report.tools) or '-'}")
        else:
            lines.append(f"{report.name} ({report.transport}): down: {report.error}")
    return lines

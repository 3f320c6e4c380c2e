"""MCP tool servers: the configuration file, the servers of a worker, and tool calls.

Callers use `ToolServers` (one per worker process), `ToolSpec` and `ToolResult`,
and `describe_servers` for the CLI.
"""

from gateway.tools.config import ServerConfig, ToolsConfig, load_tool_config
from gateway.tools.connection import Backoff, Timing
from gateway.tools.results import OUTCOMES, Outcome, ToolResult
from gateway.tools.servers import (
    Limits,
    ServerReport,
    ToolServers,
    describe_servers,
    report_lines,
)
from gateway.tools.spec import ToolSpec

__all__ = [
    "OUTCOMES",
    "Backoff",
    "Limits",
    "Outcome",
    "ServerConfig",
    "ServerReport",
    "Timing",
    "ToolResult",
    "ToolServers",
    "ToolSpec",
    "ToolsConfig",
    "describe_servers",
    "load_tool_config",
    "report_lines",
]

"""MCP tool servers: the configuration file, the servers of a worker, and tool calls.

Callers use `ToolServers` (one per worker process), `ToolSpec` and `ToolResult`,
and `describe_servers` for the CLI.

What needs the MCP SDK (`ToolServers`, the connections) is imported on first
use: the SDK takes seconds to import and about 30 MB, which a worker with no
`GATEWAY_MCP_CONFIG` never pays.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gateway.tools.config import ServerConfig, ToolsConfig, load_tool_config
from gateway.tools.results import OUTCOMES, ToolOutcome, ToolResult
from gateway.tools.spec import ToolSpec

if TYPE_CHECKING:
    from gateway.tools.connection import Timing
    from gateway.tools.servers import (
        Limits,
        ServerReport,
        ToolServers,
        describe_servers,
        report_lines,
    )

_ON_FIRST_USE = {
    "Timing": "connection",
    "Limits": "servers",
    "ServerReport": "servers",
    "ToolServers": "servers",
    "describe_servers": "servers",
    "report_lines": "servers",
}

__all__ = [
    "OUTCOMES",
    "Limits",
    "ServerConfig",
    "ServerReport",
    "Timing",
    "ToolOutcome",
    "ToolResult",
    "ToolServers",
    "ToolSpec",
    "ToolsConfig",
    "describe_servers",
    "load_tool_config",
    "report_lines",
]


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)

"""`gateway tools list`, and the tool servers' lines of `gateway doctor`."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from gateway import tools
from gateway.settings.env import Settings


async def cmd_tools(settings: Settings, args: argparse.Namespace) -> int:
    """Start every configured MCP server once and print its tools (or why it is down);
    exits 1 when any server is down."""
    if not settings.mcp_config:
        print("[]" if args.json else "no tool servers (GATEWAY_MCP_CONFIG is unset)")
        return 0
    reports = await tools.describe_servers(settings)
    if args.json:
        print(json.dumps([asdict(report) for report in reports], indent=2))
    else:
        print("\n".join(tools.report_lines(reports)))
    return 0 if all(report.ok for report in reports) else 1


async def doctor_tools(settings: Settings) -> list[tuple[str, bool, str]]:
    """One doctor line per tool server: its tools, or why it is down."""
    if not settings.mcp_config:
        return []
    reports = await tools.describe_servers(settings)
    lines = tools.report_lines(reports)
    return [(f"tools:{r.name}", r.ok, line) for r, line in zip(reports, lines, strict=True)]

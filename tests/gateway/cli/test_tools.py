"""`gateway tools list` and the tool servers in `gateway doctor` (gateway/cli/tools.py), as
an operator runs them: the real command, the MCP test server over stdio."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.cli_runs import ROOT, clean_env, gateway

EXAMPLE = str(ROOT / "docs" / "mcp.example.json")

# Each test starts MCP server processes (seconds each on a loaded machine).
pytestmark = pytest.mark.timeout(180)


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        gateway(*args), capture_output=True, text=True, timeout=120, cwd=ROOT, env=clean_env(**env)
    )


def test_tools_list_names_each_servers_tools() -> None:
    result = run("tools", "list", "--json", GATEWAY_MCP_CONFIG=EXAMPLE)
    assert result.returncode == 0, result.stderr
    (demo,) = json.loads(result.stdout)
    assert demo["name"] == "demo" and demo["ok"]
    assert "demo__lookup_ticket" in demo["tools"]


def test_a_server_that_cannot_start_fails_the_command_without_its_secrets(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    broken = {"command": str(tmp_path / "no-such-server"), "env": {"API_TOKEN": "s3cr3t-value"}}
    config.write_text(json.dumps({"mcpServers": {"broken": broken}}))
    result = run("tools", "list", GATEWAY_MCP_CONFIG=str(config))
    assert result.returncode == 1
    assert "broken (stdio): down" in result.stdout
    assert "s3cr3t-value" not in result.stdout + result.stderr


def test_doctor_reports_each_tool_server(tmp_path: Path) -> None:
    result = run("doctor", GATEWAY_MCP_CONFIG=EXAMPLE, GATEWAY_DATA_DIR=str(tmp_path))
    assert "tools:demo" in result.stdout and "demo__lookup_ticket" in result.stdout
    line = next(x for x in result.stdout.splitlines() if "tools:demo" in x)
    assert line.startswith("ok")

"""A tool server whose command cannot be run stops `gateway worker` and `gateway run` at
start, with one line naming it: the real commands, as an operator runs them."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.support.cli_runs import clean_env, gateway
from tests.support.redis_servers import free_port
from tests.support.telegram_helpers import environment

pytestmark = pytest.mark.timeout(180)
SECRET = "s3cr3t-tool-key"


def broken_config(tmp_path: Path) -> Path:
    """A file whose `ticket` server names a script without the execute bit."""
    script = tmp_path / "ticket-server.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    config = tmp_path / "mcp.json"
    server = {"command": str(script), "env": {"TICKET_API_KEY": SECRET}}
    config.write_text(json.dumps({"mcpServers": {"ticket": server}}))
    return config


def stopped_at_start(args: list[str], cwd: Path, env: dict[str, str]) -> list[str]:
    """The command's stderr lines, once it has exited 2 (a configuration error)."""
    began = time.monotonic()
    result = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert time.monotonic() - began < 90
    assert SECRET not in result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert [x for x in lines if "cannot be run" in x] == lines[-1:]  # one line, the last
    return lines


async def test_gateway_worker_stops_with_one_line_naming_the_server(
    tmp_path: Path, redis_url: str, llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    config = broken_config(tmp_path)
    env = environment(redis_url, llm, fake_telegram, free_port(), GATEWAY_MCP_CONFIG=str(config))
    args = gateway("worker")
    lines = await asyncio.to_thread(stopped_at_start, args, tmp_path, clean_env(**env))
    assert lines[-1].startswith("gateway: MCP server 'ticket': ")
    assert "ticket-server.sh' cannot be run: Permission denied" in lines[-1]


def test_gateway_run_stops_with_one_line_naming_the_server(tmp_path: Path) -> None:
    config = broken_config(tmp_path)
    env = clean_env(GATEWAY_MCP_CONFIG=str(config), GATEWAY_DATA_DIR=str(tmp_path / "data"))
    lines = stopped_at_start(gateway("run", "--console"), tmp_path, env)
    assert lines[-1].startswith("gateway: MCP server 'ticket': ")
    assert "cannot be run" in lines[-1]

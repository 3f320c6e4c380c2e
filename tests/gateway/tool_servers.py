"""What the tool-loop and approval tests share: the stdio test server's config and its
effects file (tests/fakes/mcp_servers.py writes there what its tools did), and a
worker with that server."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.fakes.llm_server import FakeLLM
from tests.gateway.harness import Harness, start_workers

# The lease of a turn in these tests. A turn that loses its lease is run again, which
# is right, but a test of what one run does (which requests the model gets, how the
# calls overlap) then sees two runs: on a loaded machine the tests' usual 1 s lease
# is lost to a stalled Redis or event loop. Lease loss is tested in test_crash.py.
STEADY_LEASE_TTL = 10.0


def write_config(tmp_path: Path, effects: Path, **options: object) -> Path:
    """A GATEWAY_MCP_CONFIG file with one stdio server, `desk`, and its `options`."""
    config = tmp_path / "mcp.json"
    server = {
        "command": sys.executable,
        "args": ["-m", "tests.fakes.mcp_servers", "--effects", str(effects)],
        **options,
    }
    config.write_text(json.dumps({"mcpServers": {"desk": server}}))
    return config


def new_effects(tmp_path: Path) -> Path:
    path = tmp_path / "effects.txt"
    path.touch()
    return path


def lines(path: Path) -> list[str]:
    """What the tools did, one line each, in order."""
    return path.read_text().splitlines()


async def tool_workers(
    redis_url: str, llm: FakeLLM, config: Path, **values: Any
) -> AsyncIterator[Harness]:
    """One worker with the servers of `config`, its turns on a lease of STEADY_LEASE_TTL."""
    values = {"GATEWAY_LEASE_TTL": STEADY_LEASE_TTL, **values}
    async for h in start_workers(redis_url, llm, 1, GATEWAY_MCP_CONFIG=str(config), **values):
        yield h

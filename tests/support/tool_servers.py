"""What the tool-loop and approval tests share: the stdio test server's config and its
effects file (tests/fakes/mcp_servers.py writes there what its tools did), a worker
with that server, and a confirmation nobody answers (run on each platform's fake)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.messages import Inbound
from gateway.ports import Sender
from tests.fakes.llm_server import FakeLLM
from tests.fakes.llm_tools import FakeToolCall, ToolResult, tool_results, tools_then_text
from tests.support.harness import Harness, start_workers

DELETE = FakeToolCall("desk__delete_item", '{"name": "old"}')  # destructive: asks first
TIMED_OUT_RESULT = "[not run: nobody approved this call within 1 second]"  # timeout 1 s

# The lease of a turn in these tests. A turn that loses its lease is run again, which
# is right, but a test of what one run does (which requests the model gets, how the
# calls overlap) then sees two runs: on a loaded machine the tests' usual 1 s lease
# is lost to a stalled Redis or event loop. Lease loss has tests of its own (model_turns.py).
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


@asynccontextmanager
async def tool_workers(
    redis_url: str, llm: FakeLLM, config: Path, **values: Any
) -> AsyncIterator[Harness]:
    """One worker with the servers of `config`, its turns on a lease of STEADY_LEASE_TTL."""
    values = {"GATEWAY_LEASE_TTL": STEADY_LEASE_TTL, **values}
    async with start_workers(redis_url, llm, 1, GATEWAY_MCP_CONFIG=str(config), **values) as h:
        yield h


@dataclass(frozen=True)
class Unanswered:
    """How a turn went whose call nobody approved: what the model was sent back for
    the call, and what the tool did (one line per effect)."""

    results: list[ToolResult]
    effects: list[str]


async def unanswered_confirmation(
    redis_url: str,
    llm: FakeLLM,
    tmp_path: Path,
    message: Inbound,
    sender: Sender,
    **settings: Any,
) -> Unanswered:
    """`message` asks for DELETE, which waits for approval through `sender`; nobody
    answers within GATEWAY_CONFIRM_TIMEOUT (1 s), the worker's deadline check settles
    it, and the turn goes on to its answer."""
    effects = new_effects(tmp_path)
    llm.reply = tools_then_text([DELETE])
    config = write_config(tmp_path, effects)
    values = {"senders": {message.platform: sender}, "GATEWAY_CONFIRM_TIMEOUT": 1, **settings}
    results: list[ToolResult] = []
    async with tool_workers(redis_url, llm, config, **values) as h:
        await h.ingest.receive(message)
        async with asyncio.timeout(30):
            while len(llm.requests) < 2:
                await asyncio.sleep(0.05)
        await h.idle(message.session_key, timeout=30)
        results = tool_results(llm.requests[-1])
    return Unanswered(results, lines(effects))

"""What the health page shows, read from Redis: the deployment as every process left it.

Processes are counted by kind as each says it is alive (`gateway/state/processes.py`);
workers per stream are the job streams' consumers (each worker process is one, named
`host-pid-…`); connections are the health reports long-lived connections renew
(`gateway/state/health.py`); queue depth, turns, errors and tool calls are the
`/metrics` counters (`gateway/metrics.py`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from gateway import metrics
from gateway.errors import ConfigError
from gateway.state import health, processes
from gateway.state.keys import GROUP, Keys
from gateway.tools.config import load_tool_config
from gateway.tools.spec import SEPARATOR

WORKER_IDLE = 120.0  # a consumer silent for longer is not counted as a live worker


@dataclass(frozen=True, slots=True)
class Health:
    at: float
    redis: dict[str, str]
    connections: dict[str, dict[str, Any]]
    depth: dict[str, int]
    workers: dict[str, int]  # stream -> consumers seen within WORKER_IDLE
    processes: dict[str, int]  # kind (web, worker) -> processes alive
    turns: dict[str, int]  # outcome -> count, every platform
    turns_total: int
    errors: dict[str, int]
    tools: dict[str, int]  # `tool outcome` -> count
    side: dict[str, int]
    servers: dict[str, dict[str, int]] = field(default_factory=dict)  # server -> outcome -> calls
    servers_error: str = ""  # GATEWAY_MCP_CONFIG cannot be read here


def tool_servers(
    mcp_config: Path | None, tools: dict[str, int]
) -> tuple[dict[str, dict[str, int]], str]:
    """The configured MCP servers (GATEWAY_MCP_CONFIG, read here, never started) with their
    tools' calls by outcome; the file's error instead, when it cannot be read."""
    try:
        config = load_tool_config(mcp_config)
    except ConfigError as exc:
        return {}, str(exc)
    servers: dict[str, dict[str, int]] = {server.name: {} for server in config.servers}
    for name, count in tools.items():
        tool, _, outcome = name.rpartition(" ")
        server = tool.split(SEPARATOR, 1)[0]
        if server in servers:
            servers[server][outcome] = servers[server].get(outcome, 0) + count
    return servers, ""


async def read(redis: Redis, platforms: Sequence[str], mcp_config: Path | None = None) -> Health:
    values, depth = await metrics.snapshot(redis, platforms)
    info = await redis.info()
    turns: dict[str, int] = {}
    errors: dict[str, int] = {}
    tools: dict[str, int] = {}
    side: dict[str, int] = {}
    for name, raw in values.items():
        kind, _, rest = name.partition("|")
        if kind == "turns":
            outcome = rest.partition("|")[2]
            turns[outcome] = turns.get(outcome, 0) + int(raw)
        elif kind == "errors":
            errors[rest] = int(raw)
        elif kind == "tools":
            tool, _, outcome = rest.rpartition("|")
            tools[f"{tool} {outcome}"] = int(raw)
        elif kind == "side":
            side[rest] = int(raw)
    servers, servers_error = tool_servers(mcp_config, tools)
    return Health(
        at=time.time(),
        redis={
            "version": str(info.get("redis_version", "")),
            "clients": str(info.get("connected_clients", "")),
            "memory": str(info.get("used_memory_human", "")),
            "uptime (s)": str(info.get("uptime_in_seconds", "")),
        },
        connections=await health.read_all(redis),
        depth=depth,
        workers=await _workers(redis, platforms),
        processes=await processes.counts(redis),
        turns=turns,
        turns_total=sum(turns.values()),
        errors=errors,
        tools=tools,
        side=side,
        servers=servers,
        servers_error=servers_error,
    )


async def _workers(redis: Redis, platforms: Sequence[str]) -> dict[str, int]:
    """Each platform's workers: the consumers of its shards' streams seen within
    WORKER_IDLE (a worker reads every shard of its platforms), one round trip each."""
    found: dict[str, int] = {}
    for platform in platforms:
        async with redis.pipeline(transaction=False) as pipe:
            for stream in Keys.job_streams(platform):
                pipe.xinfo_consumers(stream, GROUP)
            replies = await pipe.execute(raise_on_error=False)  # a stream not made yet: an error
        groups = [reply for reply in replies if isinstance(reply, list)]
        if groups:
            found[platform] = len(
                {
                    str(c.get("name"))
                    for consumers in groups
                    for c in consumers
                    if float(c.get("idle", 0)) / 1000 <= WORKER_IDLE
                }
            )
    return found


@dataclass
class TurnRate:
    """Turns per minute, from the turn counter's samples over the last minute seen."""

    samples: deque[tuple[float, int]] = field(default_factory=lambda: deque(maxlen=120))

    def add(self, at: float, total: int) -> float | None:
        self.samples.append((at, total))
        while self.samples and at - self.samples[0][0] > 60:
            self.samples.popleft()
        first_at, first_total = self.samples[0]
        if at - first_at < 1:
            return None
        return (total - first_total) * 60 / (at - first_at)

"""What the gateway adds to a tool call, over calling the same MCP tool from a bare client.

Starts its own redis-server, the stdio MCP test server (tests/fakes/mcp_servers.py)
as the gateway starts it, and the loopback fake model, then measures in one run:

- *bare SDK call*: an `mcp` ClientSession of its own calling `lookup_ticket`,
  the time of `call_tool`: the baseline.
- *ToolServers.call*: the same call through the gateway's `ToolServers`, built
  as a worker builds it (its own server process, the call's metrics written to
  Redis), interleaved call by call with the bare client (each first every other
  time) so that both see the same machine.
- *a tool step in a turn*: a worker in this process answers messages, one at a
  time, each in a new session; in half of them the model first asks for
  `desk__lookup_ticket`, then answers (a tool step), in the other half it
  answers at once (the same answer, the same pacing), alternating. A turn is
  timed from `ingest.receive` to the final text at the Sender, and its *gateway
  overhead* is the turn minus its model calls (timed around the model
  client's stream, as bench/turns.py does). The *overhead per tool step* is a
  tool turn's overhead minus the median overhead of the turns without a tool,
  minus the median bare SDK call: what recording the step and its result, the
  status line, the call through `ToolServers` and the longer request cost,
  beyond the tool's own time.

The project's target is at most 5 ms added per tool step at p50.

    python bench/tools.py [--calls 300] [--turns 150] [--model-processes 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import (
    PLATFORM,
    ROOT,
    BenchSender,
    inbound,
    ms,
    percentile,
    start_redis,
    wait_redis,
)
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from gateway.inbound.ingest import Ingest
from gateway.messages import Address
from gateway.metrics import Metrics
from gateway.models import ModelCall, Models, ToolCall, Usage
from gateway.settings.env import Settings
from gateway.state.keys import connect
from gateway.tools import ToolServers
from gateway.worker import Worker
from tests.fakes.llm_server import FakeLLM
from tests.fakes.llm_shapes import JSON, last_user_text
from tests.fakes.llm_tools import Answer, FakeToolCall, tool_results

REPLY = "the ticket is open and its owner has it in hand"
TARGET_P50 = 0.005  # the most a tool step may add at p50
WARM_UP = 20  # calls (and turns of each shape) before anything is timed
TURN_TIMEOUT = 30.0  # one turn; a turn that takes longer ends the run


def server_args() -> list[str]:
    return ["-m", "tests.fakes.mcp_servers"]


def write_config(directory: Path) -> Path:
    """The `GATEWAY_MCP_CONFIG` file: the test server over stdio, as `desk`."""
    path = directory / "mcp.json"
    desk = {"command": sys.executable, "args": server_args(), "cwd": str(ROOT)}
    path.write_text(json.dumps({"mcpServers": {"desk": desk}}))
    return path


def settings_for(redis_url: str, llm: FakeLLM, config: Path, processes: int) -> Settings:
    values: dict[str, Any] = {
        "_env_file": None,
        "REDIS_URL": redis_url,
        "GATEWAY_MODEL": "openai/bench-model",
        "GATEWAY_API_BASE": llm.api_base,
        "GATEWAY_API_KEY": "sk-bench",
        "GATEWAY_MODEL_RETRIES": 0,
        "GATEWAY_MODEL_PROCESSES": processes,
        "GATEWAY_MCP_CONFIG": str(config),
    }
    return Settings(**values)


def p50_p99(values: Sequence[float]) -> tuple[float, float]:
    return statistics.median(values), percentile(values, 99)


# -- (a) and (b): one call, bare and through ToolServers -----------------------------------------


@contextlib.asynccontextmanager
async def bare_session() -> AsyncIterator[ClientSession]:
    """The test server in a process of its own, and an SDK session to it; nothing else."""
    params = StdioServerParameters(command=sys.executable, args=server_args(), cwd=str(ROOT))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def timed(call: Any) -> float:
    started = time.perf_counter()
    await call
    return time.perf_counter() - started


async def compare_calls(settings: Settings, n: int) -> tuple[list[float], list[float]]:
    """`n` calls each, the bare one and the gateway's in turn; their times."""
    redis = connect(settings.redis_url or "")
    servers = ToolServers.for_settings(settings, Metrics(redis))
    bare: list[float] = []
    gateway: list[float] = []
    try:
        await servers.start()
        if servers.down():
            raise RuntimeError(f"the test server did not start: {servers.reports()}")
        async with bare_session() as session:
            for i in range(WARM_UP + n):
                ticket = f"T-{i}"
                bare_call = session.call_tool("lookup_ticket", {"id": ticket})
                gateway_call = servers.call("desk__lookup_ticket", json.dumps({"id": ticket}))
                # Each goes first every other time: neither gains from the order.
                if i % 2:
                    a, b = await timed(bare_call), await timed(gateway_call)
                else:
                    b, a = await timed(gateway_call), await timed(bare_call)
                if i >= WARM_UP:
                    bare.append(a)
                    gateway.append(b)
    finally:
        await servers.aclose()
        await redis.aclose()
    return bare, gateway


# -- (c): a tool step inside a real turn ---------------------------------------------------------


class TimedModels(Models):
    """The gateway's model client, adding up the time of the calls of the running turn.

    Turns run one at a time, so every call made while a turn runs is that turn's.
    """

    spent = 0.0

    async def stream(
        self, call: ModelCall, usage: Usage, calls: list[ToolCall] | None = None
    ) -> AsyncIterator[str]:
        started = time.perf_counter()
        try:
            async for piece in super().stream(call, usage, calls):
                yield piece
        finally:
            self.spent += time.perf_counter() - started


@dataclass
class StampingSender(BenchSender):
    """Stamps when the running turn's final text arrives."""

    done: asyncio.Event = field(default_factory=asyncio.Event)
    finished_at: float = 0.0

    def record(self, address: Address, markdown: str, final: bool) -> None:
        # The whole reply may have gone out as an intermediate edit, with no final call
        # after it: the full text is the mark then.
        if (final or markdown == REPLY) and not self.done.is_set():
            self.finished_at = time.perf_counter()
            self.done.set()


def model_reply(body: JSON) -> str | Answer:
    """A tool turn's message asks for a lookup first; a plain one is answered at once."""
    if tool_results(body):
        return REPLY
    text = last_user_text(body.get("messages", body.get("input")))
    if text.startswith("tool"):
        return Answer(calls=[FakeToolCall("desk__lookup_ticket", '{"id": "T-42"}')])
    return REPLY


@dataclass
class TurnTimes:
    """Per shape: each turn's time and its gateway overhead (the turn minus its model calls)."""

    turn: dict[str, list[float]] = field(default_factory=lambda: {"tool": [], "plain": []})
    overhead: dict[str, list[float]] = field(default_factory=lambda: {"tool": [], "plain": []})
    model_calls: dict[str, int] = field(default_factory=lambda: {"tool": 0, "plain": 0})


async def compare_turns(settings: Settings, llm: FakeLLM, n: int) -> TurnTimes:
    """`n` turns of each shape, alternating, one at a time, each in a session of its own."""
    redis = connect(settings.redis_url or "")
    await redis.flushdb()
    sender = StampingSender()
    models = TimedModels.for_settings(settings, processes=settings.model_processes)
    worker = Worker(settings, redis, {PLATFORM: sender}, models)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    ingest = Ingest(settings, redis)
    times = TurnTimes()
    try:
        await asyncio.wait_for(worker.ready.wait(), 120)
        for i in range(WARM_UP + n):
            for shape in ("tool", "plain"):
                requests = len(llm.requests)
                turn, overhead = await one_turn(ingest, worker, sender, models, shape, i)
                if i >= WARM_UP:
                    times.turn[shape].append(turn)
                    times.overhead[shape].append(overhead)
                    times.model_calls[shape] += len(llm.requests) - requests
    finally:
        stop.set()
        await running
        await redis.aclose()
    return times


async def one_turn(
    ingest: Ingest,
    worker: Worker,
    sender: StampingSender,
    models: TimedModels,
    shape: str,
    number: int,
) -> tuple[float, float]:
    """One message answered: the turn's time, and that time minus its model calls."""
    sender.done.clear()
    models.spent = 0.0
    message = inbound(f"{shape}-{number}", f"{shape} {number}: how is T-42?", number)
    started = time.perf_counter()
    await ingest.receive(message)
    await asyncio.wait_for(sender.done.wait(), TURN_TIMEOUT)
    turn = sender.finished_at - started
    # The job completes after the final text; the next turn starts on a quiet worker.
    async with asyncio.timeout(TURN_TIMEOUT):
        while await worker.sessions.owed(message.session_key) > 0:
            await asyncio.sleep(0.002)
    return turn, turn - models.spent


# -- the report ----------------------------------------------------------------------------------


def report(bare: list[float], gateway: list[float], times: TurnTimes) -> None:
    bare50, bare99 = p50_p99(bare)
    gw50, gw99 = p50_p99(gateway)
    print(f"bare SDK call      p50 {ms(bare50)}  p99 {ms(bare99)}  ({len(bare)} calls)")
    print(
        f"ToolServers.call   p50 {ms(gw50)}  p99 {ms(gw99)}  "
        f"(+{(gw50 - bare50) * 1000:.2f} ms over bare at p50, "
        f"+{(gw99 - bare99) * 1000:.2f} ms at p99; ratio {gw50 / bare50:.2f} at p50)"
    )
    for shape, label in (("plain", "turn, no tool    "), ("tool", "turn, 1 tool step")):
        turn50, _ = p50_p99(times.turn[shape])
        over50, over99 = p50_p99(times.overhead[shape])
        calls = times.model_calls[shape] / max(1, len(times.turn[shape]))
        print(
            f"{label}  p50 {ms(turn50)}  gateway overhead p50 {ms(over50)} "
            f"p99 {ms(over99)}  ({len(times.turn[shape])} turns, {calls:.1f} model calls each)"
        )
    plain50 = statistics.median(times.overhead["plain"])
    step = [t - plain50 - bare50 for t in times.overhead["tool"]]
    step50, step99 = p50_p99(step)
    met = "met" if step50 <= TARGET_P50 else "missed"
    print(
        f"tool step in a turn   overhead p50 {ms(step50)}  p99 {ms(step99)}  "
        f"(a tool turn's overhead - the plain turns' p50 overhead - the bare call's p50)"
    )
    print(f"target <= {TARGET_P50 * 1000:g} ms added per tool step at p50: {met}")


async def amain(args: argparse.Namespace) -> None:
    process, url = start_redis()
    llm = FakeLLM()
    llm.reply = model_reply
    llm.first_token_delay, llm.token_delay = args.model_ms / 2000, 0.0005
    llm.start()
    try:
        await wait_redis(url)
        with tempfile.TemporaryDirectory(prefix="bench-tools-") as directory:
            settings = settings_for(url, llm, write_config(Path(directory)), args.model_processes)
            print(
                f"stdio MCP test server; fake model {args.model_ms:g} ms to its first token; "
                f"model processes {args.model_processes}; {WARM_UP} warm-up calls and turns"
            )
            bare, gateway = await compare_calls(settings, args.calls)
            times = await compare_turns(settings, llm, args.turns)
        report(bare, gateway, times)
    finally:
        llm.stop()
        process.terminate()
        process.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="tool calls of each kind")
    parser.add_argument("--turns", type=int, default=150, help="turns of each shape")
    parser.add_argument("--model-ms", type=float, default=20.0, help="fake model's first token")
    parser.add_argument(
        "--model-processes", type=int, default=1, help="0: litellm in the worker's process"
    )
    warnings.filterwarnings("ignore", module="pydantic")  # litellm's own schema warnings
    asyncio.run(amain(parser.parse_args()))


if __name__ == "__main__":
    main()

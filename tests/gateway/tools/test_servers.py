"""ToolServers against the real test server (tests/fakes/mcp_servers.py), over stdio and HTTP.

Each test starts its own servers; backoff and pings are short so a killed
server comes back within the test, and every wait is on a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis.asyncio as aioredis
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from gateway.backoff import Backoff
from gateway.errors import ConfigError
from gateway.metrics import Metrics, SnapshotCollector, snapshot
from gateway.settings.env import load_settings
from gateway.tools import (
    Limits,
    ServerConfig,
    Timing,
    ToolsConfig,
    ToolServers,
    describe_servers,
)
from tests.fakes.mcp_servers import lookup_record

ROOT = Path(__file__).resolve().parents[3]
FAST = Timing(connect_timeout=20.0, ping_interval=0.5, backoff=Backoff(first=0.05, limit=0.2))
SECRET = "sk-live-do-not-print-4242"

# Each test starts MCP server processes (seconds each on a loaded machine).
pytestmark = pytest.mark.timeout(180)


def stdio_server(name: str, effects: Path, **options: Any) -> ServerConfig:
    return ServerConfig(
        name=name,
        command=sys.executable,
        args=("-m", "tests.fakes.mcp_servers", "--effects", str(effects)),
        cwd=str(ROOT),
        **options,
    )


async def until(condition: Callable[[], Any], within: float = 15.0) -> None:
    """Wait until `condition()` is true; fail after `within` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not hold in time")
        await asyncio.sleep(0.02)


def effects_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def effects(tmp_path: Path) -> Path:
    return tmp_path / "effects.txt"


@pytest.fixture
def http_url(tmp_path: Path) -> Iterator[str]:
    """The test server on a loopback port of its own, in a subprocess."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.mcp_servers", "--http", "0"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("listening on "), line
    yield f"http://127.0.0.1:{int(line.split()[-1])}/mcp"
    process.terminate()
    process.wait(timeout=10)
    process.stdout.close()


@pytest.fixture
async def servers(effects: Path) -> AsyncIterator[ToolServers]:
    tools = ToolServers(ToolsConfig((stdio_server("local", effects),)), timing=FAST)
    await tools.start()
    yield tools
    await tools.aclose()


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ToolServers]:
    """One server for the tests that change nothing on it (a server takes seconds to start)."""
    effects = tmp_path_factory.mktemp("shared") / "effects.txt"
    tools = ToolServers(ToolsConfig((stdio_server("local", effects),)), timing=FAST)
    await tools.start()
    yield tools
    await tools.aclose()


on_shared = pytest.mark.asyncio(loop_scope="module")


async def start(*configs: ServerConfig, limits: Limits | None = None, **kw: Any) -> ToolServers:
    tools = ToolServers(ToolsConfig(configs), limits or Limits(), timing=FAST, **kw)
    await tools.start()
    return tools


def names(tools: ToolServers) -> set[str]:
    return {spec.name for spec in tools.tools()}


async def test_stdio_and_http_servers_are_both_listed_and_called(
    effects: Path, http_url: str
) -> None:
    tools = await start(stdio_server("local", effects), ServerConfig(name="remote", url=http_url))
    try:
        assert {"local__lookup_ticket", "remote__lookup_ticket"} <= names(tools)
        assert tools.down() == []
        for name in ("local__lookup_ticket", "remote__lookup_ticket"):
            result = await tools.call(name, json.dumps({"id": "T-17"}))
            assert (result.text, result.outcome) == (lookup_record("T-17"), "ok")
        added = await tools.call("remote__add", '{"a": 2, "b": 40}')
        assert (added.text, added.outcome) == ("42", "ok")
    finally:
        await tools.aclose()


async def test_http_headers_reach_the_server_and_a_secret_stays_out_of_reports(
    http_url: str,
) -> None:
    closed = ServerConfig(name="gone", url="http://127.0.0.1:9/mcp", headers={"X-Key": SECRET})
    remote = ServerConfig(name="remote", url=http_url, headers={"X-Key": SECRET})
    tools = await start(remote, closed)
    try:
        assert tools.down() == ["gone"]
        (up, down) = tools.reports()
        assert up.ok and "remote__add" in up.tools
        assert not down.ok and down.error and SECRET not in down.error
    finally:
        await tools.aclose()


async def test_two_servers_with_the_same_tools_get_distinct_names(effects: Path) -> None:
    tools = await start(stdio_server("a", effects), stdio_server("b", effects))
    try:
        assert {"a__add", "b__add"} <= names(tools)
        assert {spec.server for spec in tools.tools() if spec.tool == "add"} == {"a", "b"}
    finally:
        await tools.aclose()


async def test_only_allowlisted_tools_are_offered_or_called(effects: Path) -> None:
    tools = await start(stdio_server("local", effects, allowed_tools=frozenset({"add", "nope"})))
    try:
        assert names(tools) == {"local__add"}
        refused = await tools.call("local__delete_item", '{"name": "x"}')
        assert refused.outcome == "unknown"
        assert effects_of(effects) == []
    finally:
        await tools.aclose()


async def test_annotations_and_overrides_set_each_tools_care(effects: Path) -> None:
    tools = await start(
        stdio_server("local", effects, read_only=frozenset({"plain"}), timeout=7.0),
        stdio_server("strict", effects, confirm="always", destructive=frozenset({"lookup_ticket"})),
    )
    try:
        spec = {s.name: s for s in tools.tools()}
        care = {n: (s.read_only, s.destructive, s.needs_confirmation) for n, s in spec.items()}
        assert care["local__lookup_ticket"] == (True, False, False)
        assert care["local__add"] == (False, False, False)
        assert care["local__delete_item"] == (False, True, True)
        assert care["local__plain"] == (True, False, False)  # overridden: no annotations
        assert care["strict__plain"] == (False, True, True)  # no annotations: destructive
        assert care["strict__lookup_ticket"] == (False, True, True)
        assert care["strict__add"] == (False, False, True)  # confirm: always
        assert spec["local__add"].timeout == 7.0 and spec["strict__add"].timeout == 60.0
        assert spec["local__add"].description == "Add two integers."
        assert spec["local__add"].input_schema["required"] == ["a", "b"]
    finally:
        await tools.aclose()


@on_shared
async def test_openai_tools_are_functions_with_the_input_schema(shared: ToolServers) -> None:
    by_name = {t["function"]["name"]: t for t in shared.openai_tools()}
    add = by_name["local__add"]
    assert add["type"] == "function"
    assert add["function"]["description"] == "Add two integers."
    assert add["function"]["parameters"]["properties"].keys() == {"a", "b"}
    assert len(by_name) == len(shared.tools())


@pytest.mark.parametrize(
    ("name", "arguments", "outcome", "says"),
    [
        ("local__add", "{not json", "invalid", "not valid JSON"),
        ("local__add", "[1, 2]", "invalid", "must be a JSON object"),
        ("local__nothing", "{}", "unknown", "no tool named 'local__nothing'"),
        ("local__fail", "{}", "error", "the fail tool failed on purpose"),
        ("local__add", '{"a": "x"}', "error", "validation error"),
    ],
)
@on_shared
async def test_every_failure_is_a_result_the_model_can_read(
    shared: ToolServers, name: str, arguments: str, outcome: str, says: str
) -> None:
    result = await shared.call(name, arguments)
    assert result.outcome == outcome
    assert says in result.text


@on_shared
async def test_empty_arguments_mean_none(shared: ToolServers) -> None:
    result = await shared.call("local__pid", "")
    assert result.outcome == "ok" and result.text.isdigit()


@on_shared
async def test_non_text_content_is_named_not_inlined(shared: ToolServers) -> None:
    result = await shared.call("local__picture", "{}")
    assert result.text == "a pixel\n[image: image/png, not shown]"


async def test_a_long_result_is_cut_with_a_marker(effects: Path) -> None:
    tools = await start(stdio_server("local", effects), limits=Limits(result_chars=1000))
    try:
        result = await tools.call("local__huge", '{"n": 5000}')
        head, marker = result.text.split("\n")
        assert head == "".join(chr(ord("a") + i % 26) for i in range(1000))
        assert marker == "[… 4000 more characters cut]"
        small = await tools.call("local__huge", '{"n": 1000}')
        assert len(small.text) == 1000
    finally:
        await tools.aclose()


async def test_a_call_past_its_timeout_is_a_timeout_and_the_server_is_told(effects: Path) -> None:
    tools = await start(stdio_server("local", effects, timeout=0.5))
    try:
        result = await tools.call("local__slow", '{"seconds": 30}')
        assert result.outcome == "timeout" and "0.5 seconds" in result.text
        await until(lambda: "slow cancelled" in effects_of(effects))
        assert (await tools.call("local__add", '{"a": 1, "b": 1}')).text == "2"
    finally:
        await tools.aclose()


async def test_cancelling_a_call_cancels_it_on_the_server_and_the_session_goes_on(
    servers: ToolServers, effects: Path
) -> None:
    task = asyncio.create_task(servers.call("local__slow", '{"seconds": 30}'))
    await until(lambda: "slow started" in effects_of(effects))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await until(lambda: "slow cancelled" in effects_of(effects))
    assert (await servers.call("local__add", '{"a": 3, "b": 4}')).text == "7"
    assert servers.down() == []


async def test_a_destructive_tool_runs_once_per_call(servers: ToolServers, effects: Path) -> None:
    result = await servers.call("local__delete_item", '{"name": "report"}')
    assert result.outcome == "ok"
    assert effects_of(effects) == ["deleted report"]


async def test_a_killed_server_is_down_then_comes_back_by_itself(servers: ToolServers) -> None:
    first_pid = int((await servers.call("local__pid", "{}")).text)
    os.kill(first_pid, signal.SIGKILL)
    await until(lambda: servers.down() == ["local"])
    unavailable = await servers.call("local__add", '{"a": 1, "b": 2}')
    assert unavailable.outcome == "unavailable" and "local" in unavailable.text
    assert servers.tools() == []
    await until(lambda: servers.down() == [])
    second_pid = int((await servers.call("local__pid", "{}")).text)
    assert second_pid != first_pid
    assert_gone(first_pid)


async def test_a_server_that_dies_during_a_call_answers_unavailable(
    servers: ToolServers, effects: Path
) -> None:
    pid = int((await servers.call("local__pid", "{}")).text)
    task = asyncio.create_task(servers.call("local__slow", '{"seconds": 30}'))
    await until(lambda: "slow started" in effects_of(effects))
    os.kill(pid, signal.SIGKILL)
    result = await task
    assert result.outcome == "unavailable"


@pytest.mark.parametrize("kind", ["not found", "not executable", "cwd missing"])
async def test_a_command_that_cannot_be_run_is_named_and_not_retried(
    tmp_path: Path, kind: str
) -> None:
    """A mistake in the file: reported with the command, never retried, and
    `check_commands` stops the worker with a line that names the server."""
    script = tmp_path / "server.sh"
    script.write_text("#!/bin/sh\n")  # exists, but without the execute bit
    command, cwd = {
        "not found": (str(tmp_path / "no-such-server"), None),
        "not executable": (str(script), None),
        "cwd missing": (sys.executable, str(tmp_path / "gone")),
    }[kind]
    config = ServerConfig(name="missing", command=command, cwd=cwd, env={"API_KEY": "s3cr3t"})
    tools = await start(config)
    try:
        (report,) = tools.reports()
        assert not report.ok and report.error and "cannot be run" in report.error
        assert (cwd or command) in report.error and "s3cr3t" not in report.error
        with pytest.raises(ConfigError, match=r"MCP server 'missing': .* cannot be run"):
            tools.check_commands()
        task = tools._tasks[0]
        await asyncio.wait_for(asyncio.shield(task), 10)  # the connection gave up: done
        assert tools._connections["missing"].attempts == 1
    finally:
        await tools.aclose()


async def test_a_server_that_starts_and_then_fails_is_reported_and_retried(
    tmp_path: Path,
) -> None:
    exits = ServerConfig(name="exits", command=sys.executable, args=("-c", "raise SystemExit(3)"))
    tools = await start(exits)
    try:
        (report,) = tools.reports()
        assert not report.ok and report.error and "cannot be run" not in report.error
        tools.check_commands()  # not a mistake in the file: the worker goes on
        attempts = tools._connections["exits"].attempts
        await until(lambda: tools._connections["exits"].attempts > attempts + 1)
    finally:
        await tools.aclose()


async def test_an_http_server_that_is_down_is_retried() -> None:
    gone = ServerConfig(name="gone", url="http://127.0.0.1:9/mcp")
    tools = await start(gone)
    try:
        tools.check_commands()
        attempts = tools._connections["gone"].attempts
        await until(lambda: tools._connections["gone"].attempts > attempts + 1)
    finally:
        await tools.aclose()


async def test_a_new_tool_is_picked_up_after_list_changed(servers: ToolServers) -> None:
    assert "local__extra" not in names(servers)
    assert (await servers.call("local__enable_extra", "{}")).outcome == "ok"
    await until(lambda: "local__extra" in names(servers))
    assert (await servers.call("local__extra", "{}")).text == "extra answer"


async def test_aclose_leaves_no_process(effects: Path) -> None:
    tools = await start(stdio_server("a", effects), stdio_server("b", effects))
    pids = [int((await tools.call(f"{s}__pid", "{}")).text) for s in ("a", "b")]
    await tools.aclose()
    for pid in pids:
        assert_gone(pid)


def assert_gone(pid: int) -> None:
    """Neither running nor a zombie: a reaped process id is not found at all."""
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_calls_are_counted_by_tool_and_outcome(
    effects: Path, redis_client: aioredis.Redis
) -> None:
    tools = await start(stdio_server("local", effects), metrics=Metrics(redis_client))
    try:
        await tools.call("local__add", '{"a": 1, "b": 2}')
        await tools.call("local__add", "oops")
        await tools.call("invented", "{}")
    finally:
        await tools.aclose()
    values, _ = await snapshot(redis_client, [])
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(values, {}))
    text = generate_latest(registry).decode()
    assert 'gateway_tool_calls_total{outcome="ok",tool="local__add"} 1.0' in text
    assert 'gateway_tool_calls_total{outcome="invalid",tool="local__add"} 1.0' in text
    assert 'gateway_tool_calls_total{outcome="unknown",tool="unknown"} 1.0' in text
    assert "gateway_tool_latency_seconds_count 3.0" in text


async def test_describe_servers_reports_each_server_once(tmp_path: Path, effects: Path) -> None:
    path = tmp_path / "mcp.json"
    good = stdio_server("local", effects)
    document = {
        "mcpServers": {
            "local": {"command": good.command, "args": list(good.args), "cwd": good.cwd},
            "broken": {"command": str(tmp_path / "absent"), "env": {"TOKEN": SECRET}},
        }
    }
    path.write_text(json.dumps(document))
    reports = await describe_servers(load_settings(_env_file=None, GATEWAY_MCP_CONFIG=str(path)))
    local, broken = reports
    assert local.ok and local.transport == "stdio" and "local__lookup_ticket" in local.tools
    assert not broken.ok and broken.error and SECRET not in broken.error


async def test_aclose_ends_a_server_whose_connection_is_failing_at_that_moment() -> None:
    # A cancel that lands while an attempt fails reaches the task as the attempt's error
    # (its task group raises that instead); the task must still end. No backoff: the
    # task is inside an attempt whenever aclose comes.
    gone = ServerConfig(name="gone", url="http://127.0.0.1:9/mcp")
    timing = Timing(connect_timeout=5.0, ping_interval=5.0, backoff=Backoff(first=0.0, limit=0.0))
    for attempt in range(25):
        tools = ToolServers(ToolsConfig((gone,)), timing=timing)
        await tools.start()
        await asyncio.sleep(0.01 * (attempt % 4))  # cancels land at different points
        async with asyncio.timeout(10):
            await tools.aclose()


async def test_closing_during_a_servers_shutdown_lets_the_shutdown_end_it(
    servers: ToolServers,
) -> None:
    # The SDK ends a stdio server inside a shielded scope: close stdin, wait, kill, close
    # the subprocess transport. A stopped server makes that take seconds; aclose in the
    # middle must not cut it short (which left the process running and its transport to
    # the garbage collector, where it warns: warnings are errors here).
    pid = int((await servers.call("local__pid", "{}")).text)
    os.kill(pid, signal.SIGSTOP)
    try:
        servers._connections["local"].lost("the test ends this connection")
        await until(lambda: servers.down() == ["local"])  # the shutdown has begun
        await servers.aclose()
        assert_gone(pid)
        gc.collect()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

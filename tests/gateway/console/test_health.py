"""The health page: a deployment's workers, connections, queues, turns, errors and tool
servers, as a real Worker and the metrics writers left them in Redis."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.console.health import TurnRate, read, tool_servers
from gateway.metrics import Metrics
from gateway.state.health import Health
from tests.fakes.llm_server import FakeLLM
from tests.gateway.console.conftest import ORIGIN, TOKEN, build
from tests.support.conversation import conversation


async def test_the_page_shows_workers_connections_turns_and_tool_servers(
    redis_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"files": {"command": "files-server"}}}))
    async with conversation(redis_url, llm, GATEWAY_ADMIN_TOKEN=TOKEN) as talk:
        await talk.say("hello")
        await talk.workers[0].metrics.flush()  # what the worker gathered, written now
        await Metrics(talk.redis).tool_call("files__read", "ok", 0.2)
        await Metrics(talk.redis).tool_call("files__read", "error", 0.2)
        await Health(talk.redis, "discord-shards-0").report(False, "reconnecting")
        found = await read(talk.redis, ["test"], config)
        # The web process reads the tool servers' file; the worker here runs none.
        client, _ = build(talk.redis, talk.settings.model_copy(update={"mcp_config": config}))
        async with client:
            await client.post("/admin/signin", data={"token": TOKEN}, headers=ORIGIN)
            page = (await client.get("/admin/health")).text
    assert found.workers == {"test": 1} and found.depth == {"test": 0}
    assert found.turns == {"ok": 1} and found.turns_total == 1
    assert found.servers == {"files": {"ok": 1, "error": 1}}
    assert found.connections["discord-shards-0"]["up"] is False
    assert "discord-shards-0" in page and "reconnecting" in page and "badge bad" in page
    assert "files" in page and "error 1, ok 1" in page


def test_an_unreadable_tool_config_is_shown_not_raised(tmp_path: Path) -> None:
    servers, error = tool_servers(tmp_path / "missing.json", {})
    assert servers == {} and "cannot read" in error
    assert tool_servers(None, {"x__y ok": 1}) == ({}, "")


def test_turns_per_minute_come_from_the_counter_over_the_last_minute() -> None:
    rate = TurnRate()
    assert rate.add(100.0, 10) is None  # one sample says nothing
    assert rate.add(130.0, 20) == 20.0
    assert rate.add(190.0, 30) == 10.0  # the sample at 100 s has left the minute

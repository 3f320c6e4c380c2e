"""`gateway settings`, as an operator runs it: a subprocess against a real Redis, and a
worker of another process that uses the change at its next turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.support.cli_runs import run_against
from tests.support.harness import start_workers
from tests.support.helpers import inbound

pytestmark = pytest.mark.timeout(120)


async def test_set_get_show_and_unset_through_the_scopes(redis_url: str, tmp_path: Path) -> None:
    env = {"GATEWAY_MODEL": "openai/env-model", "GATEWAY_API_KEY": "sk-very-secret"}
    done = await run_against(
        redis_url, tmp_path, "settings", "set", "slack:T1", "model", "openai/ws", **env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "slack:T1 model = openai/ws\n"
    await run_against(
        redis_url, tmp_path, "settings", "set", "slack:T1:C1", "budget_user_daily", "2USD"
    )
    got = await run_against(
        redis_url, tmp_path, "settings", "get", "slack:T1:C1:1.2", "model", **env
    )
    assert got.stdout == "openai/ws\n"
    shown = await run_against(redis_url, tmp_path, "settings", "show", "slack:T1:C1", **env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["KEY", "VALUE", "FROM"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["model"][1:] == ["openai/ws", "slack:T1"]
    assert rows["budget_user_daily"][1:] == ["2usd", "slack:T1:C1"]
    assert rows["side_model"][-1] == "environment"
    assert "sk-very-secret" not in shown.stdout + shown.stderr
    gone = await run_against(redis_url, tmp_path, "settings", "unset", "slack:T1", "model", **env)
    assert gone.stdout == "slack:T1 model unset\n"
    again = await run_against(redis_url, tmp_path, "settings", "unset", "slack:T1", "model", **env)
    assert again.returncode == 0 and again.stdout == "slack:T1 does not set model\n"
    got = await run_against(redis_url, tmp_path, "settings", "get", "slack:T1:C1", "model", **env)
    assert got.stdout == "openai/env-model\n"


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("set", "slack:T1", "token_budget", "many"), "gateway: token_budget: must be a whole"),
        (("set", "slack:T1", "colour", "red"), "gateway: unknown setting 'colour'"),
        (("get", "slack::C1", "model"), "gateway: scope must be platform"),
        (("set", "slack", "budget_user_daily", "5 euros"), "gateway: budget_user_daily: must be"),
        (
            ("set", "slack:T1", "suggested_prompts", "Plan my week"),
            "gateway: suggested_prompts: must be `Title|Message;Title|Message`, a JSON list",
        ),
        (
            ("set", "slack:T1", "suggested_prompts", "a|1;b|2;c|3;d|4;e|5"),
            "gateway: suggested_prompts: must be",
        ),
    ],
)
async def test_a_wrong_setting_exits_non_zero_with_one_line(
    redis_url: str, tmp_path: Path, args: tuple[str, ...], line: str
) -> None:
    done = await run_against(redis_url, tmp_path, "settings", *args)
    assert done.returncode == 2
    assert done.stderr.startswith(line) and done.stderr.count("\n") == 1
    shown = await run_against(redis_url, tmp_path, "settings", "show", "slack:T1")
    assert "slack:T1" not in shown.stdout.split("FROM", 1)[1]  # nothing was set


async def test_a_setting_made_by_the_cli_reaches_a_running_worker_at_its_next_turn(
    redis_url: str, llm: FakeLLM, tmp_path: Path
) -> None:
    async with start_workers(redis_url, llm, 1) as h:
        first = inbound("before")
        await h.ingest.receive(first)
        await h.idle(first.session_key)
        assert llm.requests[-1].model == "main-model"
        done = await run_against(
            redis_url, tmp_path, "settings", "set", "test:W", "model", "openai/cli"
        )
        assert done.returncode == 0, done.stderr
        second = inbound("after")
        await h.ingest.receive(second)
        await h.idle(second.session_key)
        assert llm.requests[-1].model == "cli"

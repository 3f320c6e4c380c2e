"""`gateway usage`, as an operator runs it: a subprocess against a real Redis."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from redis.asyncio import Redis

from gateway.models import Charge, ModelCall, Usage
from gateway.spend.usage import UsageLedger
from tests.support.cli_runs import run_against

pytestmark = pytest.mark.timeout(120)
MARCH = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
async def recorded(redis_client: Redis) -> None:
    ledger = UsageLedger(redis_client)
    alice = Charge("slack:T1:C1", "U1", "turn")
    bob = Charge("telegram:42:42", "7", "side")
    await ledger.record(
        ModelCall("openai/gpt-4o-mini", [], 1, charge=alice), Usage(1000, 200, 0.5), MARCH
    )
    await ledger.record(ModelCall("ollama/llama3", [], 1, charge=bob), Usage(30, 5, None), MARCH)
    old = MARCH - dt.timedelta(days=40)
    await ledger.record(ModelCall("ollama/llama3", [], 1, charge=bob), Usage(9, 9, None), old)


@pytest.mark.usefixtures("recorded")
async def test_usage_by_model_is_a_table_with_unknown_costs_said(
    redis_url: str, tmp_path: Path
) -> None:
    result = await run_against(
        redis_url, tmp_path, "usage", "--by", "model", "--since", "2026-03-01"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "MODEL               CALLS  PROMPT  COMPLETION  COST (USD)",
        "ollama/llama3       1      30      5           cost unknown",
        "openai/gpt-4o-mini  1      1000    200         0.5000",
    ]


@pytest.mark.usefixtures("recorded")
async def test_usage_as_json_by_user_and_workspace(redis_url: str, tmp_path: Path) -> None:
    result = await run_against(redis_url, tmp_path, "usage", "--json", "--since", "2026-01-01")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert (found["since"], found["by"]) == ("2026-01-01", "user")
    assert found["rows"] == [
        {
            "user": "slack:U1",
            "prompt_tokens": 1000,
            "completion_tokens": 200,
            "calls": 1,
            "cost_usd": 0.5,
            "unpriced_calls": 0,
        },
        {
            "user": "telegram:7",
            "prompt_tokens": 39,
            "completion_tokens": 14,
            "calls": 2,
            "cost_usd": None,
            "unpriced_calls": 2,
        },
    ]
    by_workspace = await run_against(
        redis_url, tmp_path, "usage", "--by", "workspace", "--json", "--since", "2026-03-01"
    )
    rows = json.loads(by_workspace.stdout)["rows"]
    assert [(r["workspace"], r["calls"]) for r in rows] == [("slack:T1", 1), ("telegram:42", 1)]


async def test_a_bad_day_is_one_clear_line(redis_url: str, tmp_path: Path) -> None:
    result = await run_against(redis_url, tmp_path, "usage", "--since", "March")
    assert result.returncode == 2
    assert "must be a day as YYYY-MM-DD, not 'March'" in result.stderr
    assert result.stdout == ""

"""`gateway feedback`, as an operator runs it: a subprocess against a real Redis."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from redis.asyncio import Redis

from gateway.feedback.store import FeedbackStore, Reply
from tests.support.cli_runs import run_against

pytestmark = pytest.mark.timeout(120)
MARCH = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)
SLACK = Reply("slack", "T1", "C1", "1772452800.000100", "slack:T1:C1:1.2", "turn-1", "openai/a")
TELEGRAM = Reply("telegram", "99", "42", "5000", "telegram:99:42", "turn-2", "ollama/llama3")


@pytest.fixture
async def clicked(redis_client: Redis) -> None:
    store = FeedbackStore(redis_client)
    for reply in (SLACK, TELEGRAM):
        await store.register(reply)
    at = MARCH.timestamp()
    await store.record("slack", "C1", SLACK.message_id, "U1", "up", now=at)
    await store.record("telegram", "42", "5000", "7", "up", now=at + 60)
    await store.record("telegram", "42", "5000", "7", "down", now=at + 120)  # changed
    await store.record("slack", "C1", SLACK.message_id, "U2", "down", now=at - 40 * 86400)


@pytest.mark.usefixtures("clicked")
async def test_feedback_is_a_table_newest_first_with_its_clicker(
    redis_url: str, tmp_path: Path
) -> None:
    result = await run_against(redis_url, tmp_path, "feedback", "--since", "2026-03-01")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "TIME (UTC)           PLATFORM  WORKSPACE  SESSION          MODEL          VALUE  USER",
        "2026-03-02 12:02:00  telegram  99         telegram:99:42   ollama/llama3  down   7",
        "2026-03-02 12:00:00  slack     T1         slack:T1:C1:1.2  openai/a       up     U1",
    ]


@pytest.mark.usefixtures("clicked")
async def test_feedback_as_json_since_an_earlier_day(redis_url: str, tmp_path: Path) -> None:
    result = await run_against(redis_url, tmp_path, "feedback", "--json", "--since", "2026-01-01")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["since"] == "2026-01-01"
    assert [(f["user"], f["value"], f["at"][:10]) for f in found["feedback"]] == [
        ("7", "down", "2026-03-02"),
        ("U1", "up", "2026-03-02"),
        ("U2", "down", "2026-01-21"),
    ]
    assert found["feedback"][0] == {
        "at": "2026-03-02T12:02:00+00:00",
        "platform": "telegram",
        "workspace": "99",
        "channel": "42",
        "message_id": "5000",
        "session": "telegram:99:42",
        "turn": "turn-2",
        "model": "ollama/llama3",
        "user": "7",
        "value": "down",
    }


async def test_no_feedback_is_said_and_a_bad_day_is_one_clear_line(
    redis_url: str, tmp_path: Path
) -> None:
    empty = await run_against(redis_url, tmp_path, "feedback", "--since", "2026-03-01")
    assert (empty.returncode, empty.stdout) == (0, "no feedback since 2026-03-01\n")
    wrong = await run_against(redis_url, tmp_path, "feedback", "--since", "March")
    assert wrong.returncode == 2
    assert "must be a day as YYYY-MM-DD, not 'March'" in wrong.stderr
    assert wrong.stdout == ""

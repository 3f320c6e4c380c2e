"""`gateway migrate`: a version 1 database (what the gateway wrote before its keys were
sharded) moved to 16 shards, resumed and idempotent, refused while a worker reads."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from gateway.errors import LayoutMismatch
from gateway.messages import Inbound
from gateway.state import keys
from gateway.state.keys import GROUP, Keys
from gateway.state.session import user_entry
from tests.fakes.llm_server import FakeLLM
from tests.support.cli_runs import run_against
from tests.support.clusters import cluster_shards
from tests.support.harness import start_workers
from tests.support.helpers import inbound

V1_STREAM = "gw:jobs:test"


@pytest.fixture(autouse=True)
def sixteen_shards() -> Iterator[None]:
    with cluster_shards(16):
        yield


async def _version_1(redis: aioredis.Redis, message: Inbound) -> str:
    """What version 1 wrote for a message waiting for its turn; its job's id."""
    key, now = message.session_key, time.time()
    job_id = str(await redis.xadd(V1_STREAM, {"kind": "turn", "session": key, "payload": ""}))
    await redis.xgroup_create(V1_STREAM, GROUP, id="0")
    await redis.rpush(f"gw:{{{key}}}:inbox", json.dumps(user_entry(message)))
    meta = {"owed": 1, "participated": "1", "channel": message.channel_key, "updated": now}
    await redis.hset(f"gw:{{{key}}}:meta", mapping=meta)  # type: ignore[arg-type]
    await redis.set(f"gw:{{{key}}}:queued", f"{V1_STREAM} {job_id}")
    await redis.zadd("gw:sessions", {key: now})
    await redis.zadd(f"gw:channel:{message.channel_key}", {key: now})
    await redis.hset("gw:metrics", "turns|test|ok", 5)
    await redis.hset("gw:spend:user:test:U1:2026-12", "tokens", 10)
    await redis.set("gw:rate:test:U1", "1")
    # Slack's installations, named as version 1 and 2 named them (untagged).
    await redis.sadd("gw:installed:slack", "team:T1")
    await redis.set("gw:bot:slack:team:T1", '{"bot_token": "sealed"}')
    await redis.set("gw:installation:slack:team:T1", '{"team_id": "T1"}')
    await redis.set("gw:installation:slack:team:T1:user:U1", '{"user_id": "U1"}')
    return job_id


async def test_a_version_1_database_moves_and_its_waiting_message_is_answered(
    redis_url: str, redis_client: aioredis.Redis, llm: FakeLLM, tmp_path: Path
) -> None:
    message = inbound("waiting since before the upgrade", channel="C7")
    key = message.session_key
    job_id = await _version_1(redis_client, message)

    moved = await run_against(redis_url, tmp_path, "migrate", GATEWAY_JOB_SHARDS="16")
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout == (
        "moved 1 global keys, 2 indexes, 4 installations, 1 jobs, 3 session keys, "
        "1 spend keys, 1 user rate buckets; laid out for 16 shards\n"
    )
    assert await keys.stored_layout(redis_client) == keys.Layout(keys.LAYOUT_VERSION, 16)
    assert await redis_client.smembers(Keys.installed("slack")) == {"team:T1"}
    assert await redis_client.get(Keys.installed_bot("slack", "team:T1")) is not None
    assert await redis_client.get(Keys.installation("slack", "team:T1", "U1")) is not None
    assert await redis_client.get(Keys.queued(key)) == f"{Keys.session_jobs(key, 'test')} {job_id}"
    assert [entry for entry, _ in await redis_client.xrange(Keys.session_jobs(key, "test"))] == [
        job_id
    ]
    assert await redis_client.hget(Keys.spend("user", "test:U1", "2026-12"), "tokens") == "10"
    assert await redis_client.zscore(Keys.session_index(key), key) is not None
    assert await redis_client.keys("gw:[^{]*") == ["gw:spend:{user:test:U1}:2026-12"]  # no old name

    again = await run_against(redis_url, tmp_path, "migrate", GATEWAY_JOB_SHARDS="16")
    assert again.stdout == "nothing to move: already laid out for 16 shards\n"

    llm.reply = "answered after the move"
    async with start_workers(redis_url, llm, 1) as harness:
        await harness.idle(key)
        history = await harness.history(key)
    assert [entry["role"] for entry in history] == ["user", "assistant"]


async def test_a_move_is_refused_while_a_worker_reads_unless_forced(
    redis_url: str, redis_client: aioredis.Redis, tmp_path: Path
) -> None:
    await _version_1(redis_client, inbound("hello"))
    await redis_client.xreadgroup(GROUP, "a-running-worker", {V1_STREAM: ">"}, count=1)

    refused = await run_against(redis_url, tmp_path, "migrate", GATEWAY_JOB_SHARDS="16")
    assert refused.returncode == 1 and "a-running-worker" in refused.stderr
    assert await keys.stored_layout(redis_client) == keys.Layout(1, 1)  # nothing moved

    forced = await run_against(redis_url, tmp_path, "migrate", "--force", GATEWAY_JOB_SHARDS="16")
    assert forced.returncode == 0 and "1 jobs" in forced.stdout


async def test_a_process_refuses_a_version_1_database_until_it_is_moved(
    redis_url: str, redis_client: aioredis.Redis, tmp_path: Path
) -> None:
    await _version_1(redis_client, inbound("hello"))
    listed = await run_against(redis_url, tmp_path, "sessions", "list", GATEWAY_JOB_SHARDS="16")
    assert listed.returncode == 1
    assert "run `gateway migrate` once" in listed.stderr


async def test_a_version_2_database_is_taken_as_it_is_unless_it_holds_installations(
    redis_url: str, redis_client: aioredis.Redis, tmp_path: Path
) -> None:
    """Version 3 renamed only Slack's many-workspace installations: a version 2 database
    without any needs no move, one with them is refused until `gateway migrate`."""
    await redis_client.hset(Keys.LAYOUT, mapping={"version": 2, "shards": 16})
    await keys.ensure_layout(redis_client)
    assert await keys.stored_layout(redis_client) == keys.Layout(keys.LAYOUT_VERSION, 16)

    await redis_client.hset(Keys.LAYOUT, mapping={"version": 2, "shards": 16})
    await redis_client.set("gw:bot:slack:team:T2", '{"bot_token": "sealed"}')
    with pytest.raises(LayoutMismatch, match="version 2"):
        await keys.ensure_layout(redis_client)
    moved = await run_against(redis_url, tmp_path, "migrate", GATEWAY_JOB_SHARDS="16")
    assert moved.stdout == "moved 1 installations; laid out for 16 shards\n", moved.stderr
    assert await redis_client.get(Keys.installed_bot("slack", "team:T2")) is not None
    assert await redis_client.exists("gw:bot:slack:team:T2") == 0

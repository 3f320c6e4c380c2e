"""Retention against a real Redis: idle sessions go, busy or revived ones stay.

Sessions are made the way users make them (messages through the real Ingest,
answered by a real Worker with the offline echo model), then aged by moving
their last activity back, as the days would.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.errors import ConfigError
from gateway.inbound.ingest import Ingest
from gateway.settings.env import Settings, load_settings
from gateway.state.keys import Keys
from gateway.state.lease import Lease
from gateway.state.retention import DAY, PRUNE_EVERY, PruneResult, Retention
from gateway.state.session import SessionStore
from gateway.worker import Worker
from tests.support.helpers import inbound, settings
from tests.support.processes import shards_env
from tests.support.recording_sender import RecordingSender
from tests.support.redis_servers import client_for

CHANNEL = "test:W:C1"
ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Deployment:
    config: Settings
    redis: aioredis.Redis
    ingest: Ingest
    sessions: SessionStore
    sender: RecordingSender = field(default_factory=RecordingSender)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    workers: list[Worker] = field(default_factory=list)
    runs: list[asyncio.Task[None]] = field(default_factory=list)

    async def start_worker(self, **values: Any) -> Worker:
        config = settings(str(self.config.redis_url), **values)
        worker = Worker(config, self.redis, {"test": self.sender})
        self.workers.append(worker)
        self.runs.append(asyncio.create_task(worker.run(self.stop)))
        await worker.ready.wait()
        return worker

    async def stop_workers(self) -> None:
        self.stop.set()
        await asyncio.gather(*self.runs)
        self.runs.clear()
        self.stop = asyncio.Event()

    async def talk(self, text: str, **where: Any) -> str:
        """A message answered in full (its job completed); the session's key."""
        message = inbound(text, **where)
        await self.ingest.receive(message)
        await self.settled(message.session_key)
        return message.session_key

    async def settled(self, session_key: str) -> None:
        async with asyncio.timeout(15):
            while await self.sessions.owed(session_key) > 0:
                await asyncio.sleep(0.01)

    async def age(self, session_key: str, days: float) -> None:
        """Move the session's last activity `days` back."""
        score = await self.redis.zscore(Keys.session_index(session_key), session_key)
        assert score is not None
        await self.redis.zadd(Keys.session_index(session_key), {session_key: score - days * DAY})
        updated = await self.redis.hget(Keys.meta(session_key), "updated")
        if updated is not None:
            await self.redis.hset(Keys.meta(session_key), "updated", float(updated) - days * DAY)

    async def left_of(self, session_key: str) -> list[str]:
        """The session's keys that are still there."""
        return sorted(await self.redis.keys(Keys.session(session_key, "*")))


@pytest.fixture
async def deployment(redis_url: str) -> AsyncIterator[Deployment]:
    config = settings(redis_url)
    client = client_for(redis_url)
    found = Deployment(config, client, Ingest(config, client), SessionStore(client))
    await found.start_worker()
    try:
        yield found
    finally:
        await found.stop_workers()
        await client.aclose()


async def test_an_idle_session_is_removed_with_every_key_and_its_index_entries(
    deployment: Deployment,
) -> None:
    old = await deployment.talk("hello", thread="T1")
    recent = await deployment.talk("hello too", thread="T2")
    await deployment.sessions.inject(old, "a note for the next turn")
    await deployment.redis.rpush(Keys.segments(old), json.dumps({"summary": "earlier"}))
    await deployment.sessions.note_side_answer(old, {"question": "q", "answer": "a"})
    await deployment.age(old, 31)

    result = await Retention(deployment.redis, 30 * DAY).prune()

    assert result == PruneResult(removed=1, kept=0)
    left = await deployment.left_of(old)
    assert all(":seen:" in key for key in left), left  # dedupe marks, which expire
    assert all(ttl > 0 for ttl in [await deployment.redis.ttl(key) for key in left])
    assert await deployment.redis.zscore(Keys.session_index(old), old) is None
    assert await deployment.redis.zrange(Keys.channel_sessions(CHANNEL), 0, -1) == [recent]
    assert len(await deployment.sessions.history(recent)) == 2

    await deployment.age(recent, 31)
    assert (await Retention(deployment.redis, 30 * DAY).prune()).removed == 1
    gone = (Keys.channel_sessions(CHANNEL), Keys.session_index(recent))
    assert not await deployment.redis.exists(*gone)


async def test_a_recently_active_session_is_kept(deployment: Deployment) -> None:
    key = await deployment.talk("hello")
    await deployment.age(key, 29)
    assert await Retention(deployment.redis, 30 * DAY).prune() == PruneResult(0, 0)
    assert len(await deployment.sessions.history(key)) == 2


async def test_a_turn_recorded_long_after_its_message_counts_as_activity(
    deployment: Deployment,
) -> None:
    await deployment.stop_workers()
    message = inbound("a question that takes long to answer")
    await deployment.sessions.append_user(message)
    key = message.session_key
    await deployment.age(key, 31)
    claim = await deployment.sessions.claim(key, "t1", 30)
    before = time.time()
    await deployment.sessions.finish(key, "t1", claim, {"id": "a", "role": "assistant"})
    assert await deployment.redis.zscore(Keys.session_index(key), key) >= before


async def _lease_held(deployment: Deployment, key: str) -> None:
    assert (await deployment.sessions.claim(key, "a-running-turn", 30)).ok


async def _job_owed(deployment: Deployment, key: str) -> None:
    await deployment.sessions.enqueue(inbound("/btw what was that?"), "side", {"question": "?"})


async def _message_queued(deployment: Deployment, key: str) -> None:
    await deployment.sessions.append_user(inbound("one more thing"))


async def _compressing(deployment: Deployment, key: str) -> None:
    assert await Lease(deployment.redis, Keys.compressing(key), 30).acquire()


@pytest.mark.parametrize(
    "make_busy",
    [_lease_held, _job_owed, _message_queued, _compressing],
    ids=["leased", "owed", "queued", "compressing"],
)
async def test_an_old_session_with_something_running_or_owed_is_kept(
    deployment: Deployment, make_busy: Any
) -> None:
    key = await deployment.talk("hello")
    await deployment.stop_workers()  # nothing takes the job or the message left below
    await make_busy(deployment, key)
    before = await deployment.left_of(key)
    await deployment.age(key, 31)

    assert await Retention(deployment.redis, 30 * DAY).prune() == PruneResult(0, 1)

    assert await deployment.left_of(key) == before
    assert await deployment.redis.zscore(Keys.session_index(key), key) is not None
    assert await deployment.redis.zrange(Keys.channel_sessions(CHANNEL), 0, -1) == [key]


async def test_a_session_that_comes_alive_between_finding_and_removing_is_kept(
    deployment: Deployment,
) -> None:
    key = await deployment.talk("hello")
    await deployment.age(key, 31)
    retention = Retention(deployment.redis, 30 * DAY)
    cutoff = await deployment.redis.zscore(Keys.session_index(key), key) + DAY
    assert await retention.idle_sessions(cutoff) == [key]

    # Answered in full meanwhile: nothing running, nothing owed, only newer.
    await deployment.talk("I am back")
    assert not await retention.prune_session(key, cutoff)

    assert [e["text"] for e in await deployment.sessions.history(key)][::2] == [
        "hello",
        "I am back",
    ]
    assert await deployment.redis.zscore(Keys.session_index(key), key) is not None
    assert await deployment.redis.zrange(Keys.channel_sessions(CHANNEL), 0, -1) == [key]


async def test_a_session_reset_since_it_was_found_is_kept(deployment: Deployment) -> None:
    key = await deployment.talk("hello")
    await deployment.age(key, 31)
    cutoff = await deployment.redis.zscore(Keys.session_index(key), key) + DAY
    await deployment.sessions.reset(key)  # a reset is activity too, though not in the index
    assert not await Retention(deployment.redis, 30 * DAY).prune_session(key, cutoff)
    assert await deployment.redis.exists(Keys.meta(key))


async def test_a_session_from_before_retention_existed_is_removed_from_its_channel_too(
    deployment: Deployment,
) -> None:
    key = await deployment.talk("hello", thread="T1")
    await deployment.redis.hdel(Keys.meta(key), "channel")  # not recorded by older versions
    await deployment.age(key, 31)
    assert (await Retention(deployment.redis, 30 * DAY).prune()).removed == 1
    assert not await deployment.redis.exists(Keys.channel_sessions(CHANNEL), Keys.meta(key))


async def test_a_strangers_refusal_leaves_nothing_behind_once_old(deployment: Deployment) -> None:
    key = await deployment.talk("hello?", user="U9", channel="C9")
    assert "not allowed" in "".join(deployment.sender.messages.values())
    await deployment.age(key, 31)
    assert (await Retention(deployment.redis, 30 * DAY).prune()).removed == 1
    assert all(":seen:" in k for k in await deployment.left_of(key))


async def _aged_idle_session(deployment: Deployment, text: str, channel: str) -> str:
    key = await deployment.talk(text, channel=channel)
    await deployment.age(key, 2)
    return key


async def test_of_two_workers_asking_at_once_one_prunes(deployment: Deployment) -> None:
    key = await _aged_idle_session(deployment, "hello", "C1")
    config = settings(str(deployment.config.redis_url), GATEWAY_SESSION_RETENTION_DAYS=1)
    pair = [Worker(config, deployment.redis, {"test": deployment.sender}) for _ in range(2)]
    asked = [w.retention.prune_if_due() for w in pair if w.retention is not None]

    results = await asyncio.gather(*asked)

    assert sorted(results, key=lambda r: r is not None) == [None, PruneResult(1, 0)]
    assert not await deployment.redis.exists(Keys.meta(key))


async def test_running_workers_prune_by_themselves_once_an_interval(deployment: Deployment) -> None:
    first = await _aged_idle_session(deployment, "hello", "C1")
    await deployment.stop_workers()
    pair = [await deployment.start_worker(GATEWAY_SESSION_RETENTION_DAYS=1) for _ in range(2)]
    async with asyncio.timeout(15):
        while await deployment.redis.exists(Keys.meta(first)):
            await asyncio.sleep(0.01)

    # This interval's run is done: neither worker runs another before it is over.
    second = await _aged_idle_session(deployment, "hello again", "C2")
    asked = [w.retention.prune_if_due() for w in pair if w.retention is not None]
    assert await asyncio.gather(*asked) == [None, None]
    assert await deployment.redis.exists(Keys.meta(second))
    assert 0 < await deployment.redis.ttl(Keys.PRUNE_LOCK) <= PRUNE_EVERY


async def gateway_command(redis_url: str, *args: str, **env: str) -> tuple[int, str, str]:
    """`gateway ARGS` as its own process, with only the given settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "REDIS_"))}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway.cli",
        *args,
        env={**clean, "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url, **shards_env(), **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return int(process.returncode or 0), out.decode(), err.decode()


async def test_gateway_sessions_prune_says_how_many_it_removed(
    deployment: Deployment, redis_url: str
) -> None:
    old = await deployment.talk("hello", channel="C1")
    recent = await deployment.talk("hello", channel="C2")
    await deployment.age(old, 31)
    await deployment.age(recent, 11)

    code, out, _ = await gateway_command(
        redis_url, "sessions", "prune", GATEWAY_SESSION_RETENTION_DAYS="30"
    )
    assert (code, out) == (0, "removed 1 session idle for more than 30 days\n")
    code, out, _ = await gateway_command(
        redis_url, "sessions", "prune", "--json", "--older-than", "10"
    )
    assert code == 0
    assert json.loads(out) == {"removed": 1, "kept": 0, "older_than_days": 10}
    assert not await deployment.redis.exists(Keys.meta(old), Keys.meta(recent))


async def test_gateway_sessions_prune_without_a_retention_names_the_setting(
    deployment: Deployment, redis_url: str
) -> None:
    key = await deployment.talk("hello")
    await deployment.age(key, 1000)
    code, out, err = await gateway_command(redis_url, "sessions", "prune")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "GATEWAY_SESSION_RETENTION_DAYS" in err
    assert await deployment.redis.exists(Keys.meta(key))


@pytest.mark.parametrize("value", ["0", "-3", "1.5", "ninety", ""])
def test_a_retention_that_is_not_a_whole_number_of_days_is_a_config_error(value: str) -> None:
    with pytest.raises(ConfigError, match=r"^GATEWAY_SESSION_RETENTION_DAYS: .*whole number"):
        load_settings(_env_file=None, GATEWAY_SESSION_RETENTION_DAYS=value)


async def test_retention_is_off_unless_set(redis_url: str, redis_client: aioredis.Redis) -> None:
    assert load_settings(_env_file=None).session_retention_days is None
    assert Worker(settings(redis_url), redis_client, {}).retention is None
    assert (
        load_settings(_env_file=None, GATEWAY_SESSION_RETENTION_DAYS="90").session_retention_days
        == 90
    )

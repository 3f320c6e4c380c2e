"""A job's life: touched while it runs whatever its kind, completed once, never stranded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.inbound.ingest import Ingest
from gateway.state.jobs import JobQueue
from gateway.state.keys import GROUP, Keys
from gateway.worker import Worker
from tests.fakes.llm_server import FakeLLM
from tests.support.clusters import cluster_shards
from tests.support.harness import Harness, start_workers
from tests.support.helpers import inbound, settings
from tests.support.recording_sender import RecordingSender
from tests.support.redis_servers import client_for, start_redis

STREAM = Keys.jobs("test", 0)


@pytest.fixture
async def slow_ttl(redis_url: str, llm: FakeLLM) -> AsyncIterator[Harness]:
    """A worker whose lease TTL (30 s) is far longer than anything a test waits for."""
    async with start_workers(redis_url, llm, 1, GATEWAY_LEASE_TTL=30.0) as h:
        yield h


async def test_a_side_question_slower_than_the_reclaim_time_is_answered_once(
    harness: Harness,
) -> None:
    # Lease TTL 1 s: a job idle for 2 s is reclaimed. The side model takes 4 s.
    harness.llm.set_model_behaviour("openai/side-model", reply="the side answer", delay=4.0)
    question = inbound("/btw what was decided?")
    await harness.ingest.receive(question)
    await harness.idle(question.session_key, timeout=45)
    answers = [c for c in harness.sender.calls if "the side answer" in c.text]
    assert len(answers) == 1
    assert len(harness.llm.requests_for("side-model")) == 1


async def test_a_notice_waiting_out_a_long_rate_limit_is_sent_once(harness: Harness) -> None:
    harness.sender.rate_limit_next = [4.0]  # the platform asks for 4 s, twice the reclaim time
    message = inbound("/help")
    await harness.ingest.receive(message)
    await harness.idle(message.session_key, timeout=20)
    helps = [c for c in harness.sender.calls if c.op == "send" and "/btw" in c.text]
    assert len(helps) == 1


async def test_a_turn_whose_lease_expired_unnoticed_still_records_its_reply(
    slow_ttl: Harness,
) -> None:
    h = slow_ttl
    h.llm.reply = "a reply that outlives its lease"
    h.llm.duration = 1.0
    message = inbound("hello")
    await h.ingest.receive(message)
    await h.sender.wait_for(lambda: h.sender.messages)
    # The lease runs out (as after a stalled event loop) with nobody taking it, and
    # the turn ends before its next heartbeat could notice.
    await h.sessions.redis.delete(Keys.lease(message.session_key))
    await h.idle(message.session_key, timeout=20)
    history = await h.history(message.session_key)
    assert [e["role"] for e in history] == ["user", "assistant"]
    assert (await h.sessions.meta(message.session_key))["answered"] == "2"


async def test_a_turn_that_cannot_record_leaves_its_job_pending(slow_ttl: Harness) -> None:
    h = slow_ttl
    h.llm.duration = 1.0
    message = inbound("hello")
    await h.ingest.receive(message)
    await h.sender.wait_for(lambda: h.sender.messages)
    # Someone else claimed the session (the lease expired and another run took it).
    await h.sessions.redis.set(Keys.lease(message.session_key), "another-holder", px=60_000)
    await h.llm.await_requests(1)

    async def pending() -> int:
        return int((await h.sessions.redis.xpending(STREAM, GROUP))["pending"])

    async def run_over() -> bool:
        """The first run has ended: no task left, or its job already taken again by the
        reclaim loop (which waits on the other holder's lease)."""
        if h.llm.requests[0].duration is None:
            return False
        entries = await h.sessions.redis.xpending_range(STREAM, GROUP, "-", "+", 1)
        return not h.workers[0].tasks or bool(entries and entries[0]["times_delivered"] > 1)

    async with asyncio.timeout(20):
        while not await run_over():
            await asyncio.sleep(0.05)
    assert await pending() == 1  # left for a re-run, not acknowledged
    assert await h.sessions.owed(message.session_key) == 1
    assert [e["role"] for e in await h.history(message.session_key)] == ["user"]


async def test_a_job_read_but_never_started_runs_without_waiting_for_reclaim(
    redis_url: str, llm: FakeLLM
) -> None:
    config = settings(
        redis_url,
        GATEWAY_MODEL="openai/main-model",
        GATEWAY_API_BASE=llm.api_base,
        GATEWAY_API_KEY="sk-test-key",
        GATEWAY_LEASE_TTL=30.0,
    )
    redis = client_for(redis_url)
    worker = Worker(config, redis, {"test": RecordingSender()})
    await worker.queue.ensure_groups()
    message = inbound("hello")
    await Ingest(config, redis).receive(message)
    # The job reached this worker's name, but the read's answer never arrived (a
    # dropped connection): it is pending under it, and a reclaim would wait 45 s.
    assert await redis.xreadgroup(GROUP, worker.queue.consumer, {STREAM: ">"}, count=10)
    stop = asyncio.Event()
    run = asyncio.create_task(worker.run(stop))
    try:
        async with asyncio.timeout(15):
            while await worker.sessions.owed(message.session_key):
                await asyncio.sleep(0.05)
        roles = [e["role"] for e in await worker.sessions.history(message.session_key)]
        assert roles == ["user", "assistant"]
    finally:
        stop.set()
        await run
        await redis.aclose()


async def _left_by_dead_worker(redis: aioredis.Redis, text: str, live: int = 0) -> str:
    """A notice job pending under a worker that died a minute ago, behind `live` jobs
    that a live worker has just read. One transaction: a running worker's blocked
    read is served only after it, so it gets none of them."""
    address = {"platform": "test", "workspace": "W", "channel": "C-left"}
    payload = json.dumps({"address": address, "text": text})
    async with redis.pipeline(transaction=True) as pipe:
        for n in range(live):
            pipe.xadd(STREAM, {"kind": "notice", "session": f"test:W:live{n}", "payload": ""})
        pipe.xadd(STREAM, {"kind": "notice", "session": "test:W:C-left", "payload": payload})
        if live:
            pipe.xreadgroup(GROUP, "live-worker", {STREAM: ">"}, count=live)
        pipe.xreadgroup(GROUP, "dead-worker", {STREAM: ">"}, count=1)
        results = await pipe.execute()
    job_id = str(results[live])
    await redis.xclaim(STREAM, GROUP, "dead-worker", 0, [job_id], idle=60_000)
    return job_id


async def _sent(h: Harness, text: str) -> int:
    return sum(1 for c in h.sender.calls if c.op == "send" and c.text == text)


async def test_reclaim_reaches_idle_jobs_behind_many_live_ones(harness: Harness) -> None:
    redis = harness.sessions.redis
    await _left_by_dead_worker(redis, "left behind", live=250)

    async def keep_live_touched() -> None:
        ids = [
            e["message_id"]
            for e in await redis.xpending_range(
                STREAM, GROUP, "-", "+", 300, consumername="live-worker"
            )
        ]
        while True:
            await redis.xclaim(STREAM, GROUP, "live-worker", 0, ids, justid=True)
            await asyncio.sleep(0.3)

    toucher = asyncio.create_task(keep_live_touched())
    try:
        await harness.sender.wait_for(
            lambda: any(c.text == "left behind" for c in harness.sender.calls), timeout=20
        )
    finally:
        toucher.cancel()
    assert await _sent(harness, "left behind") == 1


@pytest.fixture
async def one_slot(redis_url: str, llm: FakeLLM) -> AsyncIterator[Harness]:
    async with start_workers(redis_url, llm, 1, GATEWAY_WORKER_CONCURRENCY=1) as h:
        yield h


async def test_a_busy_worker_claims_no_job_it_cannot_start(one_slot: Harness) -> None:
    h, llm = one_slot, one_slot.llm
    llm.duration = 6.0
    redis = h.sessions.redis
    await h.ingest.receive(inbound("keep the only slot busy", channel="C-busy"))
    await llm.await_requests(1)
    job_id = await _left_by_dead_worker(redis, "left behind")
    # Reclaim rounds come every second; none may claim it while the only slot is
    # busy, whoever else could run it meanwhile.
    busy_request = llm.requests[0]
    while busy_request.duration is None:
        owner = (await redis.xpending_range(STREAM, GROUP, job_id, job_id, 1))[0]
        assert owner["consumer"] == "dead-worker", "claimed while it had no slot to run it"
        await asyncio.sleep(0.1)
    await h.sender.wait_for(
        lambda: any(c.text == "left behind" for c in h.sender.calls), timeout=20
    )  # and run once the slot is free


async def test_a_job_found_twice_runs_once(redis_url: str, llm: FakeLLM) -> None:
    config = settings(redis_url)
    redis = client_for(redis_url)
    sender = RecordingSender()
    worker = Worker(config, redis, {"test": sender})
    await worker.queue.ensure_groups()
    job_id = await _left_by_dead_worker(redis, "found twice")
    (job,) = await worker.queue.reclaim(0, 1)
    assert job.id == job_id
    worker._start(job, slot_taken=False)  # by a reclaim round
    worker._start(job, slot_taken=False)  # and by the check for unstarted jobs
    await asyncio.gather(*worker.tasks)
    await redis.aclose()
    assert await _sent_calls(sender, "found twice") == 1


async def _sent_calls(sender: RecordingSender, text: str) -> int:
    return sum(1 for c in sender.calls if c.op == "send" and c.text == text)


async def test_the_check_for_unstarted_jobs_does_not_count_running_ones_as_delivered(
    redis_client: aioredis.Redis,
) -> None:
    """An idle worker looks for unstarted jobs every second; a job it is running is not
    delivered again by that look, or a long turn (one waiting out a Redis restart) would
    be given up as failed the next time it is reclaimed."""
    queue = JobQueue(redis_client, ["test"])
    await queue.ensure_groups()
    running_id = await redis_client.xadd(STREAM, {"kind": "notice", "session": "s", "payload": ""})
    (job,) = await queue.read(count=1, block_ms=100)
    for _ in range(6):
        assert await queue.unstarted({job.key}, 1) == []
    (row,) = await redis_client.xpending_range(STREAM, GROUP, "-", "+", 10)
    assert row["message_id"] == running_id and row["times_delivered"] == 1
    queue.mark([STREAM])
    assert await queue.read(count=1, block_ms=100) == []  # the job's answer lost
    (again,) = await queue.unstarted(set(), 1)  # not running after all: delivered once more
    assert again.id == running_id and again.deliveries == 2


async def _idle_commands_per_second(shard_count: int, seconds: float) -> float:
    """The commands an idle worker sends its own redis-server per second, with reclaim
    rounds every second (a lease TTL of 1 s: rounds every min(2 s, 1.5 TTL) / 2)."""
    process, url = start_redis()
    try:
        with cluster_shards(shard_count):
            client = client_for(url)
            await _until_answers(client)
            config = settings(url, GATEWAY_LEASE_TTL="1", GATEWAY_MODEL_PROCESSES="0")
            worker = Worker(config, client, {"test": RecordingSender()})
            stop = asyncio.Event()
            run = asyncio.create_task(worker.run(stop))
            await worker.ready.wait()
            await asyncio.sleep(1.5)  # the start's reads of every stream are over
            before = await _commands(client)
            await asyncio.sleep(seconds)
            sent = await _commands(client) - before - 1  # less the first INFO
            stop.set()
            await run
            await client.aclose()
        return sent / seconds
    finally:
        process.terminate()
        process.wait()


async def _until_answers(client: aioredis.Redis) -> None:
    for _ in range(200):
        try:
            await client.ping()
            return
        except RedisConnectionError:
            await asyncio.sleep(0.02)


async def _commands(client: aioredis.Redis) -> int:
    stats = await client.info("commandstats")
    return sum(int(found["calls"]) for found in stats.values())


async def test_an_idle_workers_commands_do_not_grow_with_the_shards() -> None:
    """With four times the shards, an idle worker sends no more: it waits on one
    subscription, and each reclaim round looks at SWEEP_STREAMS streams whatever their
    number (measured: 31 commands a second at 16 shards and at 64, 19 at 4, with a
    round every second; at the default lease TTL a round comes every 22.5 s)."""
    at_16 = await _idle_commands_per_second(16, 3.0)
    at_64 = await _idle_commands_per_second(64, 3.0)
    assert at_64 <= at_16 * 1.25 + 2, (at_16, at_64)
    assert at_16 < 40, at_16

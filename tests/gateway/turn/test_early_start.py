"""Early starts: a turn's model call sent while its claim is on the way
(gateway.turn.early_start)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.context.compression import Compressor
from gateway.inbound.ingest import Ingest
from gateway.models import Models
from gateway.state.jobs import JobQueue
from gateway.state.keys import Keys
from gateway.state.session import HistoryView, SessionStore
from gateway.turn.early_start import ENTRY_BYTES, RecentViews
from gateway.worker import Worker
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import Harness, start_workers
from tests.support.helpers import inbound, settings
from tests.support.recording_sender import RecordingSender
from tests.support.redis_servers import client_for


@pytest.fixture
async def harness(redis_url: str, llm: FakeLLM) -> AsyncIterator[Harness]:
    async with start_workers(redis_url, llm, 1) as h:
        yield h


def early_counts_in(metrics: dict[str, str]) -> dict[str, int]:
    return {k.partition("|")[2]: int(v) for k, v in metrics.items() if k.startswith("early|")}


async def early_counts(harness: Harness) -> dict[str, int]:
    return early_counts_in(await harness.metrics())


async def unstarted_worker(
    client: aioredis.Redis, redis_url: str, llm: FakeLLM
) -> tuple[Worker, RecordingSender]:
    """A worker ready to run jobs handed to it (its read loop is not running)."""
    config = settings(
        redis_url,
        GATEWAY_MODEL="openai/main-model",
        GATEWAY_API_BASE=llm.api_base,
        GATEWAY_API_KEY="sk-test-key",
    )
    sender = RecordingSender()
    worker = Worker(config, client, {"test": sender})
    await worker.queue.ensure_groups()
    await worker.turns.compressor.warm()
    await worker.turns.scoped.load()
    return worker, sender


async def say(harness: Harness, text: str, channel: str = "C1") -> str:
    message = inbound(text, channel=channel)
    await harness.ingest.receive(message)
    await harness.idle(message.session_key)
    return message.session_key


async def test_each_turn_of_a_conversation_starts_its_call_early_and_keeps_it(
    harness: Harness,
) -> None:
    harness.llm.reply = "noted"
    for text in ("one", "two", "three"):
        key = await say(harness, text)
    assert await early_counts(harness) == {"used": 3}
    # One request per turn (none thrown away), each with the whole conversation so far.
    requests = harness.llm.requests
    assert len(requests) == 3
    said = [m["content"] for m in requests[-1]["messages"] if m["role"] != "system"]
    assert said[1:4] == ["noted", "two", "noted"]
    assert "three" in said[-1]
    history = await harness.history(key)
    assert [e["text"] for e in history] == ["one", "noted", "two", "noted", "three", "noted"]
    assert list(harness.sender.messages.values()) == ["noted"] * 3


async def test_a_message_sent_while_its_session_changed_elsewhere_is_not_started_early(
    harness: Harness,
) -> None:
    """Another worker's turn moves the history on: the job's base no longer matches."""
    key = await say(harness, "one")
    await harness.sessions.redis.rpush(
        Keys.history(key), '{"id": "x1", "role": "assistant", "text": "written elsewhere"}'
    )
    await say(harness, "two")
    assert await early_counts(harness) == {"used": 1}  # the first turn only
    assert "written elsewhere" in str(harness.llm.requests[-1]["messages"])


async def test_an_early_call_from_a_view_compressed_elsewhere_is_replaced(
    harness: Harness, redis_url: str
) -> None:
    """Another worker compresses between turns: the history's length stays, its view does
    not. The early call is cancelled and the turn is sent again from the real snapshot."""
    harness.llm.reply = "noted"
    for number in range(4):
        key = await say(harness, f"message {number}")
    client = client_for(redis_url)
    try:
        config = harness.workers[0].settings
        other = Compressor(config, client, Models.for_settings(config))
        answered = int((await harness.sessions.meta(key))["answered"])
        assert (await other.compress(key, answered)).name in ("SUMMARISED", "FALLBACK")
    finally:
        await client.aclose()
    seen = len(harness.llm.requests)
    await say(harness, "message 4")
    assert await early_counts(harness) == {"used": 4, "discarded": 1}
    last = harness.llm.requests[-1]["messages"]
    assert "message 0" not in str(last)  # summarised away: the real view was sent
    # The real call, and the early one if it got out before it was cancelled.
    assert len(harness.llm.requests) - seen in (1, 2)
    assert list(harness.sender.messages.values()).count("noted") == 5
    assert [e["text"] for e in await harness.history(key)].count("noted") == 5


async def test_an_early_call_waits_for_nothing_and_shows_nothing_while_another_turn_runs(
    redis_url: str, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """The lease is taken between the job's enqueue and its claim: the early call is
    cancelled at once, nothing reaches the chat, and the turn runs once the lease is free."""
    caplog.set_level(logging.INFO, logger="gateway.turn.claims")
    client = client_for(redis_url)
    worker, sender = await unstarted_worker(client, redis_url, llm)
    config = worker.settings
    listening = await waiting_for_jobs(worker.queue)
    reading = asyncio.create_task(worker.queue.read(count=1, block_ms=10_000))
    message = inbound("hello")
    key = message.session_key
    await Ingest(config, client).receive(message)
    [job] = await reading
    assert job.fresh and job.payload["base"] == "0.0"
    await client.set(Keys.lease(key), "another-worker", px=30_000)
    llm.reply = "hi there"
    turn = asyncio.create_task(worker.turns.run(job))
    async with asyncio.timeout(10):
        while not any("cancelled its early model call" in r.getMessage() for r in caplog.records):
            await asyncio.sleep(0.01)
    assert sender.calls == [] and sender.thinking_calls == []
    await client.delete(Keys.lease(key))
    await asyncio.wait_for(turn, 10)
    assert list(sender.messages.values()) == ["hi there"]
    await worker.metrics.flush()  # what the worker gathered, written now
    assert dict(early_counts_in(await client.hgetall(Keys.METRICS))) == {"discarded": 1}
    assert [e["text"] for e in await SessionStore(client).history(key)] == ["hello", "hi there"]
    await worker.models.metered()  # the turn's usage write, which `turns.run` leaves going
    listening.cancel()
    await client.aclose()


async def test_a_job_read_from_a_backlog_is_not_started_early(redis_url: str, llm: FakeLLM) -> None:
    """Messages queued before any worker reads them may be several in one turn: the first
    one's job says nothing of the others, so its turn waits for the claim."""
    client = client_for(redis_url)
    ingest = Ingest(settings(redis_url), client)
    for text in ("one", "two", "three"):
        await ingest.receive(inbound(text))
    llm.reply = "all three"
    async with start_workers(redis_url, llm, 1) as worker:
        await worker.idle(inbound("x").session_key)
        [request] = llm.requests
        assert "three" in str(request["messages"][-1])
        assert await early_counts(worker) == {}
    await client.aclose()


def test_the_views_kept_are_bounded_by_sessions_and_by_their_size() -> None:
    def view(chars: int, entries: int = 1) -> HistoryView:
        return HistoryView({}, [], 0, [{"id": "e", "role": "user", "text": "x" * chars}] * entries)

    small = 10 + ENTRY_BYTES
    recent = RecentViews(size=3, held=3 * small)
    for number in range(5):
        recent.remember(f"s{number}", "0.1", view(10))
    assert len(recent) == 3 and recent.get("s0", "0.1") is None and recent.get("s4", "0.1")
    assert recent.get("s4", "0.2") is None  # another base: never this view
    recent.remember("big", "0.1", view(95))  # pushes the oldest out by its size
    assert len(recent) == 2 and recent.get("big", "0.1") is not None
    recent.remember("huge", "0.1", view(3 * small - ENTRY_BYTES + 1))  # over the bound
    assert recent.get("huge", "0.1") is None and recent.get("big", "0.1") is not None
    recent.remember("long", "0.1", view(0, entries=4))  # empty texts still cost their entries
    assert recent.get("long", "0.1") is None
    assert recent.get("new", "3.0") == HistoryView({}, [], 0, [])  # an empty history


async def test_a_job_is_fresh_by_the_redis_clock_whatever_this_machines_says(
    redis_url: str,
) -> None:
    """Job ids carry the Redis server's clock; a stream's wait is stamped on this machine's
    clock corrected by the offset the worker measured. A job that came before the worker
    waited on its stream (a backlog) is not fresh; one that came while it waited is.
    With a wrong offset (here one pretending this machine runs 5 s behind) the wait
    seems to start later, and a job that came while it waited passes for a backlog."""
    from gateway.state.jobs import JobQueue

    client = client_for(redis_url)
    ingest = Ingest(settings(redis_url), client)
    await ingest.receive(inbound("queued before the worker started"))
    await asyncio.sleep(0.01)  # the worker starts a few ms of the clock after the enqueue
    queue = JobQueue(client, ["test"])
    await queue.ensure_groups()
    assert abs(queue.clock_offset) < 0.25 and queue.clock_error < 0.25  # one machine
    [job] = await queue.read(count=2, block_ms=100)
    assert not job.fresh  # a backlog: the stream is drained now, and waited on
    await asyncio.sleep(0.01 + queue.clock_error)
    await ingest.receive(inbound("queued while it waited", channel="C2"))
    queue.mark(queue.streams)
    [job] = await queue.read(count=2, block_ms=100)
    assert job.fresh
    queue.clock_offset += 5.0  # as if this machine ran 5 s behind: the wait starts "later"
    queue.mark(queue.streams)
    assert await queue.read(count=2, block_ms=100) == []  # the wait, stamped 5 s ahead
    await ingest.receive(inbound("queued while it waited, by a wrong clock", channel="C3"))
    queue.mark(queue.streams)
    [job] = await queue.read(count=2, block_ms=100)
    assert not job.fresh
    await client.aclose()


async def test_a_job_whose_early_payload_is_malformed_is_answered_as_usual(
    redis_url: str, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    client = client_for(redis_url)
    worker, sender = await unstarted_worker(client, redis_url, llm)
    config = worker.settings
    message = inbound("hello")
    await Ingest(config, client).receive(message)
    [job] = await worker.queue.read(count=1, block_ms=1000)
    forged = dataclasses.replace(
        job, fresh=True, payload={"base": "0.0", "entry": {"reply": {"platform": ["no"]}}}
    )
    llm.reply = "hi there"
    await asyncio.wait_for(worker.turns.run(forged), 10)
    assert list(sender.messages.values()) == ["hi there"]
    assert any("no early start" in r.getMessage() for r in caplog.records)
    await worker.models.metered()
    await client.aclose()


async def test_a_slow_clock_measure_does_not_make_a_new_job_stale(redis_url: str) -> None:
    """A measure whose round trip stalled may put the server's clock up to half that
    trip ahead of where it is: a job that arrives while the read waits is still fresh."""
    from gateway.state.jobs import JobQueue

    client = client_for(redis_url)
    queue = JobQueue(client, ["test"])
    await queue.ensure_groups()
    # As measured over a 400 ms round trip answered at its very end.
    queue.clock_offset, queue.clock_error = queue.clock_offset + 0.2, 0.2
    listening = await waiting_for_jobs(queue)
    reading = asyncio.create_task(queue.read(count=1, block_ms=5_000))
    await Ingest(settings(redis_url), client).receive(inbound("arrives during the read"))
    [job] = await reading
    assert job.fresh
    listening.cancel()
    await client.aclose()


async def waiting_for_jobs(queue: JobQueue) -> asyncio.Task[None]:
    """`queue` listening for its doorbell, every stream read once: the next read waits
    for a job to be added. The listening task, to cancel."""
    listening = asyncio.create_task(queue.listen())
    await asyncio.wait_for(queue.listening.wait(), 10)
    assert await queue.read(count=1, block_ms=100) == []
    return listening

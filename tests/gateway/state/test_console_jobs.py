"""The console runs' job streams in a real Redis: a run that is gone leaves its jobs, and
its session's queued-turn marker, to the next run; a live run's are left alone."""

from __future__ import annotations

import redis.asyncio as aioredis

from adapters import console
from gateway.inbound.ingest import Ingest
from gateway.state.console_jobs import ConsoleJobs
from gateway.state.keys import Keys
from tests.support.helpers import settings

SESSION = console.SESSION_KEY


async def _typed(redis_url: str, client: aioredis.Redis, jobs: ConsoleJobs, text: str) -> None:
    """A line typed into the console run that reads `jobs`' stream."""
    ingest = Ingest(settings(redis_url), client, {"console": jobs.stream})
    await ingest.receive(console.message(text, 1, "me"))


async def _marker(client: aioredis.Redis) -> str:
    return str(await client.get(Keys.queued(SESSION)))


async def test_a_live_runs_jobs_stay_and_an_ended_ones_move_with_the_queued_marker(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    first, second = ConsoleJobs(redis_client, SESSION), ConsoleJobs(redis_client, SESSION)
    await first.register()
    await _typed(redis_url, redis_client, first, "one")
    (job,) = await redis_client.xrange(first.stream)
    await second.register()
    assert await redis_client.xlen(first.stream) == 1  # alive: nothing taken
    assert not await second.settled()  # "one" is owed, in the other run's stream

    assert await first.release() == 1  # it ends with "one" unanswered
    assert await second.adopt() == 1
    assert not await redis_client.exists(first.stream)
    assert await redis_client.zrange(Keys.consoles(SESSION), 0, -1) == [second.stream]
    ((moved_id, fields),) = await redis_client.xrange(second.stream)
    assert fields == job[1]
    assert await _marker(redis_client) == f"{second.stream} {moved_id}"

    await _typed(redis_url, redis_client, second, "two")  # joins the queued turn it moved
    assert await redis_client.xlen(second.stream) == 1


async def test_a_stream_nobody_registered_is_taken_over_when_the_marker_names_it(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    """What a run of an earlier version left: its stream, no entry in the registry."""
    earlier = ConsoleJobs(redis_client, SESSION)
    await _typed(redis_url, redis_client, earlier, "one")
    now = ConsoleJobs(redis_client, SESSION)
    await now.register()
    assert not await redis_client.exists(earlier.stream)
    assert (await _marker(redis_client)).startswith(f"{now.stream} ")
    assert await redis_client.xlen(now.stream) == 1


async def test_a_run_that_ends_with_nothing_owed_leaves_nothing(
    redis_client: aioredis.Redis,
) -> None:
    jobs = ConsoleJobs(redis_client, SESSION)
    await jobs.register()
    assert await jobs.settled()
    assert await jobs.release() == 0
    assert await redis_client.exists(Keys.consoles(SESSION), jobs.stream) == 0

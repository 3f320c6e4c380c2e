"""The gateway on a Sentinel-watched primary: the core's tests and Telegram's end-to-end
ones run here again with `REDIS_URL=redis+sentinel://...` (the imported tests are
collected in this module, where `redis_url` names the Sentinel set); the doctor's
report; acknowledgements that wait for the replica.

The set (tests/support/sentinel.py) is started once, by the xdist worker that runs
this file, the first time a test here asks for it.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncIterator

import pytest
import redis
import redis.asyncio as aioredis

from gateway.cli.doctor_redis import doctor_redis
from gateway.inbound.ingest import Ingest, Receipt
from gateway.messages import Inbound
from gateway.state import connection, keys
from gateway.state.connection import RedisOptions
from gateway.state.keys import Keys
from gateway.state.replicas import NotReplicated, ReplicaWait
from tests.adapters.flows.test_telegram_e2e import (  # noqa: F401  (collected here)
    test_private_message_is_answered,
    test_the_same_update_twice_gets_one_reply,
    web,
)
from tests.fakes.llm_server import FakeLLM
from tests.gateway.inbound.test_ingest import (  # noqa: F401  (collected here)
    test_a_retried_command_acts_once,
    test_the_same_event_twice_is_answered_once,
)
from tests.gateway.state.test_session import (  # noqa: F401  (collected here)
    test_a_claim_moves_the_inbox_into_the_history_and_holds_out_another_token,
    test_a_finished_turn_is_recorded_once_and_moves_the_answered_mark,
)
from tests.gateway.test_worker import (  # noqa: F401  (collected here)
    test_a_message_gets_a_streamed_reply_recorded_once,
    test_invariant_holds_with_two_workers_and_messages_landing_as_turns_end,
)
from tests.support.harness import start_workers, texts
from tests.support.helpers import inbound, settings
from tests.support.sentinel import SentinelSet

pytestmark = pytest.mark.timeout(150)

_dbs = itertools.cycle(range(1, 16))


@pytest.fixture
def redis_url(sentinel_set: SentinelSet) -> str:
    """A database of its own on the Sentinel set's primary, emptied first."""
    db = next(_dbs)
    primary = sentinel_set.primary_port()
    assert primary is not None
    client = redis.Redis(port=primary, db=db)
    client.flushdb()
    client.close()
    return f"{sentinel_set.url}/{db}"


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = keys.connect(redis_url)
    yield client
    await client.aclose()


async def test_doctor_names_the_mode_the_primary_its_replica_and_the_sentinels(
    redis_url: str, sentinel_set: SentinelSet
) -> None:
    rows = await doctor_redis(settings(redis_url))
    assert [(name, ok) for name, ok, _ in rows] == [("redis", True), ("scripts", True)]
    nodes = rows[0][2]
    primary, replica = sentinel_set.primary_port(), sentinel_set.replica_port()
    assert nodes.startswith(f"sentinel: 127.0.0.1:{primary} primary, 127.0.0.1:{replica} replica")
    assert nodes.endswith("3 of 3 sentinels answer")
    assert rows[1][2].endswith("load on each of 1 primary")


def _stall_replica(sentinel_set: SentinelSet, seconds: float) -> threading.Thread:
    """The replica busy for `seconds` (DEBUG SLEEP): it applies and acknowledges nothing."""
    replica = sentinel_set.replica_port()

    def sleep() -> None:
        client = redis.Redis(port=replica, socket_timeout=seconds + 5)
        client.execute_command("DEBUG", "SLEEP", seconds)
        client.close()

    thread = threading.Thread(target=sleep)
    thread.start()
    time.sleep(0.05)  # DEBUG SLEEP under way
    return thread


async def _receive(redis_url: str, message: Inbound, **values: object) -> tuple[Receipt, float]:
    client = keys.connect(redis_url)
    try:
        ingest = Ingest(settings(redis_url, **values), client)
        started = time.monotonic()
        receipt = await ingest.receive(message)
        return receipt, time.monotonic() - started
    finally:
        await client.aclose()


async def test_with_the_wait_on_an_event_is_acknowledged_once_the_replica_has_it(
    redis_url: str, sentinel_set: SentinelSet
) -> None:
    db = int(redis_url.rsplit("/", 1)[1])
    stalled = _stall_replica(sentinel_set, 0.5)
    message = inbound("hello")
    receipt, took = await _receive(redis_url, message, GATEWAY_REDIS_WAIT_REPLICAS=1)
    stalled.join()
    assert receipt is Receipt.QUEUED
    assert took > 0.3  # it waited for the replica to wake and take the write
    replica = redis.Redis(port=sentinel_set.replica_port(), db=db)
    assert replica.exists(Keys.meta(message.session_key))
    replica.close()


async def test_without_the_wait_an_event_is_acknowledged_with_the_replica_behind(
    redis_url: str, sentinel_set: SentinelSet
) -> None:
    stalled = _stall_replica(sentinel_set, 0.5)
    receipt, took = await _receive(redis_url, inbound("hello"))
    stalled.join()
    assert receipt is Receipt.QUEUED
    assert took < 0.3


async def test_fewer_replicas_than_asked_is_an_outage_and_the_retry_waits_again(
    redis_url: str,
) -> None:
    wanting_two = {"GATEWAY_REDIS_WAIT_REPLICAS": 2, "GATEWAY_REDIS_WAIT_TIMEOUT": 0.2}
    message = inbound("hello")
    with pytest.raises(NotReplicated, match="1 of 2 replicas"):
        await _receive(redis_url, message, **wanting_two)
    with pytest.raises(NotReplicated):  # the redelivery finds it stored, and waits again
        await _receive(redis_url, message, **wanting_two)
    receipt, _ = await _receive(redis_url, message, GATEWAY_REDIS_WAIT_REPLICAS=1)
    assert receipt is Receipt.DUPLICATE


async def test_a_wait_answered_by_a_primary_without_the_event_does_not_acknowledge_it(
    redis_client: aioredis.Redis,
) -> None:
    """What a WAIT repeated on the new primary after a failover meets: its replica has
    everything that primary wrote, and the event was written on the old one, now gone."""
    session = inbound("hello").session_key
    wait = ReplicaWait(redis_client, 1, 1.0)
    with pytest.raises(NotReplicated, match="not on the primary"):
        await wait.confirm(Keys.meta(session), Keys.seen(session, "written-elsewhere"))
    await redis_client.set(Keys.seen(session, "written-here"), "1")
    await wait.confirm(Keys.meta(session), Keys.seen(session, "written-here"))


async def test_with_the_wait_on_a_turn_posts_only_once_the_replica_has_its_claim(
    redis_url: str, sentinel_set: SentinelSet, llm: FakeLLM
) -> None:
    """A claim the replica does not have yet could vanish in a failover, and the turn's
    re-run would not know it is one: nothing is posted until the replica has it."""
    llm.reply = "Hello back."
    waits = {"GATEWAY_REDIS_WAIT_REPLICAS": 1, "GATEWAY_REDIS_WAIT_TIMEOUT": 0.1}
    async with start_workers(redis_url, llm, 1, **waits) as h:
        stalled_at = time.monotonic()
        stalled = _stall_replica(sentinel_set, 1.5)
        message = inbound("hello")
        await _receive(redis_url, message)  # stored with the replica asleep (no wait)
        await h.idle(message.session_key)
        posted_after = time.monotonic() - stalled_at
        stalled.join()
        assert texts(h.sender) == ["Hello back."]
        assert posted_after > 1.4  # it waited for the replica to wake (0.6 s without)


async def test_a_turn_short_of_replicas_posts_nothing_and_stays_owed(
    redis_url: str, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    llm.reply = "Hello back."
    wanting_two = {
        "GATEWAY_REDIS_WAIT_REPLICAS": 2,
        "GATEWAY_REDIS_WAIT_TIMEOUT": 0.05,
        "GATEWAY_REDIS_RETRY_SECONDS": 0.3,
    }
    async with start_workers(redis_url, llm, 1, **wanting_two) as h:
        message = inbound("hello")
        await _receive(redis_url, message)  # stored by an ingest that does not wait
        async with asyncio.timeout(15):
            while not any("1 of 2 replicas after" in r.message for r in caplog.records):
                await asyncio.sleep(0.02)
        async with asyncio.timeout(15):  # the run gives up its delivery: left pending
            while h.workers[0].running_jobs:
                await asyncio.sleep(0.02)
        assert texts(h.sender) == []
        assert await h.sessions.owed(message.session_key) > 0


async def test_after_a_failover_a_connection_is_made_again_to_the_new_primary(
    redis_url: str, sentinel_set: SentinelSet
) -> None:
    """A connection that dropped under a command is made again to the primary the
    sentinels name now, not to the address it had: the old primary, back from a crash,
    is empty and a primary for seconds before the sentinels demote it, and what it
    takes meanwhile is lost."""
    db = int(redis_url.rsplit("/", 1)[1])
    client = connection.connect(redis_url, RedisOptions(retry_seconds=15))
    one = client.client()  # one connection for both commands, as a worker's WAIT and write
    old = sentinel_set.primary_port()
    assert old is not None
    try:
        await one.set("before", "1")
        stalled = _stall_replica(sentinel_set, 2.0)  # WAIT stays in flight
        waiting = asyncio.create_task(one.execute_command("WAIT", 1, 1500))
        await asyncio.sleep(0.1)  # WAIT sent
        sentinel_set.kill(old)
        async with asyncio.timeout(30):
            while sentinel_set.primary_port() in (old, None):
                await asyncio.sleep(0.05)
        new = sentinel_set.primary_port()
        sentinel_set.restart(old)  # back, empty, and a primary until the sentinels see it
        await waiting  # repeated after the drop, on the connection made again
        await one.set("after", "1")
        stalled.join()
        on_new = redis.Redis(port=new, db=db)
        assert on_new.get("after") == b"1"
        on_new.close()
    finally:
        await one.aclose()
        await client.aclose()
        await asyncio.to_thread(sentinel_set.wait_ready, 60)

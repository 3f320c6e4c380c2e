"""gateway.state.lease against a real Redis: the heartbeat renews, notices a stolen key, and
stays quiet about a key a script gave up (a turn's finish releases its own lease)."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis.asyncio as aioredis

from gateway.state.lease import Lease

TTL = 0.3  # beats every 0.1 s
BEATS = 4 * TTL  # long enough for several beats: the control test shows one is seen


async def test_a_kept_lease_outlives_its_ttl(redis_client: aioredis.Redis) -> None:
    lease = Lease(redis_client, "test:lease:kept", TTL)
    assert await lease.acquire()
    async with lease.kept():
        await asyncio.sleep(BEATS)
        assert await redis_client.get(lease.key) == lease.token
    assert not lease.lost.is_set()
    assert await redis_client.exists(lease.key) == 0  # released on the way out


async def test_a_key_taken_by_another_owner_is_found_lost(redis_client: aioredis.Redis) -> None:
    lease = Lease(redis_client, "test:lease:stolen", TTL)
    assert await lease.acquire()
    async with lease.kept():
        await redis_client.set(lease.key, "someone-else", px=10_000)
        await asyncio.wait_for(lease.lost.wait(), 5)
    assert await redis_client.get(lease.key) == "someone-else"  # not released: not ours


@pytest.mark.parametrize("marked", [True, False])
async def test_a_lease_a_script_released_is_not_reported_lost(
    redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture, marked: bool
) -> None:
    """With the mark, nothing is renewed or reported; without it (the control), the
    same wait is long enough for a beat to find the key gone."""
    lease = Lease(redis_client, f"test:lease:released:{marked}", TTL)
    assert await lease.acquire()
    with caplog.at_level(logging.WARNING, logger="gateway.state.lease"):
        async with lease.kept(release=False):
            await lease.release()  # as the finish script does, in the same step as it records
            lease.released = marked
            await asyncio.sleep(BEATS)
    assert lease.lost.is_set() is not marked
    assert ("lost" in caplog.text) is not marked
    assert await redis_client.exists(lease.key) == 0


async def test_a_renewal_that_ends_after_the_lease_was_let_go_loses_nothing(
    redis_client: aioredis.Redis,
) -> None:
    """A heartbeat's renewal in flight while the turn's finish script lets the key go
    answers False without calling the lease lost (nor logging it)."""
    lease = Lease(redis_client, "test:lease:let-go", TTL)
    assert await lease.acquire()
    await lease.release()  # as the finish script does, while the renewal is on its way
    assert await lease.renew() is False
    assert not lease.lost.is_set()

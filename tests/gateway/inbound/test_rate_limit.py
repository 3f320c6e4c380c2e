"""Rate limits: the settings, and the token-bucket script against a real Redis."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.errors import ConfigError
from gateway.inbound.rate_limit import RateLimiter
from gateway.settings.env import load_settings
from gateway.settings.values import Rate, parse_rate
from gateway.state.keys import Keys
from gateway.state.scripts import BoundScript, load
from tests.support.helpers import inbound
from tests.support.redis_servers import client_for

USER, CONVERSATION = Keys.user_rate("test:U1", "test:W:C1"), Keys.rate("test:W:C1")


def test_a_rate_reads_as_count_per_period_with_its_burst() -> None:
    assert parse_rate("20/min") == Rate(20, 60.0, 20)
    assert parse_rate("20/min", default_burst=5) == Rate(20, 60.0, 5)
    assert parse_rate(" 3 / s , burst 9") == Rate(3, 1.0, 9)
    assert parse_rate("100/hour,burst 10", default_burst=5) == Rate(100, 3600.0, 10)
    assert parse_rate("6/min").describe() == "6 per minute"


@pytest.mark.parametrize("text", ["20", "0/min", "20/day", "20/min,burst 0", "x/min", "-1/s"])
def test_a_malformed_rate_names_the_setting_and_the_form(text: str) -> None:
    with pytest.raises(ConfigError, match=r"^GATEWAY_RATE_USER: .*N/min"):
        load_settings(_env_file=None, GATEWAY_RATE_USER=text)


def test_settings_apply_the_shared_burst_and_leave_unset_limits_off() -> None:
    settings = load_settings(
        _env_file=None,
        GATEWAY_RATE_USER="10/min",
        GATEWAY_RATE_CONVERSATION="30/min,burst 12",
        GATEWAY_RATE_BURST=4,
    )
    assert settings.rate_user == Rate(10, 60.0, 4)
    assert settings.rate_conversation == Rate(30, 60.0, 12)
    empty = load_settings(_env_file=None, GATEWAY_RATE_USER="")
    assert empty.rate_user is None and empty.rate_conversation is None


@pytest.fixture
def take(redis_client: aioredis.Redis) -> BoundScript:
    return load("rate_limit").bind(redis_client)


def _args(
    user: tuple[float, int, int] = (0, 0, 0), conversation: tuple[float, int, int] = (0, 0, 0)
) -> dict[str, Any]:
    """Each bucket as (interval_ms, burst, window_ms); an interval of 0 is no limit."""
    names = ("interval_ms", "burst", "window_ms")
    return {f"user_{n}": v for n, v in zip(names, user, strict=True)} | {
        f"conversation_{n}": v for n, v in zip(names, conversation, strict=True)
    }


def _keys(user: str = USER, conversation: str = CONVERSATION) -> dict[str, str]:
    return {
        "user": user,
        "user_told": Keys.rate_told(user),
        "conversation": conversation,
        "conversation_told": Keys.rate_told(conversation),
    }


async def test_a_bucket_lets_its_burst_through_then_refuses_with_the_wait(
    take: BoundScript,
) -> None:
    args = _args(user=(60_000, 3, 60_000))
    results = [await take(keys=_keys(), args=args) for _ in range(4)]
    assert results[:3] == [[1], [1], [1]]
    allowed, bucket, wait_ms, _ = results[3]
    assert (allowed, bucket) == (0, 1)
    assert 59_000 < wait_ms <= 60_000


async def test_a_bucket_refills_one_token_per_interval(take: BoundScript) -> None:
    args = _args(user=(200, 2, 200))
    assert [await take(keys=_keys(), args=args) for _ in range(2)] == [[1], [1]]
    refused = await take(keys=_keys(), args=args)
    assert refused[0] == 0
    await asyncio.sleep(refused[2] / 1000 + 0.02)  # the wait the script itself named
    assert await take(keys=_keys(), args=args) == [1]
    assert (await take(keys=_keys(), args=args))[0] == 0  # one token came back, not two


async def test_a_full_bucket_expires_and_holds_no_more_than_its_burst(
    take: BoundScript, redis_client: aioredis.Redis
) -> None:
    args = _args(user=(50, 2, 50))
    await take(keys=_keys(), args=args)
    ttl = await redis_client.pttl(USER)
    assert 0 < ttl <= 50
    await asyncio.sleep(0.3)  # six intervals: still only two tokens
    assert await redis_client.exists(USER) == 0
    results = [await take(keys=_keys(), args=args) for _ in range(3)]
    assert [r[0] for r in results] == [1, 1, 0]


async def test_buckets_of_different_users_and_conversations_are_apart(take: BoundScript) -> None:
    args = _args(user=(60_000, 1, 60_000))
    assert await take(keys=_keys(), args=args) == [1]
    assert (await take(keys=_keys(), args=args))[0] == 0
    other = _keys(user=Keys.user_rate("test:U2", "test:W:C1"))
    assert await take(keys=other, args=args) == [1]


async def test_the_conversation_bucket_refuses_for_everyone_in_it(take: BoundScript) -> None:
    args = _args(conversation=(60_000, 2, 60_000))
    users = [Keys.user_rate(f"test:U{i}", "test:W:C1") for i in range(3)]
    results = [await take(keys=_keys(user=u), args=args) for u in users]
    assert [r[0] for r in results] == [1, 1, 0]
    assert results[2][1] == 2


async def test_a_refusal_by_one_bucket_takes_no_token_from_the_other(
    take: BoundScript, redis_client: aioredis.Redis
) -> None:
    conversation_full = _args(user=(60_000, 5, 60_000), conversation=(60_000, 1, 60_000))
    assert await take(keys=_keys(), args=conversation_full) == [1]
    before = await redis_client.get(USER)
    for _ in range(3):
        assert (await take(keys=_keys(), args=conversation_full))[:2] == [0, 2]
    assert await redis_client.get(USER) == before


async def test_the_notice_is_due_once_per_window(take: BoundScript) -> None:
    args = _args(user=(60_000, 1, 150))
    await take(keys=_keys(), args=args)
    tells = [(await take(keys=_keys(), args=args))[3] for _ in range(5)]
    assert tells == [1, 0, 0, 0, 0]
    await asyncio.sleep(0.2)  # the window is over: one more notice, then quiet again
    tells = [(await take(keys=_keys(), args=args))[3] for _ in range(3)]
    assert tells == [1, 0, 0]


async def test_two_clients_share_one_bucket(redis_url: str, take: BoundScript) -> None:
    other = client_for(redis_url)
    try:
        take_elsewhere = load("rate_limit").bind(other)
        args = _args(user=(60_000, 4, 60_000))
        calls = [take, take_elsewhere] * 5
        results = await asyncio.gather(*(call(keys=_keys(), args=args) for call in calls))
        assert sum(r[0] for r in results) == 4
    finally:
        await other.aclose()


async def test_the_limiter_names_the_rate_and_the_wait(redis_client: aioredis.Redis) -> None:
    limiter = RateLimiter(redis_client, Rate(2, 60.0, 1), None)
    assert await limiter.take(inbound("one")) is None
    refusal = await limiter.take(inbound("two"))
    assert refusal is not None and refusal.tell
    seconds = math.ceil(60 / 2)
    assert refusal.text == (
        "You're sending messages faster than this bot answers: 2 per minute. "
        f"Try again in {seconds} s."
    )
    again = await limiter.take(inbound("three"))
    assert again is not None and not again.tell


async def test_no_limit_set_takes_nothing(redis_client: aioredis.Redis) -> None:
    limiter = RateLimiter(redis_client, None, None)
    assert not limiter.active
    for _ in range(5):
        assert await limiter.take(inbound("hi")) is None
    assert await redis_client.keys("gw:*rate*") == []

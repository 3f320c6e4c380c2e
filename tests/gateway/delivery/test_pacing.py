"""The per-chat send pacing: a platform's wait held for later calls, a final text that
waits and an intermediate one skipped, and the pace shared through Redis."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
import redis.asyncio as aioredis

from gateway.delivery.pacing import FINAL_ATTEMPTS, PacedChat, SendPacing
from gateway.delivery.stream import deliver
from gateway.errors import PlatformError
from gateway.messages import Address
from tests.support.recording_sender import RecordingSender

ADDRESS = Address(platform="test", workspace="w", channel="c")


async def test_a_final_call_waits_out_a_rate_limit_and_goes_out() -> None:
    sender = RecordingSender(rate_limit_next=[0.2])
    chat = PacedChat(sender, ADDRESS, None)
    started = time.monotonic()
    attempt = await chat.call(lambda: sender.send(ADDRESS, "hi", final=True), final=True)
    assert attempt.ok and attempt.value == "1"
    assert time.monotonic() - started >= 0.19
    assert [(c.op, c.text) for c in sender.calls] == [("429", ""), ("send", "hi")]


async def test_an_intermediate_call_is_skipped_while_the_chat_must_wait() -> None:
    sender = RecordingSender(rate_limit_next=[5.0])
    chat = PacedChat(sender, ADDRESS, None)
    limited = await chat.call(lambda: sender.send(ADDRESS, "a", final=False), final=False)
    assert not limited.ok
    # The wait holds for the next call too: it is skipped without reaching the platform.
    later = await chat.call(lambda: sender.send(ADDRESS, "b", final=False), final=False)
    assert not later.ok and [c.op for c in sender.calls] == ["429"]


async def test_a_final_call_limited_every_time_gives_up_after_its_attempts() -> None:
    sender = RecordingSender(rate_limit_next=[0.0] * FINAL_ATTEMPTS)
    chat = PacedChat(sender, ADDRESS, None)
    with pytest.raises(PlatformError, match=f"after {FINAL_ATTEMPTS} waits"):
        await chat.call(lambda: sender.send(ADDRESS, "hi", final=True), final=True)
    assert [c.op for c in sender.calls] == ["429"] * FINAL_ATTEMPTS


async def test_a_chat_without_a_chat_interval_takes_no_shared_pace(
    redis_client: aioredis.Redis,
) -> None:
    chat = PacedChat(RecordingSender(), ADDRESS, SendPacing(redis_client))
    assert chat.pacing is None
    assert PacedChat(RecordingSender(chat_interval=1.0), ADDRESS, chat.pacing).pacing is None
    paced = PacedChat(RecordingSender(chat_interval=1.0), ADDRESS, SendPacing(redis_client))
    assert paced.pacing is not None


async def test_send_pacing_is_shared_between_workers(redis_client: aioredis.Redis) -> None:
    one, two = SendPacing(redis_client), SendPacing(redis_client)
    assert await one.acquire("tg:chat", 1.0) == 0
    wait = await two.acquire("tg:chat", 1.0)
    assert 0.5 < wait <= 1.0
    await two.ban("tg:other", 5.0)
    assert await one.acquire("tg:other", 1.0) > 4.0


async def test_pacing_paces_final_sends_across_streams(redis_client: aioredis.Redis) -> None:
    sender = RecordingSender(chat_interval=0.2)
    pacing = SendPacing(redis_client)
    started = time.monotonic()
    await asyncio.gather(
        deliver(sender, ADDRESS, "one", pacing),
        deliver(sender, ADDRESS, "two", pacing),
        deliver(sender, ADDRESS, "three", pacing),
    )
    times = sorted(c.at for c in sender.calls)
    assert times[2] - started >= 0.39
    assert all(b - a >= 0.19 for a, b in itertools.pairwise(times))

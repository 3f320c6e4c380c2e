"""Ingest's door for feedback clicks: the access rules first (a stranger on an open
network changes nothing; an allowed or paired user is recorded), then the store."""

from __future__ import annotations

import datetime as dt

import redis.asyncio as aioredis

from gateway.feedback.store import FeedbackVerdict, Reply
from gateway.inbound.ingest import Ingest
from gateway.messages import Address, FeedbackClick
from tests.support.helpers import settings

REPLY = Reply("telegram", "99", "42", "5000", "telegram:99:42", "turn-1", "openai/m")
EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


def click(user: str, value: str = "up") -> FeedbackClick:
    address = Address(platform="telegram", workspace="99", channel="42")
    return FeedbackClick(
        platform="telegram", channel="42", message_id="5000", user_id=user, value=value,
        address=address,
    )  # fmt: skip


async def _ingest(redis_url: str, redis: aioredis.Redis, **env: object) -> Ingest:
    ingest = Ingest(settings(redis_url, **env), redis)
    await ingest.feedback_store.register(REPLY)
    return ingest


async def test_a_stranger_on_an_open_network_is_refused_and_nothing_is_recorded(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = await _ingest(redis_url, redis_client, GATEWAY_ALLOWED_USERS="telegram:7")
    assert await ingest.feedback(click("999")) == FeedbackVerdict.REFUSED
    assert await ingest.feedback_store.since(EPOCH) == []
    assert await ingest.feedback(click("7")) == FeedbackVerdict.RECORDED
    assert [vote.user for vote in await ingest.feedback_store.since(EPOCH)] == ["7"]


async def test_a_paired_user_may_give_feedback(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = await _ingest(redis_url, redis_client, GATEWAY_PAIRING=True)
    code = await ingest.access.pairing.request("telegram:8")
    assert code is not None
    await ingest.access.pairing.approve(code)
    assert await ingest.feedback(click("8", "down")) == FeedbackVerdict.RECORDED
    assert await ingest.feedback(click("9", "down")) == FeedbackVerdict.REFUSED

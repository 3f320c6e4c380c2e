"""Ingest's door for feedback clicks: the access rules first (a stranger on an open
network, or a Slack Connect outsider, changes nothing; an allowed or paired user is
recorded), then the store."""

from __future__ import annotations

import datetime as dt

import redis.asyncio as aioredis

from gateway.feedback.store import FeedbackVerdict, Reply
from gateway.inbound.ingest import Ingest
from gateway.messages import Address, FeedbackClick
from tests.support.helpers import settings

REPLY = Reply("telegram", "99", "42", "5000", "telegram:99:42", "turn-1", "openai/m")
EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)


def click(
    user: str, value: str = "up", *, platform: str = "telegram", external: bool = False
) -> FeedbackClick:
    address = Address(platform=platform, workspace="99", channel="42")
    return FeedbackClick(
        platform=platform, channel="42", message_id="5000", user_id=user, value=value,
        address=address, external=external,
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


async def test_a_slack_connect_outsider_only_where_the_opt_in_or_the_allowlist_says(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    slack = Reply("slack", "99", "42", "5000", "slack:99:42", "turn-1", "openai/m")
    closed = Ingest(settings(redis_url, GATEWAY_ALLOWED_USERS="slack:U7"), redis_client)
    await closed.feedback_store.register(slack)
    outsider = click("U6", platform="slack", external=True)
    assert await closed.feedback(outsider) == FeedbackVerdict.REFUSED
    assert await closed.feedback(click("U6", platform="slack")) == FeedbackVerdict.RECORDED
    assert await closed.feedback(click("U7", platform="slack", external=True)) == (
        FeedbackVerdict.RECORDED
    )
    opened = Ingest(settings(redis_url, SLACK_ALLOW_EXTERNAL=True), redis_client)
    assert await opened.feedback(click("U8", platform="slack", external=True)) == (
        FeedbackVerdict.RECORDED
    )

"""Speakers' names from users.info: the real Slack SDK against the loopback Slack, the
shared cache in a real Redis."""

from __future__ import annotations

import redis.asyncio as aioredis

from adapters.slack.client import web_client
from adapters.slack.names import NAME_TTL, UNKNOWN_TTL, UserNames, display_name
from gateway.state.keys import Keys
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack


def names(slack: FakeSlack, redis: aioredis.Redis) -> UserNames:
    return UserNames(redis, web_client(BOT_TOKEN, slack.api_url))


async def test_a_name_is_asked_once_and_then_served_from_the_cache(
    slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    users = names(slack, redis_client)
    assert await users.get("U1") == "Ada"
    assert await users.get("U1") == "Ada"
    assert len(slack.calls_to("users.info")) == 1
    # Another process finds it in Redis, for a day.
    assert await names(slack, redis_client).get("U1") == "Ada"
    assert len(slack.calls_to("users.info")) == 1
    assert 0 < await redis_client.ttl(Keys.user_name("slack", "U1")) <= NAME_TTL


async def test_a_user_slack_will_not_name_is_shown_by_id_and_asked_again_soon(
    slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    assert await names(slack, redis_client).get("UNOBODY") == "UNOBODY"
    assert 0 < await redis_client.ttl(Keys.user_name("slack", "UNOBODY")) <= UNKNOWN_TTL


async def test_a_failing_users_info_gives_the_id_and_is_not_kept_for_a_day(
    slack: FakeSlack, redis_client: aioredis.Redis
) -> None:
    slack.fail_next("users.info", "internal_error", status=500)
    assert await names(slack, redis_client).get("U2") == "U2"
    assert await redis_client.ttl(Keys.user_name("slack", "U2")) <= UNKNOWN_TTL


def test_the_display_name_prefers_the_profiles_then_the_real_name_then_the_handle() -> None:
    assert display_name({"profile": {"display_name": " Ada ", "real_name": "Ada L"}}) == "Ada"
    assert display_name({"profile": {"display_name": "", "real_name": "Ada L"}}) == "Ada L"
    assert display_name({"profile": {}, "real_name": "  ", "name": "ada"}) == "ada"
    assert display_name({"profile": {"display_name": "  "}}) is None

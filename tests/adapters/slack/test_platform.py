"""SlackPlatform: which mode the settings select, what each mode requires, doctor."""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from adapters import load
from adapters.slack import SlackPlatform
from adapters.slack.sender import SlackSender
from gateway.errors import ConfigError, PlatformError
from gateway.settings.env import load_settings
from tests.fakes.slack_api import BOT_USER_ID, TEAM_ID, FakeSlack
from tests.support.slack_helpers import APP_TOKEN, BOT_TOKEN, SIGNING_SECRET


def platform(redis_client: Redis, **env: Any) -> SlackPlatform:
    return SlackPlatform(load_settings(_env_file=None, **env), redis_client)


def test_the_cli_finds_it() -> None:
    assert load("slack") is SlackPlatform


def test_http_mode_needs_the_signing_secret(redis_client: Redis) -> None:
    http = platform(redis_client, SLACK_BOT_TOKEN=BOT_TOKEN)
    assert http.uses_http()
    with pytest.raises(ConfigError, match=r"^SLACK_SIGNING_SECRET is required") as caught:
        http.validate("http")
    assert BOT_TOKEN not in str(caught.value)
    platform(redis_client, SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET=SIGNING_SECRET).validate(
        "http"
    )


def test_an_app_token_means_socket_mode(redis_client: Redis) -> None:
    socket = platform(redis_client, SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_APP_TOKEN=APP_TOKEN)
    assert not socket.uses_http()
    socket.validate("http")  # `gateway web` then serves no Slack route: nothing to check
    socket.validate("connect")
    with pytest.raises(ConfigError, match="SLACK_APP_TOKEN is required"):
        platform(redis_client, SLACK_BOT_TOKEN=BOT_TOKEN).validate("connect")
    with pytest.raises(ConfigError, match="app-level token"):
        platform(
            redis_client, SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_APP_TOKEN="xoxb-wrong-kind"
        ).validate("connect")


def test_workers_need_only_the_bot_token(redis_client: Redis) -> None:
    worker = platform(redis_client, SLACK_BOT_TOKEN=BOT_TOKEN)
    worker.validate("send")
    assert isinstance(worker.sender(), SlackSender)
    with pytest.raises(ConfigError, match="SLACK_BOT_TOKEN"):
        platform(redis_client).validate("send")


async def test_doctor_checks_both_tokens(redis_client: Redis, slack: FakeSlack) -> None:
    checked = platform(
        redis_client,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_APP_TOKEN=APP_TOKEN,
        SLACK_API_URL=slack.api_url,
    )
    detail = await checked.doctor()
    assert BOT_USER_ID in detail and TEAM_ID in detail and "Socket Mode" in detail
    slack.fail_next("auth.test", "invalid_auth")
    with pytest.raises(PlatformError, match="invalid_auth"):
        await checked.doctor()


async def test_startup_learns_the_bot_ids(redis_client: Redis, slack: FakeSlack) -> None:
    started = platform(
        redis_client,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET="s",
        SLACK_API_URL=slack.api_url,
    )
    await started.startup()
    assert (await started.identity()).user_id == BOT_USER_ID
    assert len(slack.calls_to("auth.test")) == 1


WORKER_PROBE = """
import json, sys
import redis.asyncio as aioredis
import adapters
from gateway.settings.env import load_settings
from gateway.worker import Worker
HEAVY = ("slack_bolt", "starlette", "httpx", "PIL", "litellm")
settings = load_settings(
    _env_file=None, REDIS_URL="redis://127.0.0.1:1/0", GATEWAY_MODEL="openai/m",
    SLACK_BOT_TOKEN=sys.argv[1], SLACK_SIGNING_SECRET=sys.argv[2], GATEWAY_MODEL_PROCESSES=1,
)
redis = aioredis.Redis.from_url(settings.redis_url)  # not connected: nothing is sent
platform = adapters.load("slack")(settings, redis)
platform.validate("send")
senders, sources = {"slack": platform.sender()}, {"slack": platform.file_source()}
Worker(settings, redis, senders, sources=sources)
worker = [name for name in HEAVY if name in sys.modules]
from gateway.inbound.ingest import Ingest
platform.routes(Ingest(settings, redis))  # what gateway web builds
print(json.dumps({"worker": worker, "web": [name for name in HEAVY if name in sys.modules]}))
"""


def test_a_slack_worker_loads_neither_bolt_nor_httpx_nor_pillow() -> None:
    """A worker sends through slack_sdk: bolt and starlette (the event routes), httpx (a
    file's download) and Pillow (an image) are loaded where, and when, they are used."""
    import json
    import subprocess
    import sys

    done = subprocess.run(  # a fresh interpreter: this one has loaded all of them
        [sys.executable, "-c", WORKER_PROBE, BOT_TOKEN, SIGNING_SECRET],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["worker"] == []
    assert {"slack_bolt", "starlette"} <= set(seen["web"])  # the probe sees what is loaded

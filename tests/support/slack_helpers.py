"""Helpers of the Slack tests: requests signed the way Slack does (v0), gateway subprocesses."""

from __future__ import annotations

import contextlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
from redis.asyncio import Redis
from slack_sdk.signature import SignatureVerifier
from starlette.routing import BaseRoute

from adapters.slack import SlackPlatform
from adapters.slack.rotation import Rotation
from gateway.http.app import create_app
from gateway.inbound.ingest import Ingest
from gateway.settings.env import load_settings
from tests.fakes.slack_api import (
    BOT_TOKEN,
    BOT_USER_ID,
    CLIENT_ID,
    CLIENT_SECRET,
    TEAM_ID,
    FakeSlack,
    Install,
)
from tests.support import processes
from tests.support.processes import request_text as request_text
from tests.support.redis_servers import client_for

SIGNING_SECRET = "test-signing-secret-0123456789"
APP_TOKEN = "xapp-test-app-token"

_event_ids = itertools.count(1)
_ts = itertools.count(1)


def signed_headers(
    body: bytes,
    *,
    secret: str = SIGNING_SECRET,
    timestamp: int | None = None,
    content_type: str = "application/json",
    retry: int | None = None,
) -> dict[str, str]:
    """Headers of a request Slack signed: `v0=HMAC-SHA256(secret, "v0:<ts>:<body>")`."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body)
    assert signature is not None
    headers = {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": signature,
        "Content-Type": content_type,
    }
    if retry is not None:
        headers["X-Slack-Retry-Num"] = str(retry)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    return headers


def new_ts() -> str:
    return f"1710000000.{next(_ts):06d}"


def event_body(event: dict[str, Any], event_id: str | None = None) -> dict[str, Any]:
    return {
        "token": "legacy",
        "team_id": TEAM_ID,
        "api_app_id": "A0001",
        "type": "event_callback",
        "event_id": event_id or f"Ev{next(_event_ids):08d}",
        "event_time": int(time.time()),
        "authorizations": [{"team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": True}],
        "event": event,
    }


def mention(
    text: str,
    *,
    user: str = "U1",
    channel: str = "C1",
    ts: str | None = None,
    thread_ts: str | None = None,
) -> dict[str, Any]:
    event = {
        "type": "app_mention",
        "user": user,
        "channel": channel,
        "ts": ts or new_ts(),
        "text": f"<@{BOT_USER_ID}> {text}",
        "team": TEAM_ID,
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


def message(
    text: str,
    *,
    user: str = "U1",
    channel: str = "C1",
    channel_type: str = "channel",
    ts: str | None = None,
    thread_ts: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    event = {
        "type": "message",
        "user": user,
        "channel": channel,
        "channel_type": channel_type,
        "ts": ts or new_ts(),
        "text": text,
        "team": TEAM_ID,
        **extra,
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    return {k: v for k, v in event.items() if v is not None}


def json_bytes(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()


def command_bytes(
    text: str, *, channel: str = "C1", user: str = "U1", trigger_id: str | None = None
) -> bytes:
    form = {
        "token": "legacy",
        "team_id": TEAM_ID,
        "team_domain": "test",
        "channel_id": channel,
        "channel_name": "general",
        "user_id": user,
        "user_name": "ada",
        "command": "/btw",
        "text": text,
        "api_app_id": "A0001",
        "response_url": "http://127.0.0.1:9/commands/unused",
        "trigger_id": trigger_id or f"trig.{next(_event_ids)}",
    }
    return urlencode(form).encode()


# -- gateway subprocesses -------------------------------------------------------


class Processes(processes.Processes):
    @property
    def events_url(self) -> str:
        return self.url("/slack/events")


def environment(
    redis_url: str, llm_api_base: str, slack_api_url: str, port: int, **extra: str
) -> dict[str, str]:
    """The core's test settings plus Slack's."""
    return processes.environment(
        redis_url,
        llm_api_base,
        port,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_URL=slack_api_url,
        SLACK_EDIT_INTERVAL="0.2",
        **extra,
    )


def gateway(
    workdir: Path, env: dict[str, str], *commands: str
) -> contextlib.AbstractAsyncContextManager[Processes]:
    """Start `gateway <command>` for each command; SIGTERM them all on exit."""
    return processes.gateway(workdir, env, *commands, kind=Processes)


def block_actions(
    approval_id: str,
    *,
    approve: bool = True,
    user: str = "U1",
    channel: str = "C1",
    message_ts: str = "1700000000.000001",
    thread_ts: str | None = None,
    action_ts: str | None = None,
) -> dict[str, Any]:
    """The interactivity payload of a click on an approval request's button."""
    container: dict[str, Any] = {
        "type": "message",
        "message_ts": message_ts,
        "channel_id": channel,
        "is_ephemeral": False,
    }
    if thread_ts:
        container["thread_ts"] = thread_ts
    return {
        "type": "block_actions",
        "user": {"id": user, "username": "ada", "name": "ada", "team_id": TEAM_ID},
        "api_app_id": "A0001",
        "token": "legacy",
        "container": container,
        "trigger_id": f"trig.{next(_event_ids)}",
        "team": {"id": TEAM_ID, "domain": "test"},
        "channel": {"id": channel, "name": "general"},
        "message": {"type": "message", "ts": message_ts, "text": "approve?"},
        "response_url": "http://127.0.0.1:9/actions/unused",
        "actions": [
            {
                "type": "button",
                "action_id": "gw_approve" if approve else "gw_decline",
                "block_id": "gw_approval",
                "text": {"type": "plain_text", "text": "Approve" if approve else "Decline"},
                "value": approval_id,
                "action_ts": action_ts or new_ts(),
            }
        ],
    }


def interaction_bytes(payload: dict[str, Any]) -> bytes:
    """An interactivity delivery: a form whose `payload` field is the JSON."""
    return urlencode({"payload": json.dumps(payload)}).encode()


@dataclass
class EventsApp:
    """`gateway web`'s app in-process, serving Slack's events: a client of it, its Redis
    and the ingest behind it."""

    http: httpx.AsyncClient
    redis: Redis
    ingest: Ingest


@contextlib.asynccontextmanager
async def events_app(slack: FakeSlack, redis_url: str) -> AsyncIterator[EventsApp]:
    """The Slack platform on the fake Web API, validated for HTTP and started, behind
    `POST /slack/events`; shut down and its Redis closed on exit."""
    settings = load_settings(
        _env_file=None,
        REDIS_URL=redis_url,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_URL=slack.api_url,
    )
    redis = Redis.from_url(redis_url, decode_responses=True)
    platform = SlackPlatform(settings, redis)
    platform.validate("http")
    ingest = Ingest(settings, redis)
    async with serving(platform, ingest, redis, "http://gateway") as http:
        yield EventsApp(http, redis, ingest)


@contextlib.asynccontextmanager
async def serving(
    platform: SlackPlatform,
    ingest: Ingest,
    redis: Redis,
    base_url: str,
    extra: Sequence[BaseRoute] = (),
) -> AsyncIterator[httpx.AsyncClient]:
    """`gateway web`'s app with the Slack platform (and `extra` routes), started, and a
    client of it; on the way out the platform stops and `redis` is closed."""
    app = create_app(redis, ingest, [platform], ["slack"], extra)
    await platform.startup()
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=base_url) as http:
            yield http
    finally:
        await platform.shutdown()
        await redis.aclose()


# -- many workspaces (OAuth installs) ----------------------------------------------

# Fernet keys (32 url-safe base64 bytes), fixed so a failure reads the same every run.
SECRET_KEY = "a2V5LW9mLXRoZS1nYXRld2F5LXRlc3RzLTAxMjM0NTY="
OTHER_SECRET_KEY = "YW5vdGhlci1rZXktbm90LXRoZS1vbmUtdXNlZC0wMDE="


def many_workspaces(slack_api_url: str, **extra: str) -> dict[str, str]:
    """Slack's settings for installs into many workspaces (no SLACK_BOT_TOKEN)."""
    return {
        "SLACK_CLIENT_ID": CLIENT_ID,
        "SLACK_CLIENT_SECRET": CLIENT_SECRET,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "GATEWAY_SECRET_KEY": SECRET_KEY,
        "SLACK_API_URL": slack_api_url,
        **extra,
    }


def installed_event(
    event: dict[str, Any], install: Install, *, team_id: str | None = None
) -> dict[str, Any]:
    """An Events API delivery to `install` (a workspace's, or an org's for `team_id`)."""
    team = team_id or install.team_id
    authorization = {
        "enterprise_id": install.enterprise_id,
        "team_id": team,
        "user_id": install.bot_user_id,
        "is_bot": True,
        "is_enterprise_install": install.org_wide,
    }
    body = {
        **event_body({**event, "team": team}),
        "team_id": team,
        "authorizations": [authorization],
    }
    if install.enterprise_id:
        body["enterprise_id"] = install.enterprise_id
    if install.org_wide:
        body["is_enterprise_install"] = True
    return body


def team_mention(text: str, install: Install, **fields: Any) -> dict[str, Any]:
    """A mention of `install`'s bot, as its workspace delivers it."""
    event = mention(text, **fields)
    event["text"] = f"<@{install.bot_user_id}> {text}"
    return event


@dataclass
class InstallsApp:
    """`gateway web`'s app in-process, installing into many workspaces: a client of it
    (keeping the installer's cookies, as a browser does), its Redis, the platform."""

    http: httpx.AsyncClient
    redis: Redis
    platform: SlackPlatform

    async def post_event(self, body: dict[str, Any]) -> httpx.Response:
        raw = json_bytes(body)
        return await self.http.post("/slack/events", content=raw, headers=signed_headers(raw))

    async def start_install(self) -> tuple[str, str]:
        """`GET /slack/install`: Slack's authorize URL it redirects to, and its state."""
        response = await self.http.get("/slack/install")
        assert response.status_code == 302, response.text
        location = response.headers["location"]
        return location, parse_qs(urlsplit(location).query)["state"][0]

    async def finish_install(self, code: str, state: str | None) -> httpx.Response:
        """Slack sending the installer back to the redirect URL."""
        query = {"code": code} if state is None else {"code": code, "state": state}
        return await self.http.get("/slack/oauth_redirect", params=query)

    async def install(self, slack: FakeSlack, team_id: str, **consent: Any) -> Install:
        """A whole install, as an installer's browser goes through it."""
        location, state = await self.start_install()
        async with httpx.AsyncClient() as browser:
            assert (await browser.get(location)).status_code == 200
        code = slack.consent(team_id, **consent)
        response = await self.finish_install(code, state)
        assert response.status_code == 200, response.text
        return list(slack.installs.values())[-1]


def many_platform(slack: FakeSlack, redis_url: str, rotation: Rotation | None) -> SlackPlatform:
    """A process's Slack platform in many workspaces, on its own Redis connection;
    `rotation` when its expiring tokens are refreshed (tokens of a few seconds)."""
    settings = load_settings(_env_file=None, REDIS_URL=redis_url, **many_workspaces(slack.api_url))
    platform = SlackPlatform(settings, client_for(redis_url))  # a Cluster's client on one
    if rotation is not None:
        platform.token_rotation = rotation
    platform.validate("http")
    return platform


@contextlib.asynccontextmanager
async def installs_app(
    slack: FakeSlack, redis_url: str, rotation: Rotation | None = None
) -> AsyncIterator[InstallsApp]:
    """The Slack platform installing into many workspaces, behind `gateway web`'s routes."""
    platform = many_platform(slack, redis_url, rotation)
    settings, redis = platform.settings, platform.redis
    await platform.preflight()
    # https: bolt's state cookie is Secure, and a browser sends it back only over TLS.
    async with serving(platform, Ingest(settings, redis), redis, "https://gateway") as http:
        yield InstallsApp(http, redis, platform)

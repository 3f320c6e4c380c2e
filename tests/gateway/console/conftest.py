"""The console's app over the test's Redis, through httpx's ASGI transport, and a sign-in."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette

from gateway.console.app import console_routes
from gateway.http.app import create_app
from gateway.inbound.ingest import Ingest
from gateway.settings.env import Settings
from tests.support.helpers import settings as make_settings

TOKEN = "console-token-0123456789"
ORIGIN = {"origin": "http://testserver"}


@dataclass
class Console:
    client: httpx.AsyncClient
    redis: Redis
    ingest: Ingest
    settings: Settings

    async def sign_in(self, name: str = "ops") -> str:
        """Signs in; returns the sign-in's CSRF token (read from a page, as a browser would)."""
        done = await self.client.post(
            "/admin/signin", data={"token": TOKEN, "name": name}, headers=ORIGIN
        )
        assert done.status_code == 303, done.text
        page = await self.client.get("/admin/health")
        return csrf_of(page.text)

    async def change(self, path: str, csrf: str, **fields: str) -> httpx.Response:
        return await self.client.post(path, data={"csrf": csrf, **fields}, headers=ORIGIN)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html[:500]
    return found.group(1)


def build_app(redis: Redis, settings: Settings) -> tuple[Starlette, Ingest]:
    """`gateway web`'s app with the console, as the command builds it."""
    ingest = Ingest(settings, redis)
    routes = console_routes(settings, redis, ingest, ["test"])
    return create_app(redis, ingest, [], ["test"], routes), ingest


def build(
    redis: Redis, settings: Settings, address: str = "127.0.0.1"
) -> tuple[httpx.AsyncClient, Ingest]:
    """The app behind a client through the ASGI transport, as if from `address`."""
    app, ingest = build_app(redis, settings)
    transport = httpx.ASGITransport(app=app, client=(address, 50000))
    return httpx.AsyncClient(transport=transport, base_url="http://testserver"), ingest


@pytest.fixture
async def console(redis_url: str, redis_client: Redis) -> AsyncIterator[Console]:
    settings = make_settings(redis_url, GATEWAY_ADMIN_TOKEN=TOKEN, GATEWAY_PAIRING=True)
    client, ingest = build(redis_client, settings)
    async with client:
        yield Console(client, redis_client, ingest, settings)

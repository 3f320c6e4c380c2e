"""The live parts over a real uvicorn: a conversation's stream sends its history again
when a message arrives, the health stream when a connection's report changes; without
a sign-in a stream is refused. What is sent is escaped like the pages."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
from redis.asyncio import Redis

from gateway.console.audit import AuditLog
from gateway.console.live import event
from gateway.state.health import Health
from tests.gateway.console.conftest import TOKEN, Console, build_app
from tests.support.helpers import inbound
from tests.support.web_server import serving

KEY = "test:W:C1"


async def _events(answer: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    name, data = "", []
    async for line in answer.aiter_lines():
        if line.startswith("event: "):
            name = line[len("event: ") :]
        elif line.startswith("data: "):
            data.append(line[len("data: ") :])
        elif not line and name:
            yield name, "\n".join(data)
            name, data = "", []


async def _next(events: AsyncIterator[tuple[str, str]], wanted: str) -> str:
    async with asyncio.timeout(10):
        async for name, data in events:
            if name == wanted:
                return data
    raise AssertionError(f"the stream ended before a {wanted} event")


@contextlib.asynccontextmanager
async def _signed_in(port: int) -> AsyncIterator[httpx.AsyncClient]:
    base = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        done = await client.post("/admin/signin", data={"token": TOKEN}, headers={"origin": base})
        assert done.status_code == 303
        yield client


async def test_a_conversation_stream_sends_a_new_message_escaped(
    console: Console, redis_client: Redis
) -> None:
    await console.ingest.receive(inbound("first", channel="C1"))
    app, ingest = build_app(redis_client, console.settings)
    async with serving(app) as port, _signed_in(port) as client:
        async with client.stream("GET", f"/admin/events/conversation?key={KEY}") as answer:
            assert answer.headers["content-type"].startswith("text/event-stream")
            events = _events(answer)
            assert "first" in await _next(events, "history")
            await ingest.receive(inbound("then <i>this</i>", channel="C1"))
            shown = await _next(events, "history")
            assert "then &lt;i&gt;this&lt;/i&gt;" in shown and "<i>" not in shown


async def test_the_health_stream_follows_a_connection_report(
    console: Console, redis_client: Redis
) -> None:
    slack = Health(redis_client, "slack")
    await slack.report(True, "connected")
    app, _ = build_app(redis_client, console.settings)
    async with serving(app) as port, _signed_in(port) as client:
        async with client.stream("GET", "/admin/events/health") as answer:
            events = _events(answer)
            assert "badge ok" in await _next(events, "health")
            await slack.report(False, "socket closed")
            shown = await _next(events, "health")
            assert "badge bad" in shown and "socket closed" in shown


async def test_a_stream_without_a_sign_in_is_refused_on_the_wire(
    console: Console, redis_client: Redis
) -> None:
    app, _ = build_app(redis_client, console.settings)
    async with serving(app) as port:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            answer = await client.get("/admin/events/health")
    assert answer.status_code == 401


def test_an_event_carries_each_line_of_its_fragment() -> None:
    assert event("history", "<p>a</p>\n<p>b</p>") == (
        "event: history\ndata: <p>a</p>\ndata: <p>b</p>\n\n"
    )


async def test_behind_a_trusted_proxy_that_says_https_the_cookie_is_secure(
    console: Console, redis_client: Redis
) -> None:
    """uvicorn (as `gateway web` runs it) takes X-Forwarded-Proto only from the addresses
    in FORWARDED_ALLOW_IPS; the console's cookie follows what uvicorn decided."""
    app, _ = build_app(redis_client, console.settings)
    said = {"x-forwarded-proto": "https", "x-forwarded-for": "203.0.113.5"}
    for trusted, secure in (("127.0.0.1", True), ("10.9.9.9", False)):
        async with serving(app, forwarded_allow_ips=trusted) as port:
            base = f"http://127.0.0.1:{port}"
            origin = "https" if secure else "http"
            async with httpx.AsyncClient(base_url=base) as client:
                answer = await client.post(
                    "/admin/signin",
                    data={"token": TOKEN},
                    headers={**said, "origin": f"{origin}://127.0.0.1:{port}"},
                )
        assert answer.status_code == 303
        assert ("secure" in answer.headers["set-cookie"].lower()) is secure
    signed = [e.address for e in await AuditLog(redis_client).recent() if e.action == "sign-in"]
    assert signed == ["127.0.0.1", "203.0.113.5"]  # newest first: the proxy's word, when trusted

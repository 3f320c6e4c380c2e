"""The live parts: server-sent events polled from Redis, so every `gateway web` shows
what every worker does (no worker needs to know a console is open).

Each open page has its own stream. It reads a small signature of what it shows
every POLL seconds and sends the page's fragment, rendered on the server (so
escaped like the rest), only when the signature moved; htmx's SSE extension swaps
it in. A comment line every KEEPALIVE seconds keeps proxies from closing it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from gateway.console import conversations, health, pages
from gateway.console.access import Admin
from gateway.console.context import Console
from gateway.state.keys import Keys

POLL = 1.0
HEALTH_POLL = 2.0
KEEPALIVE = 15.0
HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}


def event(name: str, html: str) -> str:
    """One SSE event whose data is `html` (each of its lines a `data:` line)."""
    lines = "".join(f"data: {line}\n" for line in html.splitlines() or [""])
    return f"event: {name}\n{lines}\n"


async def _poll(
    request: Request,
    every: float,
    signature: Callable[[], Awaitable[object]],
    render: Callable[[], Awaitable[list[str]]],
) -> AsyncIterator[str]:
    last: object = None
    quiet_since = time.monotonic()
    yield "retry: 3000\n\n"
    while True:  # StreamingResponse ends this when the page goes away
        now = await signature()
        if now != last:
            last = now
            for piece in await render():
                yield piece
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > KEEPALIVE:
            yield ": keepalive\n\n"
            quiet_since = time.monotonic()
        await asyncio.sleep(every)


async def health_events(console: Console, request: Request, admin: Admin) -> Response:
    rate = health.TurnRate()

    async def signature() -> object:
        found = await health.read(console.redis, console.platforms, console.settings.mcp_config)
        turns = await conversations.running(console.redis)
        per_minute = rate.add(found.at, found.turns_total)
        state["health"], state["turns"], state["rate"] = found, turns, per_minute
        return (
            found.connections and sorted((k, v.get("up")) for k, v in found.connections.items()),
            found.depth,
            found.workers,
            found.turns,
            found.errors,
            found.tools,
            found.redis["clients"],
            None if per_minute is None else round(per_minute, 1),
            [row.key for row in turns],
        )

    state: dict[str, object] = {}

    async def render() -> list[str]:
        values = {"health": state["health"], "running": state["turns"], "rate": state["rate"]}
        body = console.jinja.get_template("_health.html").render(admin=admin, **values)
        turns = console.jinja.get_template("_running.html").render(admin=admin, **values)
        return [event("health", body), event("turns", turns)]

    stream = _poll(request, HEALTH_POLL, signature, render)
    return StreamingResponse(stream, media_type="text/event-stream", headers=HEADERS)


async def conversation_events(console: Console, request: Request, admin: Admin) -> Response:
    key = pages.session_key(request.query_params.get("key", ""))
    if key is None:
        return Response("no such conversation key", status_code=400, media_type="text/plain")

    async def signature() -> object:
        async with console.redis.pipeline(transaction=False) as pipe:
            pipe.llen(Keys.history(key))
            pipe.llen(Keys.inbox(key))
            pipe.get(Keys.live(key))
            pipe.exists(Keys.lease(key))
            pipe.llen(Keys.segments(key))
            pipe.llen(Keys.side_answers(key))
            pipe.hget(Keys.meta(key), "epoch")
            return tuple(await pipe.execute())

    async def render() -> list[str]:
        ingest = console.ingest
        talk = await conversations.conversation(
            console.redis, ingest.sessions, ingest.approvals, key, None
        )
        body = console.jinja.get_template("_history.html").render(
            admin=admin, talk=talk, page=conversations.PAGE
        )
        return [event("history", body)]

    stream = _poll(request, POLL, signature, render)
    return StreamingResponse(stream, media_type="text/event-stream", headers=HEADERS)

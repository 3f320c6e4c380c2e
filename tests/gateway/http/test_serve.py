"""`serve_web`: uvicorn on HOST:PORT, its Date header kept current, stopped at once by
the command's stop."""

from __future__ import annotations

import asyncio
import time
from email.utils import parsedate_to_datetime

import httpx
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from gateway.http.serve import DATE_REFRESH, serve_web
from tests.support.helpers import settings
from tests.support.redis_servers import free_port


async def hello(_: object) -> PlainTextResponse:
    return PlainTextResponse("hello")


async def served_date(http: httpx.AsyncClient, url: str) -> float:
    response = await http.get(url)
    assert response.text == "hello"
    return parsedate_to_datetime(response.headers["date"]).timestamp()


async def test_the_date_header_stays_current_and_the_stop_ends_serving_at_once() -> None:
    port = free_port()
    config = settings("redis://127.0.0.1:1", HOST="127.0.0.1", PORT=port)
    app = Starlette(routes=[Route("/", hello)])
    stop = asyncio.Event()
    serving = asyncio.create_task(serve_web(config, app, stop))
    url = f"http://127.0.0.1:{port}/"
    try:
        async with httpx.AsyncClient(timeout=5) as http:
            async with asyncio.timeout(10):
                while True:
                    try:
                        first = await served_date(http, url)
                        break
                    except httpx.ConnectError:
                        await asyncio.sleep(0.02)
            assert abs(first - time.time()) <= DATE_REFRESH + 1  # the header has whole seconds
            async with asyncio.timeout(3 * DATE_REFRESH + 1):  # a later second shows soon
                while (later := await served_date(http, url)) <= first + 1:
                    await asyncio.sleep(0.1)
            assert abs(later - time.time()) <= DATE_REFRESH + 1
    finally:
        stopped_at = time.monotonic()
        stop.set()
        await asyncio.wait_for(serving, 5)
    assert time.monotonic() - stopped_at < DATE_REFRESH  # not left to the next refresh

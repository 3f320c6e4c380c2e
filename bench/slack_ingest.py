"""How fast `gateway web` acknowledges signed Slack events.

Starts a private redis-server, the loopback fake of the Slack Web API and
`gateway web` as a subprocess, then fires signed `app_mention` events (each a
new thread, so each is a real ingest: dedupe, append, enqueue) at increasing
open-loop rates, and finally as fast as a fixed number of connections allows.
Prints, per rate, the events acknowledged per second and the p50 / p99 time to
acknowledge. Target: p99 under 50 ms at 200 events/s.

    python bench/slack_ingest.py [--seconds 3] [--rates 50,100,200,400] [--connections 32]

Everything runs on this machine: the load client shares its CPUs with the
server, so the figures are a floor, not a ceiling.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.slack_api import FakeSlack  # noqa: E402
from tests.support.redis_servers import free_port, start_redis  # noqa: E402
from tests.support.slack_helpers import (  # noqa: E402
    BOT_TOKEN,
    SIGNING_SECRET,
    event_body,
    json_bytes,
    mention,
    signed_headers,
)

USERS = [f"U{n:04d}" for n in range(20)]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Round:
    label: str
    sent: int
    ok: int
    seconds: float
    latencies: list[float]
    failures: list[int]
    server_cpu: float = 0.0

    def line(self) -> str:
        if not self.latencies:
            return f"{self.label:>12}  sent {self.sent:6d}  ok {self.ok:6d}  (no answers)"
        ordered = sorted(self.latencies)
        p50 = statistics.median(ordered) * 1000
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
        rate = self.ok / self.seconds
        cpu = self.server_cpu / max(1, self.ok) * 1000
        return (
            f"{self.label:>12}  sent {self.sent:6d}  ok {self.ok:6d}  "
            f"acked {rate:8.1f}/s  p50 {p50:6.1f} ms  p99 {p99:6.1f} ms  "
            f"server CPU {cpu:4.1f} ms/event{self.failed()}"
        )

    def failed(self) -> str:
        if not self.failures:
            return ""
        counts = {status: self.failures.count(status) for status in set(self.failures)}
        return "  failed " + ", ".join(f"{n}x{status or 'conn'}" for status, n in counts.items())


def signed_event(user: str) -> tuple[bytes, dict[str, str]]:
    body = json_bytes(event_body(mention("benchmark question", user=user)))
    return body, signed_headers(body)


async def fire(
    session: aiohttp.ClientSession, url: str, latencies: list[float], failures: list[int]
) -> None:
    body, headers = signed_event(USERS[len(latencies) % len(USERS)])
    started = time.perf_counter()
    try:
        async with session.post(url, data=body, headers=headers) as response:
            await response.read()
            if response.status == 200:
                latencies.append(time.perf_counter() - started)
                return
            failures.append(response.status)
    except aiohttp.ClientError:
        failures.append(0)


async def open_loop(url: str, rate: float, seconds: float) -> Round:
    """Send at a fixed rate whatever the answers do (the way Slack sends)."""
    latencies: list[float] = []
    failures: list[int] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        total = int(rate * seconds)
        tasks = []
        start = time.perf_counter()
        for n in range(total):
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(fire(session, url, latencies, failures)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    return Round(f"{rate:g}/s", total, len(latencies), elapsed, latencies, failures)


async def closed_loop(url: str, connections: int, seconds: float) -> Round:
    """As fast as `connections` clients can go, each waiting for its answer."""
    latencies: list[float] = []
    failures: list[int] = []
    deadline = time.perf_counter() + seconds

    async def client(session: aiohttp.ClientSession) -> None:
        while time.perf_counter() < deadline:
            await fire(session, url, latencies, failures)

    start = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(client(session) for _ in range(connections)))
    elapsed = time.perf_counter() - start
    sent = len(latencies) + len(failures)
    return Round(f"max({connections})", sent, len(latencies), elapsed, latencies, failures)


@contextlib.contextmanager
def redis_server() -> Iterator[str]:
    process, url = start_redis(prefix="bench-redis-")
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@contextlib.contextmanager
def gateway_web(redis_url: str, slack: FakeSlack, port: int) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GATEWAY_", "SLACK_"))}
    env.update(
        {
            "REDIS_URL": redis_url,
            "PORT": str(port),
            "HOST": "127.0.0.1",
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": slack.api_url,
            "GATEWAY_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(ROOT),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        }
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "web"], env=env, stdin=subprocess.DEVNULL
    )
    try:
        yield process
    finally:
        process.terminate()
        process.wait(timeout=15)


async def wait_healthy(port: int, process: subprocess.Popen[bytes], within: float = 30) -> None:
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise SystemExit("gateway web exited")
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise SystemExit("gateway web did not become healthy")


async def run(args: argparse.Namespace) -> None:
    rates = [float(r) for r in args.rates.split(",")]
    port = free_port()
    with redis_server() as redis_url, FakeSlack() as slack:
        for user in USERS:
            slack.add_user(user, f"User {user}")
        with gateway_web(redis_url, slack, port) as process:
            await wait_healthy(port, process)
            url = f"http://127.0.0.1:{port}/slack/events"
            await open_loop(url, 50, 1)  # warm-up: name cache, auth.test, connections
            print(
                f"gateway web, signed app_mention events, {os.cpu_count()} CPUs shared "
                "with the load client"
            )
            for rate in rates:
                before = cpu_seconds(process.pid)
                result = await open_loop(url, rate, args.seconds)
                result.server_cpu = cpu_seconds(process.pid) - before
                print(result.line())
            before = cpu_seconds(process.pid)
            result = await closed_loop(url, args.connections, args.seconds)
            result.server_cpu = cpu_seconds(process.pid) - before
            print(result.line())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rates", default="50,100,200,400")
    parser.add_argument("--connections", type=int, default=32)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()

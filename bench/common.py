"""What the benchmarks share: their own redis-server, the fake model as a process, stats."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script: make the project and the fakes importable
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from redis.asyncio import Redis  # noqa: E402
from redis.exceptions import ConnectionError as RedisConnectionError  # noqa: E402

from gateway.messages import Address, Inbound, Speaker  # noqa: E402
from gateway.ports import Limits  # noqa: E402
from tests.support.redis_servers import free_port, start_redis  # noqa: E402, F401  (the benchmarks' too)

PLATFORM = "console"  # open to everyone, so no allow-list is needed


class BenchSender:
    """A Sender at the far end of the seam that only records; `record` says what to keep."""

    platform = PLATFORM
    edit_interval = 1.0
    _ids = itertools.count()

    def limits(self, address: Address) -> Limits:
        return Limits(max_length=3900, edit_interval=self.edit_interval)

    def measure(self, markdown: str) -> int:
        return len(markdown)

    async def send(
        self,
        address: Address,
        markdown: str,
        *,
        final: bool,
        key: str | None = None,
        feedback: bool = False,
    ) -> str:
        self.record(address, markdown, final)
        return str(next(self._ids))

    async def edit(
        self,
        address: Address,
        message_id: str,
        markdown: str,
        *,
        final: bool,
        feedback: bool = False,
    ) -> None:
        self.record(address, markdown, final)

    async def thinking(self, address: Address, on: bool) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def record(self, address: Address, markdown: str, final: bool) -> None:
        raise NotImplementedError


def inbound(channel: str, text: str, number: int) -> Inbound:
    """A direct message from the bench's one user."""
    reply = Address(platform=PLATFORM, workspace="bench", channel=channel, reply_to=str(number))
    return Inbound(
        platform=PLATFORM,
        workspace="bench",
        channel=channel,
        message_id=str(number),
        event_id=f"{channel}-{number}",
        speaker=Speaker(id="u1", name="Bench"),
        text=text,
        is_dm=True,
        reply=reply,
        side_reply=reply.model_copy(update={"side": True}),
    )


async def wait_redis(url: str) -> None:
    client = Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            await client.ping()
            break
        except RedisConnectionError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.02)
    await client.aclose()


class RemoteFake:
    """The fake model server as its own process: its clock and its work share no
    interpreter lock with the code being measured."""

    def __init__(self, *options: str) -> None:
        command = [sys.executable, "-m", "tests.fakes.llm_server", *options]
        self.process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.api_base = self.process.stdout.readline().strip()
        self.process.stdout.close()

    def requests(self, model: str | None = None) -> list[dict[str, Any]]:
        """The requests the fake received (for `model`), with monotonic time stamps."""
        url = self.api_base.removesuffix("/v1") + "/_fake/requests"
        with urllib.request.urlopen(url, timeout=30) as response:
            recorded: list[dict[str, Any]] = json.load(response)
        return [r for r in recorded if model is None or r["body"].get("model") == model]

    async def wait_for(self, n: int, model: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(await asyncio.to_thread(self.requests, model)) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {n} {model} requests in {timeout}s")
            await asyncio.sleep(0.05)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)


def percentile(values: Sequence[float], p: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.2f}ms"

"""Per-turn gateway overhead, and turn time against a naive litellm loop.

Starts its own redis-server and the loopback fake model (as a process), then at
1, 50 and 500 concurrent sessions runs main turns through the real Ingest and
Worker (Redis stream, lease, compiler, litellm streaming, delivery) into a
Sender that stamps the final text, several turns per session one after another.
The overhead of a turn is its end-to-end time (from `ingest.receive` to the
final text at the Sender) minus the model's own time for that request as the
fake measured it. Beside it, a naive loop at the same concurrency streams the
same requests through litellm directly, with no Redis: its turn time, and the
ratio of the gateway's to it. A second pass does the same with a 300 ms model.

Delivery runs with Slack's pacing (one edit a second); the final text is never
held back by that pacing, so it is part of what is measured.

    python bench/turns.py [--turns 4] [--levels 1,50,500] [--quick-ms 20] [--slow-ms 300]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from common import (
    PLATFORM,
    BenchSender,
    RemoteFake,
    inbound,
    ms,
    percentile,
    start_redis,
    wait_redis,
)

from gateway.config import Settings
from gateway.ingest import Ingest
from gateway.llm import ModelCall, Models, Usage
from gateway.model import Address
from gateway.store import connect
from gateway.worker import Worker

REPLY = "a short streamed answer of about ten words in all"


@dataclass
class StampingSender(BenchSender):
    """Stamps when each session's final text arrives."""

    done: dict[str, asyncio.Event] = field(default_factory=dict)
    finished_at: dict[str, float] = field(default_factory=dict)

    def record(self, address: Address, markdown: str, final: bool) -> None:
        # The whole reply may already have gone out as an intermediate edit, in
        # which case no separate final call follows: the full text is the mark.
        if final or markdown == REPLY:
            self.finished_at[address.channel] = time.monotonic()
            self.done[address.channel].set()


def model_times(fake: RemoteFake, model: str) -> dict[str, float]:
    """The fake's own time for each request, by the tag in its last user message."""
    times = {}
    for request in fake.requests(model):
        content = str(request["body"]["messages"][-1]["content"])
        tag = content.split(" ", 1)[0]
        if request["finished_at"] is not None:
            times[tag] = request["finished_at"] - request["received_at"]
    return times


async def gateway_run(settings: Settings, sessions: int, turns: int, model: str
                      ) -> dict[str, float]:
    """End-to-end time of every turn, by tag."""
    redis = connect(settings.redis_url or "")
    await redis.flushdb()
    sender = StampingSender()
    ingest = Ingest(settings, redis)
    worker = Worker(settings, redis, {PLATFORM: sender}, concurrency=max(64, sessions * 2))
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    await worker.ready.wait()
    numbers = itertools.count(1)
    elapsed: dict[str, float] = {}

    async def session(index: int) -> None:
        channel = f"{model}-s{index}"
        for turn in range(turns):
            tag = f"{channel}-t{turn}"
            sender.done[channel] = asyncio.Event()
            started = time.monotonic()
            await ingest.receive(inbound(channel, f"{tag} tell me something", next(numbers)))
            await sender.done[channel].wait()
            elapsed[tag] = sender.finished_at[channel] - started

    await asyncio.gather(*(session(i) for i in range(sessions)))
    stop.set()
    await running
    await redis.aclose()
    return elapsed


async def naive_run(settings: Settings, sessions: int, turns: int, model: str
                    ) -> dict[str, float]:
    """The same requests straight through litellm: no Redis, no compiler, no delivery."""
    models = Models(settings)
    elapsed: dict[str, float] = {}

    async def session(index: int) -> None:
        history: list[dict[str, Any]] = [{"role": "system", "content": settings.system_prompt}]
        for turn in range(turns):
            tag = f"naive-{model}-s{index}-t{turn}"
            history.append({"role": "user", "content": f"{tag} tell me something"})
            started = time.monotonic()
            text = "".join([piece async for piece in models.stream(
                ModelCall(f"openai/{model}", list(history), 60.0), Usage())])
            elapsed[tag] = time.monotonic() - started
            history.append({"role": "assistant", "content": text})

    await asyncio.gather(*(session(i) for i in range(sessions)))
    return elapsed


def settings_for(redis_url: str, fake: RemoteFake, model: str) -> Settings:
    values: dict[str, Any] = {
        "_env_file": None, "REDIS_URL": redis_url, "GATEWAY_MODEL": f"openai/{model}",
        "GATEWAY_API_BASE": fake.api_base, "GATEWAY_API_KEY": "sk-bench",
        "GATEWAY_MODEL_RETRIES": 0}
    return Settings(**values)


def summarize(elapsed: dict[str, float], at_fake: dict[str, float]) -> tuple[list[float], ...]:
    total = [elapsed[t] for t in elapsed if t in at_fake]
    overhead = [elapsed[t] - at_fake[t] for t in elapsed if t in at_fake]
    return total, overhead


async def level(redis_url: str, fake: RemoteFake, model: str, sessions: int, turns: int
                ) -> None:
    settings = settings_for(redis_url, fake, model)
    gateway_elapsed = await gateway_run(settings, sessions, turns, model)
    naive_elapsed = await naive_run(settings, sessions, turns, model)
    at_fake = model_times(fake, model)
    g_total, g_over = summarize(gateway_elapsed, at_fake)
    n_total, n_over = summarize(naive_elapsed, at_fake)
    ratio = statistics.median(g_total) / statistics.median(n_total)
    print(f"{model:>10} {sessions:>5} sessions {len(g_total):>5} turns | gateway overhead "
          f"p50 {ms(statistics.median(g_over))} p99 {ms(percentile(g_over, 99))} | naive "
          f"overhead p50 {ms(statistics.median(n_over))} p99 {ms(percentile(n_over, 99))} | "
          f"turn p50 gateway {ms(statistics.median(g_total))} naive "
          f"{ms(statistics.median(n_total))} ratio {ratio:.3f}")


async def amain(args: argparse.Namespace) -> None:
    process, url = start_redis()
    fake = RemoteFake("--reply", REPLY,
                      "--model", f"quick={args.quick_ms / 2000},{args.quick_ms / 2000}",
                      "--model", f"slow={args.slow_ms / 2000},{args.slow_ms / 2000}")
    try:
        await wait_redis(url)
        warm = settings_for(url, fake, "quick")
        await naive_run(warm, 2, 2, "quick")  # litellm's first call builds its clients
        levels = [int(n) for n in args.levels.split(",")]
        print(f"quick model: {args.quick_ms:g} ms per reply (first token after half); slow "
              f"model: {args.slow_ms:g} ms; {args.turns} turns per session")
        for sessions in levels:
            await level(url, fake, "quick", sessions, args.turns)
        for sessions in (1, 50):
            await level(url, fake, "slow", sessions, args.turns)
    finally:
        fake.stop()
        process.terminate()
        process.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--levels", default="1,50,500")
    parser.add_argument("--quick-ms", type=float, default=20.0)
    parser.add_argument("--slow-ms", type=float, default=300.0)
    warnings.filterwarnings("ignore", module="pydantic")  # litellm's own schema warnings
    asyncio.run(amain(parser.parse_args()))


if __name__ == "__main__":
    main()

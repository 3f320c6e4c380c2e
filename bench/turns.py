"""Per-turn gateway overhead, and turn time against a naive litellm loop.

Starts its own redis-server and the loopback fake model (as a process), then
runs main turns through the real Ingest and Worker (Redis stream, lease,
compiler, litellm streaming, delivery) into a Sender that stamps the final
text. Beside each gateway run, a naive loop streams the same requests through
litellm directly, with no Redis, no compiler and no delivery, under the same
load: its turn time, and the ratio of the gateway's to it.

What a turn's times mean:
- *turn*: from `ingest.receive` to the final text at the Sender (naive: the
  `litellm.acompletion` stream, start to end, on the loop that asked for it).
- *model call*: the litellm stream inside the worker, from the call to its
  end. litellm's own CPU time (about 30 ms a call here) is part of it, as it
  is part of every naive turn.
- *gateway overhead* = turn - model call: ingest, the job stream, the lease,
  the compiler, delivery. This is what the targets are about.
- *over the fake* = turn - the model's time as the fake measured it: what
  the model client adds on top of the gateway (litellm, HTTP), for both loops.

Load: `sessions` users, each sending its next message a think time after its
reply ended (exponential, mean `--think` seconds, and the first one after one
such pause, so users do not start in lock step). "closed" lines send the next
message the moment the reply ends: at 50 sessions that is the saturation point
of one process on this machine, reported as turns per second.

Each level runs the gateway twice: with litellm in the worker
(`GATEWAY_MODEL_PROCESSES=0`) and with one model process (the default), where
the worker sends each call over a pipe and only the text comes back.

Delivery runs with Slack's pacing (one edit a second); the final text is never
held back by it, so it is part of what is measured.

    python bench/turns.py [--turns 3] [--think 5] [--levels 1,50,500] [--modes 0,1]
                          [--quick-ms 20] [--slow-ms 300] [--seed 7]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import time
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
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

from gateway.cli.main import started
from gateway.inbound.ingest import Ingest
from gateway.messages import Address
from gateway.models import ModelCall, Models, ToolCall, Usage
from gateway.models.backend import ModelBackend
from gateway.models.litellm_backend import load_litellm
from gateway.settings.env import Settings
from gateway.state.keys import connect
from gateway.worker import Worker

REPLY = "a short streamed answer of about ten words in all"
OVERHEAD_P50, OVERHEAD_P99, SLOW_RATIO = 0.003, 0.015, 1.05  # the targets

Turn = Callable[[int, str, str], Awaitable[None]]  # (session, tag, text)


def tag_of(messages: Any) -> str:
    """A request's tag: the first word of its last message (each turn's text starts with it)."""
    return str(messages[-1]["content"]).split(" ", 1)[0]


class TimedModels(Models):
    """The gateway's model client, timing each streamed call by its tag."""

    def __init__(self, backend: ModelBackend) -> None:
        super().__init__(backend)
        self.spent: dict[str, float] = {}

    async def stream(
        self, call: ModelCall, usage: Usage, calls: list[ToolCall] | None = None
    ) -> AsyncIterator[str]:
        started = time.monotonic()
        async for piece in super().stream(call, usage, calls):
            yield piece
        self.spent[tag_of(call.messages)] = time.monotonic() - started


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


@dataclass
class Run:
    """One loop's turns: their times by tag, and the run's wall time."""

    turn: dict[str, float] = field(default_factory=dict)
    model_call: dict[str, float] = field(default_factory=dict)
    wall: float = 0.0


async def users(
    sessions: int, turns: int, think: float, seed: int, name: str, one_turn: Turn
) -> float:
    """Drive `sessions` users through `turns` turns each; the wall time of it all."""
    started = time.monotonic()

    async def user(index: int) -> None:
        pauses = random.Random(f"{seed}-{index}")
        for turn in range(turns):
            if think > 0:
                await asyncio.sleep(pauses.expovariate(1 / think))
            tag = f"{name}-s{index}-t{turn}"
            await one_turn(index, tag, f"{tag} tell me something")

    await asyncio.gather(*(user(i) for i in range(sessions)))
    return time.monotonic() - started


async def gateway_run(
    settings: Settings, sessions: int, turns: int, think: float, seed: int, name: str
) -> Run:
    redis = connect(settings.redis_url or "")
    await redis.flushdb()
    sender = StampingSender()
    models = TimedModels.for_settings(settings, processes=settings.model_processes)
    ingest = Ingest(settings, redis)
    worker = Worker(settings, redis, {PLATFORM: sender}, models)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    await worker.ready.wait()
    started()  # what the worker built is frozen, as `gateway worker` does once it is built
    numbers = itertools.count(1)
    run = Run(model_call=models.spent)

    async def one_turn(index: int, tag: str, text: str) -> None:
        channel = f"{name}-s{index}"
        sender.done[channel] = asyncio.Event()
        started = time.monotonic()
        await ingest.receive(inbound(channel, text, next(numbers)))
        await sender.done[channel].wait()
        run.turn[tag] = sender.finished_at[channel] - started

    run.wall = await users(sessions, turns, think, seed, name, one_turn)
    stop.set()
    await running
    await redis.aclose()
    return run


async def naive_run(
    settings: Settings, sessions: int, turns: int, think: float, seed: int, name: str
) -> Run:
    """The same requests straight through litellm: no Redis, no compiler, no delivery."""
    litellm = load_litellm()
    key = settings.api_key.get_secret_value() if settings.api_key else None
    histories: dict[int, list[dict[str, Any]]] = {}
    run = Run()

    async def one_turn(index: int, tag: str, text: str) -> None:
        history = histories.setdefault(
            index, [{"role": "system", "content": settings.system_prompt}]
        )
        history.append({"role": "user", "content": text})
        started = time.monotonic()
        response = await litellm.acompletion(
            model=settings.model,
            messages=list(history),
            stream=True,
            timeout=60.0,
            num_retries=0,
            api_base=settings.api_base,
            api_key=key,
            stream_options={"include_usage": True},
        )
        reply = "".join(
            [chunk.choices[0].delta.content or "" async for chunk in response if chunk.choices]
        )
        run.turn[tag] = run.model_call[tag] = time.monotonic() - started
        history.append({"role": "assistant", "content": reply})

    run.wall = await users(sessions, turns, think, seed, f"naive-{name}", one_turn)
    return run


def at_fake(fake: RemoteFake, model: str) -> dict[str, float]:
    """The fake's own time for each request, by tag."""
    return {
        tag_of(r["body"]["messages"]): r["finished_at"] - r["received_at"]
        for r in fake.requests(model)
        if r["finished_at"] is not None
    }


def settings_for(redis_url: str, fake: RemoteFake, model: str, processes: int = 0) -> Settings:
    values: dict[str, Any] = {
        "_env_file": None,
        "REDIS_URL": redis_url,
        "GATEWAY_MODEL": f"openai/{model}",
        "GATEWAY_API_BASE": fake.api_base,
        "GATEWAY_API_KEY": "sk-bench",
        "GATEWAY_MODEL_RETRIES": 0,
        "GATEWAY_MODEL_PROCESSES": processes,
    }
    return Settings(**values)


def p50_p99(values: list[float]) -> str:
    return f"p50 {ms(statistics.median(values))} p99 {ms(percentile(values, 99))}"


@dataclass
class Level:
    model: str
    sessions: int
    think: float
    processes: int
    overhead: list[float]
    ratio: float


def mode(processes: int) -> str:
    return "in-process" if processes == 0 else f"{processes} model process{'es' * (processes > 1)}"


async def level(
    redis_url: str,
    fake: RemoteFake,
    model: str,
    sessions: int,
    turns: int,
    think: float,
    seed: int,
    modes: list[int],
) -> list[Level]:
    """The naive loop, then the gateway in each mode, under the same load."""
    name = f"{model}.{sessions}.{think:g}"  # tags stay unique across levels
    naive = await naive_run(
        settings_for(redis_url, fake, model), sessions, turns, think, seed, name
    )
    runs = []
    for processes in modes:
        settings = settings_for(redis_url, fake, model, processes)
        runs.append(
            await gateway_run(settings, sessions, turns, think, seed, f"{name}.{processes}")
        )
    fake_times = at_fake(fake, model)
    n_tags = [t for t in naive.turn if t in fake_times]
    n_fake = [naive.turn[t] - fake_times[t] for t in n_tags]
    n_turn = statistics.median(naive.turn[t] for t in n_tags)
    pace = f"think {think:g}s" if think > 0 else "closed"
    print(
        f"{model:>6} {pace:>9} {sessions:>4} sessions | naive loop: turn p50 {ms(n_turn)}, "
        f"over the fake p50 {ms(statistics.median(n_fake))}"
        + (f", {len(n_tags) / naive.wall:.1f} turns/s" if think == 0 and sessions > 1 else ""),
        flush=True,
    )
    levels = []
    for processes, gateway in zip(modes, runs, strict=True):
        tags = [t for t in gateway.turn if t in gateway.model_call and t in fake_times]
        overhead = [gateway.turn[t] - gateway.model_call[t] for t in tags]
        g_fake = [gateway.turn[t] - fake_times[t] for t in tags]
        g_turn = statistics.median(gateway.turn[t] for t in tags)
        rates = ""
        if think == 0 and sessions > 1:
            rates = f" | {len(tags) / gateway.wall:6.1f} turns/s"
        print(
            f"{'':>27} gateway, {mode(processes):>15}: {len(tags):>4} turns | overhead "
            f"{p50_p99(overhead)} | over the fake p50 {ms(statistics.median(g_fake))} | "
            f"turn p50 {ms(g_turn)} ratio {g_turn / n_turn:.3f}{rates}",
            flush=True,
        )
        levels.append(Level(model, sessions, think, processes, overhead, g_turn / n_turn))
    return levels


def verdicts(levels: list[Level]) -> None:
    for lv in levels:
        how = f"{lv.sessions} sessions ({'closed' if lv.think == 0 else f'think {lv.think:g}s'})"
        if lv.model == "quick" and lv.sessions == 50 and lv.think > 0:
            p50, p99 = statistics.median(lv.overhead), percentile(lv.overhead, 99)
            met = p50 <= OVERHEAD_P50 and p99 <= OVERHEAD_P99
            print(
                f"target overhead p50 <= 3 ms, p99 <= 15 ms at {how}, {mode(lv.processes)}: "
                f"{'met' if met else 'missed'} (p50 {p50 * 1000:.2f} ms, p99 "
                f"{p99 * 1000:.2f} ms)"
            )
        if lv.model == "slow" and (lv.think > 0 or lv.sessions == 1):
            print(
                f"target turn time <= {SLOW_RATIO} x naive, 300 ms model, {how}, "
                f"{mode(lv.processes)}: {'met' if lv.ratio <= SLOW_RATIO else 'missed'} "
                f"({lv.ratio:.3f})"
            )


async def amain(args: argparse.Namespace) -> None:
    process, url = start_redis()
    fake = RemoteFake(
        "--reply",
        REPLY,
        "--model",
        f"quick={args.quick_ms / 2000},{args.quick_ms / 2000}",
        "--model",
        f"slow={args.slow_ms / 2000},{args.slow_ms / 2000}",
    )
    try:
        await wait_redis(url)
        warm = settings_for(url, fake, "quick")
        await naive_run(warm, 2, 2, 0.0, 0, "warm")  # litellm's first call builds its clients
        started()  # start-up objects frozen out of the collector, as in `gateway worker`
        print(
            f"quick model: {args.quick_ms:g} ms per reply (first token after half); slow "
            f"model: {args.slow_ms:g} ms; {args.turns} turns per session (20 at 1 session); "
            f"users think {args.think:g}s on average between a reply and their next message"
        )
        modes = [int(n) for n in args.modes.split(",")]
        levels: list[Level] = []
        for model in ("quick", "slow"):
            for sessions in [int(n) for n in args.levels.split(",")]:
                if model == "slow" and sessions > 50:
                    continue
                think = 0.0 if sessions == 1 else args.think
                turns = 20 if sessions == 1 else args.turns
                levels += await level(url, fake, model, sessions, turns, think, args.seed, modes)
            if model == "quick":
                levels += await level(url, fake, model, 50, args.turns, 0.0, args.seed, modes)
        verdicts(levels)
    finally:
        fake.stop()
        process.terminate()
        process.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--think", type=float, default=5.0)
    parser.add_argument("--levels", default="1,50,500")
    parser.add_argument("--quick-ms", type=float, default=20.0)
    parser.add_argument("--slow-ms", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--modes", default="0,1", help="model processes per gateway run: 0 is litellm in the worker"
    )
    warnings.filterwarnings("ignore", module="pydantic")  # litellm's own schema warnings
    asyncio.run(amain(parser.parse_args()))


if __name__ == "__main__":
    main()

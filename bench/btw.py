"""Side-question latency while main turns are streaming.

Starts its own redis-server and a loopback fake model whose main model streams
slowly and whose side model answers after a fixed delay, then drives the real
Ingest and Worker in-process. While every session's main turn is streaming it
asks `--questions` /btw questions, and prints the time from `ingest.receive` to
the side answer reaching the Sender, beside the side model's own time for the
same request as measured at the fake, and the difference (the gateway's cost).
The fake runs as its own process, so its timing shares no interpreter lock with
the worker; the event-loop lag and the CPU share printed last tell how much of the
overhead is the worker waiting for its loop (main-turn streaming, a busy machine).

    python bench/btw.py [--questions 100] [--sessions 10] [--main-seconds 2]
                        [--side-ms 200] [--interval-ms 40]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import re
import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from common import PLATFORM, BenchSender, RemoteFake, inbound, ms, start_redis, wait_redis

from gateway.inbound.ingest import Ingest, Receipt
from gateway.messages import Address
from gateway.settings.env import Settings
from gateway.state.keys import connect
from gateway.worker import Worker

QUESTION = re.compile(r"question (\d{3})")


@dataclass
class RecordingSender(BenchSender):
    """A Sender that stamps when each side answer (and each main reply) is complete."""

    side_answers: dict[int, float] = field(default_factory=dict)
    other_side_replies: list[str] = field(default_factory=list)
    main_done: asyncio.Queue[str] = field(default_factory=asyncio.Queue)

    edit_interval = 0.25

    def record(self, address: Address, markdown: str, final: bool) -> None:
        now = time.monotonic()
        if address.side:
            found = QUESTION.search(markdown.splitlines()[0])
            if found is None:
                self.other_side_replies.append(markdown)  # "busy", a failure...
            else:
                self.side_answers.setdefault(int(found.group(1)), now)
        elif final:
            self.main_done.put_nowait(address.channel)


def remote_fake(args: argparse.Namespace) -> RemoteFake:
    return RemoteFake(
        "--reply",
        "once upon a time " * 10,
        "--model",
        f"main-model=0,{args.main_seconds}",
        "--model",
        f"side-model={args.side_ms / 1000}",
    )


class Bench:
    """One run: sessions kept busy with main turns, side questions asked among them."""

    def __init__(self, args: argparse.Namespace, llm: RemoteFake, redis_url: str) -> None:
        self.args = args
        self.llm = llm
        values: dict[str, Any] = {
            "_env_file": None,
            "REDIS_URL": redis_url,
            "GATEWAY_MODEL": "openai/main-model",
            "GATEWAY_SIDE_MODEL": "openai/side-model",
            "GATEWAY_API_BASE": llm.api_base,
            "GATEWAY_API_KEY": "sk-test",
        }
        self.settings = Settings(**values)
        self.redis = connect(redis_url)
        self.sender = RecordingSender()
        self.ingest = Ingest(self.settings, self.redis)
        self.worker = Worker(self.settings, self.redis, {PLATFORM: self.sender})
        self.numbers = itertools.count(1)
        self.asked: dict[int, float] = {}
        self.seen_by_fake: list[dict[str, Any]] = []
        self.loop_lags: list[float] = []
        self.cpu_share = 0.0

    async def run(self) -> None:
        stop = asyncio.Event()
        worker = asyncio.create_task(self.worker.run(stop))
        await self.worker.ready.wait()
        await self._warm_up()
        channels = [f"c{n}" for n in range(self.args.sessions)]
        feeder = asyncio.create_task(self._keep_streaming(channels))
        await self.llm.wait_for(len(channels), "main-model", timeout=30)
        # --sessions 0: a baseline, the questions spread over idle sessions
        channels = channels or [f"idle{n}" for n in range(10)]
        lag_monitor = asyncio.create_task(self._watch_loop())
        wall, cpu = time.monotonic(), time.process_time()
        await self._ask(channels)
        await self._wait_answers()
        self.cpu_share = (time.process_time() - cpu) / (time.monotonic() - wall)
        lag_monitor.cancel()
        self.seen_by_fake = await asyncio.to_thread(self.llm.requests, "side-model")
        feeder.cancel()
        stop.set()
        await worker
        await self.redis.aclose()

    async def _warm_up(self) -> None:
        """One main turn and one side question first: litellm imports lazily on first use,
        and a worker that has been running a while has paid that already."""
        await self._say("warm-up", "hello")
        await self._say("warm-up", "/btw question 999: warming up?")
        await self.sender.main_done.get()
        while 999 not in self.sender.side_answers:
            await asyncio.sleep(0.01)

    async def _watch_loop(self) -> None:
        """How late the event loop wakes a 10 ms sleep: the queueing every job sees."""
        while True:
            started = time.monotonic()
            await asyncio.sleep(0.01)
            self.loop_lags.append(time.monotonic() - started - 0.01)

    async def _say(self, channel: str, text: str) -> Receipt:
        return await self.ingest.receive(inbound(channel, text, next(self.numbers)))

    async def _keep_streaming(self, channels: list[str]) -> None:
        """A new main message in each session as soon as its previous reply is done.

        The sessions start spread over one main reply's time, so that their turns
        do not all begin (and end) at the same moment.
        """
        for channel in channels:
            await self._say(channel, "tell me a long story")
            await asyncio.sleep(self.args.main_seconds / len(channels))
        while True:
            channel = await self.sender.main_done.get()
            await self._say(channel, "and then what happened next")

    async def _ask(self, channels: list[str]) -> None:
        for number in range(self.args.questions):
            channel = channels[number % len(channels)]
            self.asked[number] = time.monotonic()
            await self._say(channel, f"/btw question {number:03d}: what are you writing?")
            await asyncio.sleep(self.args.interval_ms / 1000)

    async def _wait_answers(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(self.asked) > len(
            self.sender.other_side_replies
        ) + sum(number in self.sender.side_answers for number in self.asked):
            await asyncio.sleep(0.01)

    def side_model_time(self, number: int) -> float | None:
        """The side model's own time for a question, as the fake measured it."""
        for req in self.seen_by_fake:
            content = str(req["body"]["messages"][-1]["content"])
            if f"question {number:03d}" in content and req["finished_at"] is not None:
                return float(req["finished_at"] - req["received_at"])
        return None

    def main_turns_streaming(self) -> tuple[int, int]:
        """The fewest and most main-model streams open at the moments questions were asked."""
        mains = self.llm.requests("main-model")
        counts = [
            sum(
                1
                for req in mains
                if req["received_at"] <= asked
                and (req["finished_at"] is None or req["finished_at"] > asked)
            )
            for asked in self.asked.values()
        ]
        return min(counts), max(counts)

    def report(self) -> None:
        latencies, model_times, overheads = [], [], []
        for number, asked in self.asked.items():
            answered = self.sender.side_answers.get(number)
            model_time = self.side_model_time(number)
            if answered is None or model_time is None:
                continue
            latencies.append(answered - asked)
            model_times.append(model_time)
            overheads.append(answered - asked - model_time)
        args = self.args
        fewest, most = self.main_turns_streaming()
        print(
            f"{len(latencies)} of {len(self.asked)} side questions answered "
            f"({len(self.sender.other_side_replies)} other side replies); "
            f"{args.sessions} sessions streaming {args.main_seconds:g} s main replies; "
            f"side model {args.side_ms:g} ms; main streams open when asked: {fewest} to {most}"
        )
        if len(latencies) < 2:
            return
        print(f"{'':26}{'p50':>9}{'p99':>9}{'max':>9}")
        for label, values in (
            ("side question latency", latencies),
            ("side model (at the fake)", model_times),
            ("overhead (per request)", overheads),
            ("event loop lag", self.loop_lags),
        ):
            cuts = statistics.quantiles(values, n=100, method="inclusive")
            print(f"{label:26}{ms(statistics.median(values))}{ms(cuts[98])}{ms(max(values))}")
        p99_latency = statistics.quantiles(latencies, n=100, method="inclusive")[98]
        p99_model = statistics.quantiles(model_times, n=100, method="inclusive")[98]
        verdict = "met" if p99_latency <= p99_model + 0.1 else "MISSED"
        print(f"target p99 latency <= side model p99 + 100 ms: {verdict}")
        load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
        print(
            f"gateway process CPU {self.cpu_share:.0%} of one core; machine load {load} "
            f"on {os.cpu_count()} CPUs"
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument(
        "--sessions",
        type=int,
        default=10,
        help="sessions kept streaming main turns (0: an idle baseline)",
    )
    parser.add_argument("--main-seconds", type=float, default=2.0)
    parser.add_argument("--side-ms", type=float, default=200.0)
    parser.add_argument("--interval-ms", type=float, default=40.0)
    return parser.parse_args(argv)


async def amain(args: argparse.Namespace) -> None:
    process, url = start_redis()
    try:
        await wait_redis(url)
        llm = remote_fake(args)
        try:
            bench = Bench(args, llm, url)
            await bench.run()
            bench.report()
        finally:
            llm.stop()
    finally:
        process.terminate()
        process.wait(timeout=10)


def main(argv: list[str] | None = None) -> None:
    warnings.filterwarnings("ignore", module="pydantic")  # litellm's own schema warnings
    asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    main()

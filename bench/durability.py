"""What writing each message to disk before acknowledging it costs.

For each `appendfsync` policy (`always`, `everysec`, `no`) this starts the
embedded redis-server the gateway itself runs (append-only file on, in a temp
dir of its own, over its unix socket) and drives the real ingest path
(`gateway.inbound.ingest.Ingest`: dedupe, append and enqueue in one script) with
normalised messages, each in a session of its own, so every one is a full
ingest. Prints per policy the cost of one message, acknowledged one after the
other (median and p99, in µs), and the messages per second with many in
flight (Redis then syncs a whole batch of writes with one fsync), and the
ratios of `always` to `everysec` (the same process, the same disk).

    python bench/durability.py [--messages 2000] [--in-flight 32] [--dir PATH]

The figures depend on the disk under `--dir` (default: the system temp dir; its
file system is printed): on tmpfs an fsync costs nothing, on a network disk a lot.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import inbound, percentile  # noqa: E402
from gateway.inbound.ingest import Ingest, Receipt  # noqa: E402
from gateway.settings.env import Settings  # noqa: E402
from gateway.state.embedded_redis import FSYNC_POLICIES, EmbeddedRedis  # noqa: E402
from gateway.state.keys import connect  # noqa: E402

BASELINE = "everysec"


@dataclass
class Figures:
    policy: str
    latencies: list[float]  # seconds per message, one at a time
    per_second: float  # messages per second, `width` in flight
    width: int

    def line(self) -> str:
        median = statistics.median(self.latencies) * 1e6
        p99 = percentile(self.latencies, 99) * 1e6
        return (
            f"{self.policy:>9}  one at a time: median {median:8.1f} µs  p99 {p99:8.1f} µs"
            f"   {self.width} in flight: {self.per_second:8.0f} messages/s"
        )


async def measure(policy: str, args: argparse.Namespace) -> Figures:
    """One policy's figures, on a fresh embedded server in a fresh directory."""
    data = Path(tempfile.mkdtemp(prefix=f"durability-{policy}-", dir=args.dir))
    server = EmbeddedRedis(data, fsync=policy)
    url = server.start()
    redis = connect(url)
    try:
        settings = Settings(_env_file=None, REDIS_URL=url)  # type: ignore[call-arg]
        ingest = Ingest(settings, redis)
        await one_at_a_time(ingest, policy, args.warm_up, "warm")
        latencies = await one_at_a_time(ingest, policy, args.messages, "seq")
        per_second = await in_flight(ingest, policy, args.messages, args.in_flight)
        return Figures(policy, latencies, per_second, args.in_flight)
    finally:
        await redis.aclose()
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


async def one_at_a_time(ingest: Ingest, policy: str, count: int, tag: str) -> list[float]:
    latencies = []
    for number in range(count):
        message = inbound(f"{policy}-{tag}-{number}", "a message to keep", number)
        started = time.perf_counter()
        outcome = await ingest.receive(message)
        latencies.append(time.perf_counter() - started)
        assert outcome is Receipt.QUEUED, outcome
    return latencies


async def in_flight(ingest: Ingest, policy: str, count: int, width: int) -> float:
    """Messages per second with `width` senders at once (as a busy webhook sees them)."""
    numbers = iter(range(count))

    async def sender() -> None:
        for number in numbers:
            message = inbound(f"{policy}-par-{number}", "a message to keep", number)
            assert await ingest.receive(message) is Receipt.QUEUED

    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(width)))
    return count / (time.perf_counter() - started)


def file_system(path: str | None) -> str:
    where = path or tempfile.gettempdir()
    result = subprocess.run(["df", "-T", where], capture_output=True, text=True)
    lines = result.stdout.strip().splitlines()
    kind = lines[-1].split()[1] if result.returncode == 0 and len(lines) > 1 else "unknown"
    return f"{where} ({kind})"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=2000, help="messages per policy")
    parser.add_argument("--warm-up", type=int, default=200, help="unmeasured messages first")
    parser.add_argument("--in-flight", type=int, default=32, help="senders at once")
    parser.add_argument("--dir", default=None, help="where the servers keep their files")
    return parser.parse_args(argv)


async def amain(args: argparse.Namespace) -> None:
    print(
        f"durability: {args.messages} messages per policy through Ingest.receive, "
        f"embedded redis-server in {file_system(args.dir)}"
    )
    figures = {}
    for policy in FSYNC_POLICIES:
        figures[policy] = await measure(policy, args)
        print(figures[policy].line(), flush=True)
    always, baseline = figures["always"], figures[BASELINE]
    ratio = statistics.median(always.latencies) / statistics.median(baseline.latencies)
    p99_ratio = percentile(always.latencies, 99) / percentile(baseline.latencies, 99)
    print(
        f"always/{BASELINE}: median {ratio:.2f}x, p99 {p99_ratio:.2f}x one at a time; "
        f"{always.per_second / baseline.per_second:.2f}x the messages/s "
        f"with {args.in_flight} in flight"
    )


def main(argv: list[str] | None = None) -> None:
    asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    main()

"""What waiting for a replica before acknowledging an event costs (GATEWAY_REDIS_WAIT_REPLICAS).

Drives the real ingest path (`Ingest.receive`: dedupe, append and enqueue, then,
with the setting, one pipelined SET + WAIT) against a primary with one replica on
loopback, reached two ways: as one server (`redis://`) and through a Sentinel set
(`redis+sentinel://`, three sentinels). For each, with the wait off and with
`WAIT 1`, prints the cost of one message acknowledged after the other (median and
p99, in µs) and the messages per second with many in flight, then what the wait
adds. WAITAOF is measured when the server has it (Redis 7.2 and later), with the
replica's append-only file synced on every write.

    python bench/wait_replicas.py [--messages 2000] [--in-flight 32] [--no-aof]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import inbound, percentile  # noqa: E402
from gateway.inbound.ingest import Ingest, Receipt  # noqa: E402
from gateway.settings.env import Settings  # noqa: E402
from gateway.state.keys import connect  # noqa: E402
from tests.support.sentinel import SentinelSet  # noqa: E402


@dataclass
class Figures:
    name: str
    latencies: list[float]
    per_second: float

    def line(self, width: int) -> str:
        median = statistics.median(self.latencies) * 1e6
        p99 = percentile(self.latencies, 99) * 1e6
        return (
            f"{self.name:<26} one at a time: median {median:8.1f} µs  p99 {p99:8.1f} µs"
            f"   {width} in flight: {self.per_second:8.0f} messages/s"
        )


async def measure(name: str, url: str, args: argparse.Namespace, **values: object) -> Figures:
    redis = connect(url)
    try:
        settings = Settings(_env_file=None, REDIS_URL=url, **values)  # type: ignore[arg-type]
        ingest = Ingest(settings, redis)
        await one_at_a_time(ingest, name, args.warm_up, "warm")
        latencies = await one_at_a_time(ingest, name, args.messages, "seq")
        per_second = await in_flight(ingest, name, args.messages, args.in_flight)
        return Figures(name, latencies, per_second)
    finally:
        await redis.aclose()


async def one_at_a_time(ingest: Ingest, name: str, count: int, tag: str) -> list[float]:
    latencies = []
    for number in range(count):
        message = inbound(f"{name}-{tag}-{number}", "a message to keep", number)
        started = time.perf_counter()
        outcome = await ingest.receive(message)
        latencies.append(time.perf_counter() - started)
        assert outcome is Receipt.QUEUED, outcome
    return latencies


async def in_flight(ingest: Ingest, name: str, count: int, width: int) -> float:
    numbers = iter(range(count))

    async def sender() -> None:
        for number in numbers:
            message = inbound(f"{name}-par-{number}", "a message to keep", number)
            assert await ingest.receive(message) is Receipt.QUEUED

    started = time.perf_counter()
    await asyncio.gather(*(sender() for _ in range(width)))
    return count / (time.perf_counter() - started)


def server_version(port: int) -> tuple[int, ...]:
    import redis

    client = redis.Redis(port=port)
    try:
        return tuple(int(p) for p in str(client.info("server")["redis_version"]).split("."))
    finally:
        client.close()


async def amain(args: argparse.Namespace) -> None:
    replicas = SentinelSet(appendonly=not args.no_aof).start()
    try:
        primary = replicas.primary_port()
        version = server_version(primary or 0)
        print(
            f"wait_replicas: {args.messages} messages per row through Ingest.receive, a primary "
            f"and one replica ({'in memory' if args.no_aof else 'append-only, fsync always'}), "
            "redis-server "
            f"{'.'.join(map(str, version))}, loopback"
        )
        rows: list[Figures] = []
        for mode, url in (
            ("standalone", f"redis://127.0.0.1:{primary}/0"),
            ("sentinel", replicas.url),
        ):
            for wait, values in (("off", {}), ("WAIT 1", {"GATEWAY_REDIS_WAIT_REPLICAS": 1})):
                rows.append(await measure(f"{mode}, wait {wait}", url, args, **values))
                print(rows[-1].line(args.in_flight), flush=True)
            if version >= (7, 2):
                aof = {"GATEWAY_REDIS_WAIT_REPLICAS": 1, "GATEWAY_REDIS_WAIT_AOF": True}
                rows.append(await measure(f"{mode}, wait WAITAOF", url, args, **aof))
                print(rows[-1].line(args.in_flight), flush=True)
        if version < (7, 2):
            print("WAITAOF: not measured, this server has no WAITAOF (Redis 7.2 and later)")
        for off, on in ((rows[0], rows[1]), (rows[-2], rows[-1])):
            added = statistics.median(on.latencies) - statistics.median(off.latencies)
            print(
                f"{on.name}: +{added * 1e6:.0f} µs a message one at a time "
                f"({statistics.median(on.latencies) / statistics.median(off.latencies):.2f}x), "
                f"{on.per_second / off.per_second:.2f}x the messages/s in flight"
            )
    finally:
        replicas.stop()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=2000, help="messages per row")
    parser.add_argument("--warm-up", type=int, default=200, help="unmeasured messages first")
    parser.add_argument("--in-flight", type=int, default=32, help="senders at once")
    parser.add_argument("--no-aof", action="store_true", help="servers without append-only files")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    main()

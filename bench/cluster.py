"""One Redis against a Redis Cluster of three primaries (a replica each), in the same run.

For each, the real Ingest and Worker run in this process (the offline `echo` model,
so the turn is the gateway's own work: ingest, the job stream, claim, delivery,
record) and closed-loop users send their next message the moment their reply is
final. Reported, for each:

- *turns/s*: turns answered per second over the measured window;
- *commands/turn*: the commands the gateway's clients sent Redis (MONITOR on each
  primary, counted over a run of its own: a script's own commands are not round
  trips and are not counted; a pipeline's commands count one each, so this is an
  upper bound on the round trips);
- on the cluster, a primary is then SIGKILLed under the same load: the time to the
  first answer to a message sent after it, of any session and of a session whose
  shard was on the dead primary (its replica is promoted after the node timeout), and
  how many messages that had been taken in (ingest returned) were never answered, or
  answered in two posts: with asynchronous replication, what the dead primary had not
  yet passed on is lost.

Targets: the cluster's turns/s at least 0.8 x the single Redis's; answers again
within 15 s of the primary's death.

    python bench/cluster.py [--sessions 32] [--seconds 10] [--shards 16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis
from common import PLATFORM, BenchSender, inbound, start_redis, wait_redis
from redis.exceptions import RedisError

from gateway.errors import StoreUnavailable
from gateway.inbound.ingest import Ingest
from gateway.messages import Address
from gateway.settings.env import Settings
from gateway.state import shards
from gateway.state.keys import connect
from gateway.worker import Worker
from tests.support.clusters import Cluster, start_cluster

NODE_TIMEOUT_MS = 2000
TURN_PATIENCE = 20.0  # seconds a user waits for a reply before sending again


@dataclass
class FinalSender(BenchSender):
    """Wakes each session's user when its reply is final; counts each message's posts."""

    done: dict[str, asyncio.Event] = field(default_factory=dict)
    posts: Counter[str] = field(default_factory=Counter)  # messages posted, by message number
    answered_at: dict[str, float] = field(default_factory=dict)  # the first final's time

    async def send(
        self,
        address: Address,
        markdown: str,
        *,
        final: bool,
        key: str | None = None,
        feedback: bool = False,
    ) -> str:
        """A new message: a reply posted twice for one message is a duplicate (a re-run's
        edits of the message it found are not)."""
        self.posts[str(address.reply_to)] += 1
        return await super().send(address, markdown, final=final, key=key, feedback=feedback)

    def record(self, address: Address, markdown: str, final: bool) -> None:
        if final:
            number = str(address.reply_to)
            self.answered_at.setdefault(number, time.monotonic())
            event = self.done.get(address.channel)
            if event is not None:
                event.set()


@dataclass
class Load:
    """Closed-loop users over one gateway; every answered turn's time, by session."""

    ingest: Ingest
    sender: FinalSender
    answers: list[tuple[float, str]] = field(default_factory=list)  # (monotonic, channel)
    taken_at: dict[str, float] = field(default_factory=dict)  # by message number
    sent: dict[str, tuple[float, str]] = field(default_factory=dict)  # first try, channel
    numbers: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    async def user(self, channel: str, stop: asyncio.Event) -> None:
        while not stop.is_set():
            event = self.sender.done[channel] = asyncio.Event()
            await self._send(channel, stop)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TURN_PATIENCE):
                    await event.wait()
                    self.answers.append((time.monotonic(), channel))

    async def _send(self, channel: str, stop: asyncio.Event) -> None:
        """As a platform does: again after a failure (a 503), until it is taken."""
        number = next(self.numbers)
        self.sent[str(number)] = (time.monotonic(), channel)
        while not stop.is_set():
            try:
                await self.ingest.receive(inbound(channel, "hello", number))
                self.taken_at[str(number)] = time.monotonic()
                return
            except (StoreUnavailable, RedisError, OSError):
                await asyncio.sleep(0.2)


def settings_for(url: str) -> Settings:
    values: dict[str, Any] = {
        "_env_file": None,
        "REDIS_URL": url,
        "GATEWAY_MODEL_PROCESSES": 0,
        "GATEWAY_LEASE_TTL": 5,
    }
    return Settings(**values)


@contextlib.asynccontextmanager
async def gateway(url: str) -> Any:
    """Ingest and a worker on `url`, until the block ends."""
    client = connect(url)
    sender = FinalSender()
    settings = settings_for(url)
    worker = Worker(settings, client, {PLATFORM: sender})
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop, grace=0))
    await worker.ready.wait()
    try:
        yield Load(Ingest(settings, client), sender)
    finally:
        stop.set()
        await running
        await client.aclose()


async def throughput(url: str, sessions: int, seconds: float) -> float:
    """Turns per second over `seconds`, after a second of warming up."""
    async with gateway(url) as load:
        stop = asyncio.Event()
        users = [asyncio.create_task(load.user(f"c{i}", stop)) for i in range(sessions)]
        await asyncio.sleep(1.0)
        before = len(load.answers)
        await asyncio.sleep(seconds)
        turns = len(load.answers) - before
        stop.set()
        await asyncio.gather(*users)
    return turns / seconds


class Monitor:
    """MONITOR on some nodes, in threads: the commands clients sent (not a script's own)."""

    def __init__(self, ports: list[int]) -> None:
        self.sent: Counter[str] = Counter()
        self.counting = False
        self.clients = [redis.Redis(host="127.0.0.1", port=port) for port in ports]
        for client in self.clients:
            threading.Thread(target=self._listen, args=(client,), daemon=True).start()

    def _listen(self, client: redis.Redis) -> None:
        with contextlib.suppress(redis.ConnectionError), client.monitor() as monitor:
            for item in monitor.listen():
                if self.counting and item.get("client_type") != "lua":
                    self.sent[str(item.get("command", "")).split(" ", 1)[0].lower()] += 1

    def close(self) -> None:
        for client in self.clients:
            client.close()


async def commands_per_turn(url: str, ports: list[int], turns: int = 200) -> tuple[float, str]:
    """Commands a turn costs (8 sessions, `turns` turns), and the commonest of them."""
    monitor = Monitor(ports)
    await asyncio.sleep(0.3)
    async with gateway(url) as load:
        stop = asyncio.Event()
        await asyncio.sleep(0.5)
        monitor.counting = True
        users = [asyncio.create_task(load.user(f"m{i}", stop)) for i in range(8)]
        while len(load.answers) < turns:
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.gather(*users)
        monitor.counting = False
        answered = len(load.answers)
    monitor.close()
    common = ", ".join(
        f"{name} {count / answered:.1f}" for name, count in monitor.sent.most_common(6)
    )
    return sum(monitor.sent.values()) / answered, common


@dataclass
class Failover:
    """What a primary's death did: who was on it, how long until answers came again,
    and each message taken in: answered once, more than once, or never."""

    victim: int
    shards_on_it: int
    sessions_on_it: int
    sessions: int
    first_any: float | None
    first_hit: float | None
    trials: int
    lost: int
    duplicated: int
    worst: float | None

    def line(self) -> str:
        return (
            f"primary :{self.victim} killed ({self.shards_on_it} of {shards.count()} shards, "
            f"{self.sessions_on_it} of {self.sessions} sessions on it): first answer after "
            f"{_seconds(self.first_any)} (any session), {_seconds(self.first_hit)} "
            f"(a session on it); of {self.trials} messages taken in, {self.lost} never "
            f"answered, {self.duplicated} answered in two posts"
        )


async def failover(cluster: Cluster, sessions: int, before: float = 3.0) -> Failover:
    """Kill the primary that serves the most shards under load: the first answers after."""
    victim, on_victim = _busiest_primary(cluster)
    channels = [f"f{i}" for i in range(sessions)]
    hit = [c for c in channels if shards.shard_of(f"{PLATFORM}:bench:{c}") in on_victim]
    async with gateway(cluster.url) as load:
        stop = asyncio.Event()
        users = [asyncio.create_task(load.user(channel, stop)) for channel in channels]
        await asyncio.sleep(before)
        killed = time.monotonic()
        cluster.kill(victim)
        first_any = await _first_answer(load, killed, set(channels))
        first_hit = await _first_answer(load, killed, set(hit))
        await asyncio.sleep(2.0)
        stop.set()
        await asyncio.gather(*users)
        await asyncio.sleep(TURN_PATIENCE)  # what is still owed comes, or is lost
        posts, answered_at = load.sender.posts, load.sender.answered_at
        latencies = [
            answered_at[number] - taken
            for number, taken in load.taken_at.items()
            if number in answered_at
        ]
    return Failover(
        victim,
        len(on_victim),
        len(hit),
        sessions,
        first_any,
        first_hit,
        len(load.taken_at),
        sum(1 for number in load.taken_at if number not in answered_at),
        sum(1 for number in load.taken_at if posts[number] > 1),
        max(latencies) if latencies else None,
    )


async def _first_answer(load: Load, since: float, channels: set[str]) -> float | None:
    """From `since` to the first answer of a message first sent after it, in `channels`:
    the gateway answering again, not a reply that was on its way at the kill."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        answered = [
            load.sender.answered_at[number]
            for number, (at, channel) in list(load.sent.items())
            if at > since and channel in channels and number in load.sender.answered_at
        ]
        if answered:
            return min(answered) - since
        await asyncio.sleep(0.05)
    return None


def _seconds(value: float | None) -> str:
    return "none within 60 s" if value is None else f"{value:.1f} s"


def _busiest_primary(cluster: Cluster) -> tuple[int, set[int]]:
    with cluster.node(cluster.primaries[0]) as node:
        ranges = node.execute_command("CLUSTER SLOTS")
    served: dict[int, set[int]] = {}
    for shard, tag in enumerate(shards.tags()):
        slot = redis.crc.key_slot(f"{{{tag}}}".encode())
        for low, high, primary, *_ in ranges:
            if low <= slot <= high:
                served.setdefault(int(primary[1]), set()).add(shard)
    port = max(served, key=lambda found: len(served[found]))
    return port, served[port]


async def amain(args: argparse.Namespace) -> None:
    shards.configure(args.shards)
    process, single = start_redis()
    cluster = start_cluster(node_timeout_ms=NODE_TIMEOUT_MS)
    try:
        await wait_redis(single)
        single_port = int(single.rsplit(":", 1)[1])
        print(f"{args.sessions} closed-loop sessions, echo model, {args.shards} job shards")
        rates = {}
        for name, url, ports in (
            ("single Redis", single, [single_port]),
            ("cluster (3 primaries)", cluster.url, cluster.primaries),
        ):
            rates[name] = await throughput(url, args.sessions, args.seconds)
            per_turn, common = await commands_per_turn(url, ports)
            print(
                f"{name:22} {rates[name]:7.1f} turns/s   {per_turn:5.1f} commands/turn ({common})"
            )
        ratio = rates["cluster (3 primaries)"] / rates["single Redis"]
        print(
            f"cluster / single: {ratio:.2f} (target >= 0.8: {'ok' if ratio >= 0.8 else 'MISSED'})"
        )
        found = await failover(cluster, args.sessions)
        print(f"failover (node timeout {NODE_TIMEOUT_MS} ms): {found.line()}")
    finally:
        cluster.stop()
        process.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--shards", type=int, default=shards.DEFAULT_SHARDS)
    asyncio.run(amain(parser.parse_args()))


if __name__ == "__main__":
    main()

"""The client on a small Redis Cluster of this file's own (three primaries, no replicas):
the nodes found from one, MOVED and ASK followed, the doctor's report, the wait for
replicas sent to the node of the key. Only the connection's behaviour: what the key
layout does on a cluster is tested with the layout."""

from __future__ import annotations

import socket
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
import redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from gateway.cli.doctor_redis import doctor_redis
from gateway.state import keys
from gateway.state.connection import GuardedConnection
from gateway.state.keys import Keys
from gateway.state.replicas import NotReplicated, ReplicaWait
from tests.support.helpers import settings
from tests.support.redis_servers import free_port, redis_command

SLOTS = 16384


@dataclass
class Cluster:
    ports: list[int]
    processes: list[object]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.ports[0]}"

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, decode_responses=True)

    def node_id(self, port: int) -> str:
        client = self.node(port)
        try:
            return str(client.execute_command("CLUSTER", "MYID"))
        finally:
            client.close()

    def owner(self, slot: int) -> int:
        """The port of the node serving `slot`."""
        client = self.node(self.ports[0])
        try:
            for start, end, primary, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    return int(primary[1])
        finally:
            client.close()
        raise AssertionError(f"slot {slot} is not served")

    def on_every_node(self, *command: object) -> None:
        for port in self.ports:
            client = self.node(port)
            client.execute_command(*command)
            client.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    import subprocess

    ports = [_cluster_port() for _ in range(3)]
    processes = []
    for port in ports:
        data = tempfile.mkdtemp(prefix="gw-cluster-")
        command = redis_command(port, data, "--cluster-enabled", "yes", "--appendonly", "no")
        processes.append(
            subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
    try:
        _form(ports)
        yield Cluster(ports, processes)
    finally:
        for process in processes:
            process.kill()
            process.wait()


def _cluster_port() -> int:
    """A free port whose cluster bus port (10000 above it) is free too."""
    while True:
        port = free_port()
        if port + 10000 < 65536:
            with socket.socket() as bus:
                try:
                    bus.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            return port


def _form(ports: list[int], within: float = 20.0) -> None:
    """Each node a third of the slots, all meeting the first, until every one says ok."""
    clients = [redis.Redis(port=port, decode_responses=True) for port in ports]
    deadline = time.monotonic() + within
    try:
        for client in clients:
            _until(lambda c=client: c.ping(), deadline)
        share = SLOTS // len(ports) + 1
        for number, client in enumerate(clients):
            slots = range(number * share, min(SLOTS, (number + 1) * share))
            client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", number + 1)
            client.execute_command("CLUSTER", "ADDSLOTS", *slots)
            client.execute_command("CLUSTER", "MEET", "127.0.0.1", ports[0])
        for client in clients:
            _until(
                lambda c=client: "cluster_state:ok" in c.execute_command("CLUSTER", "INFO"),
                deadline,
            )
    finally:
        for client in clients:
            client.close()


def _until(condition: object, deadline: float) -> None:
    while True:
        try:
            if condition():  # type: ignore[operator]
                return
        except redis.ConnectionError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            raise RuntimeError("the cluster did not form")
        time.sleep(0.02)


@pytest.fixture
async def client(cluster: Cluster) -> AsyncIterator[RedisCluster]:
    connected = keys.connect(cluster.url)
    assert isinstance(connected, RedisCluster)
    yield connected
    await connected.aclose()


def _key_on(cluster: Cluster, port: int, tag: str) -> tuple[str, int]:
    """A key (of an empty slot) that the node at `port` serves, and its slot."""
    for n in range(10_000):
        key = f"gw:{{{tag}{n}}}:meta"
        slot = key_slot(key.encode())
        if cluster.owner(slot) == port:
            return key, slot
    raise AssertionError("no key found")


async def test_the_nodes_are_found_from_one(cluster: Cluster, client: RedisCluster) -> None:
    for n in range(30):
        await client.set(f"gw:{{s{n}}}:meta", n)
    assert {node.port for node in client.get_primaries()} == set(cluster.ports)
    # what each node connects with knows which commands may be sent again
    assert {node.connection_class for node in client.get_nodes()} == {GuardedConnection}
    assert [int(await client.get(f"gw:{{s{n}}}:meta")) for n in range(30)] == list(range(30))


async def test_a_moved_slot_is_followed(cluster: Cluster, client: RedisCluster) -> None:
    first, second = cluster.ports[0], cluster.ports[1]
    key, slot = _key_on(cluster, first, "moved")
    assert await client.get(key) is None  # the client now knows the slot on `first`
    cluster.on_every_node("CLUSTER", "SETSLOT", slot, "NODE", cluster.node_id(second))
    await client.set(key, "here")  # `first` answers MOVED
    direct = cluster.node(second)
    assert direct.get(key) == "here"
    direct.close()


async def test_an_ask_redirect_during_a_migration_is_followed(
    cluster: Cluster, client: RedisCluster
) -> None:
    source, destination = cluster.ports[2], cluster.ports[0]
    key, slot = _key_on(cluster, source, "asked")
    assert await client.get(key) is None
    to_source, to_destination = cluster.node(source), cluster.node(destination)
    to_destination.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", cluster.node_id(source))
    to_source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", cluster.node_id(destination))
    try:
        await client.set(key, "migrating")  # not on `source`: it answers ASK
        to_destination.execute_command("ASKING")
        assert to_destination.get(key) == "migrating"
        assert to_source.execute_command("CLUSTER", "COUNTKEYSINSLOT", slot) == 0
    finally:
        cluster.on_every_node("CLUSTER", "SETSLOT", slot, "NODE", cluster.node_id(destination))
        to_source.close()
        to_destination.close()


async def test_doctor_lists_every_node_and_loads_the_scripts_on_each_primary(
    cluster: Cluster,
) -> None:
    rows = await doctor_redis(settings(cluster.url))
    assert [(name, ok) for name, ok, _ in rows] == [("redis", True), ("scripts", True)]
    assert rows[0][2] == "cluster: " + ", ".join(
        f"127.0.0.1:{port} primary" for port in sorted(cluster.ports, key=str)
    )
    assert rows[1][2].endswith("load on each of 3 primaries")


async def test_the_wait_for_replicas_goes_to_the_node_of_the_key(
    cluster: Cluster, client: RedisCluster
) -> None:
    port = cluster.ports[1]
    key, _ = _key_on(cluster, port, "waited")
    await client.set(key, "1")
    with pytest.raises(NotReplicated, match="0 of 1 replicas"):
        await ReplicaWait(client, 1, 0.05).confirm(key)
    direct = cluster.node(port)
    assert direct.exists(Keys.acked(key)) == 1  # the mark went where the event's writes are
    direct.close()

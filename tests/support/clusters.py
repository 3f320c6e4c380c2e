"""A real Redis Cluster on loopback, formed here: primaries, a replica of each, no persistence.

    start_cluster()  six redis-servers (cluster-enabled) ─> CLUSTER MEET ─> each primary
                     ADDSLOTS its third of the slots ─> each replica CLUSTER REPLICATE its
                     primary ─> every node says cluster_state:ok, every replica is in sync

tests/conftest.py starts one for the whole run, lazily (only the test process that runs
a cluster test starts it); bench/cluster.py starts its own and kills a primary.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import redis
from redis.asyncio.cluster import RedisCluster
from redis.crc import REDIS_CLUSTER_HASH_SLOTS

from gateway.state import shards
from gateway.state.keys import connect
from tests.support.redis_servers import free_port, redis_command

FORM_WITHIN = 30.0  # seconds for the cluster to form (ok on every node, replicas in sync)


@dataclass
class Cluster:
    """The nodes of one cluster: their processes by port, which are primaries."""

    data: Path
    node_timeout_ms: int
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    primaries: list[int] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The REDIS_URL that names it by its primaries (`redis+cluster://`)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.primaries)

    def client(self) -> RedisCluster:
        """An asyncio cluster client, as the gateway's processes make theirs."""
        return cast(RedisCluster, connect(self.url))

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=5)

    def flush(self) -> None:
        """Every key gone, on every primary (replicas follow)."""
        for port in self.current_primaries():
            with self.node(port) as node:
                node.flushall()

    def current_primaries(self) -> list[int]:
        """The ports of the nodes serving slots now (after a failover, a replica's), as the
        first live node that answers sees it."""
        for port, process in self.processes.items():
            if process.poll() is not None:
                continue
            with self.node(port) as node:
                try:
                    ranges = node.execute_command("CLUSTER SLOTS")
                except redis.RedisError:
                    continue
                return sorted({int(served[2][1]) for served in ranges})
        return []

    def kill(self, port: int) -> None:
        """SIGKILL one node (no goodbye: its replica is promoted after the node timeout)."""
        self.processes[port].kill()
        self.processes[port].wait(timeout=10)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def start_cluster(
    primaries: int = 3, node_timeout_ms: int = 2000, extra: tuple[str, ...] = ()
) -> Cluster:
    """A formed cluster of `primaries` primaries with one replica each."""
    cluster = Cluster(Path(tempfile.mkdtemp(prefix="gw-cluster-")), node_timeout_ms)
    try:
        ports = [_node_port() for _ in range(2 * primaries)]
        for port in ports:
            cluster.processes[port] = _start_node(cluster, port, extra)
        cluster.primaries, cluster.replicas = ports[:primaries], ports[primaries:]
        _form(cluster)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@contextmanager
def cluster_shards(count: int = shards.DEFAULT_SHARDS) -> Iterator[None]:
    """Keys named for `count` shards while the block runs (the suite's own count after)."""
    before = shards.count()
    shards.configure(count)
    try:
        yield
    finally:
        shards.configure(before)


def _node_port() -> int:
    """A free port whose cluster bus port (10000 above it) is free too."""
    while True:
        port = free_port()
        if port + 10000 < 65536 and _free(port + 10000):
            return port


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _start_node(cluster: Cluster, port: int, extra: tuple[str, ...]) -> subprocess.Popen[bytes]:
    data = cluster.data / str(port)
    data.mkdir()
    options = (
        *("--appendonly", "no", "--cluster-enabled", "yes"),
        *("--cluster-config-file", "nodes.conf"),
        *("--cluster-node-timeout", str(cluster.node_timeout_ms)),
        *extra,
    )
    command = redis_command(port, str(data), *options)
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _form(cluster: Cluster) -> None:
    nodes = {port: cluster.node(port) for port in cluster.processes}
    try:
        _until(lambda: all(_pings(node) for node in nodes.values()), "every node answers")
        first = nodes[cluster.primaries[0]]
        for port in cluster.processes:
            first.cluster("MEET", "127.0.0.1", port)
        count = len(cluster.primaries)
        for index, port in enumerate(cluster.primaries):
            low = index * REDIS_CLUSTER_HASH_SLOTS // count
            high = (index + 1) * REDIS_CLUSTER_HASH_SLOTS // count
            nodes[port].cluster("ADDSLOTS", *range(low, high))
        _until(
            lambda: all(len(_nodes(node)) == len(nodes) for node in nodes.values()),
            "every node knows every other",
        )
        for primary, replica in zip(cluster.primaries, cluster.replicas, strict=True):
            nodes[replica].cluster("REPLICATE", nodes[primary].cluster("MYID"))
        _until(lambda: all(_ready(node) for node in nodes.values()), "cluster_state:ok")
    finally:
        for node in nodes.values():
            node.close()


def _pings(node: redis.Redis) -> bool:
    try:
        return bool(node.ping())
    except redis.ConnectionError:
        return False


def _nodes(node: redis.Redis) -> dict[str, str]:
    """CLUSTER NODES as address (`host:port`) -> flags."""
    found = node.execute_command("CLUSTER NODES")
    return {address.split("@")[0]: str(info["flags"]) for address, info in found.items()}


def _ready(node: redis.Redis) -> bool:
    if node.execute_command("CLUSTER INFO").get("cluster_state") != "ok":
        return False
    replication = node.info("replication")
    return replication["role"] == "master" or replication.get("master_link_status") == "up"


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + FORM_WITHIN
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise RuntimeError(f"the test cluster did not form: not {what} within {FORM_WITHIN} s")

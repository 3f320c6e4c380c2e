"""What a client sees of its Redis, for `gateway doctor`: the mode, the nodes and their
roles, and whether every Lua script loads on each primary.

A script that does not load (a server too old for a command it calls, a Lua error, an
ACL user denied SCRIPT or EVALSHA) would fail only when a message first needs it; the
doctor loads them all, on every primary, so that it fails first. Nothing here names a
password: nodes are shown as host:port.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import RedisError

from gateway.state import scripts
from gateway.state.connection import RedisOptions, RedisTarget, sentinel_manager


@dataclass
class Topology:
    """The mode and nodes a client reaches, and the scripts each primary refused."""

    mode: str
    nodes: list[str]  # "host:port role"
    primaries: int
    scripts: int
    refused: dict[str, str] = field(default_factory=dict)  # "<node> <script>" -> error

    def lines(self) -> list[tuple[str, bool, str]]:
        """Doctor rows: (name, ok, detail)."""
        rows = [("redis", True, f"{self.mode}: {', '.join(self.nodes)}")]
        if self.refused:
            first = next(iter(self.refused.items()))
            detail = f"{len(self.refused)} did not load, e.g. {first[0]}: {first[1]}"
            rows.append(("scripts", False, detail))
        else:
            where = f"{self.primaries} primar{'y' if self.primaries == 1 else 'ies'}"
            rows.append(("scripts", True, f"all {self.scripts} load on each of {where}"))
        return rows


def script_names() -> list[str]:
    """Every script (the snippets scripts share, which have no header, left out)."""
    names = []
    for entry in resources.files(scripts.__name__).iterdir():
        if entry.name.endswith(".lua"):
            if entry.read_text().startswith("-- KEYS:"):
                names.append(entry.name.removesuffix(".lua"))
    return sorted(names)


async def survey(client: aioredis.Redis, target: RedisTarget, options: RedisOptions) -> Topology:
    """Ask the nodes what they are and load every script on each primary."""
    if isinstance(client, RedisCluster):
        return await _cluster(client)
    if target.mode == "sentinel":
        nodes = await _sentinel_nodes(target, options)
    else:
        nodes = [await _standalone_node(client, target)]
    refused = await _load_all(client, "primary")
    return Topology(target.mode, nodes, 1, len(script_names()), refused)


async def _standalone_node(client: aioredis.Redis, target: RedisTarget) -> str:
    info = await client.info("replication")
    where = target.describe().removeprefix("standalone ")
    role = "primary" if info.get("role") == "master" else str(info.get("role"))
    return f"{where} {role} ({info.get('connected_slaves', 0)} replicas)"


async def _sentinel_nodes(target: RedisTarget, options: RedisOptions) -> list[str]:
    assert target.service is not None
    manager = sentinel_manager(target, options)
    try:
        host, port = await manager.discover_master(target.service)
        replicas = await manager.discover_slaves(target.service)
        answering = 0
        for sentinel in manager.sentinels:
            try:
                answering += bool(await sentinel.ping())
            except (RedisError, OSError):
                pass  # counted as not answering
    finally:
        for sentinel in manager.sentinels:
            await sentinel.aclose()
    nodes = [f"{_text(host)}:{_text(port)} primary"]
    nodes += [f"{_text(h)}:{_text(p)} replica" for h, p in replicas]
    return [*nodes, f"{answering} of {len(manager.sentinels)} sentinels answer"]


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _cluster(client: RedisCluster) -> Topology:
    await client.initialize()
    nodes = sorted(client.get_nodes(), key=lambda node: node.name)
    refused: dict[str, str] = {}
    for node in client.get_primaries():
        refused |= await _load_all(client, node.name, node)
    shown = [f"{node.name} {_role(node)}" for node in nodes]
    return Topology("cluster", shown, len(client.get_primaries()), len(script_names()), refused)


def _role(node: ClusterNode) -> str:
    return "primary" if node.server_type == "primary" else "replica"


async def _load_all(client: Any, where: str, node: ClusterNode | None = None) -> dict[str, str]:
    refused = {}
    for name in script_names():
        source = scripts.load(name).source
        expected = hashlib.sha1(source.encode()).hexdigest()
        try:
            if node is None:
                sha = await client.script_load(source)
            else:
                sha = await client.execute_command("SCRIPT LOAD", source, target_nodes=node)
        except RedisError as exc:
            refused[f"{where} {name}"] = str(exc).splitlines()[0][:200]
            continue
        if sha != expected:
            refused[f"{where} {name}"] = f"loaded as {sha}, expected {expected}"
    return refused

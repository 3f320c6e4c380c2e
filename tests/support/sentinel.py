"""A Sentinel set on loopback: one primary, one replica, three sentinels watching them.

Started from the same `redis-server` binary the tests use (`--sentinel` makes it a
sentinel). `SentinelSet.start()` returns once every sentinel knows the replica and
the other two sentinels, so a failover can be asked for at once; `url` is the
`redis+sentinel://` URL the gateway takes. The drills start one of their own and
kill its primary; tests share one per run (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from gateway.state.embedded_redis import find_redis_server
from tests.support.redis_servers import free_port, redis_command

SERVICE = "gw"
DOWN_AFTER_MS = 1000  # how long a primary may not answer before it counts as down
FAILOVER_TIMEOUT_MS = 5000


@dataclass
class SentinelSet:
    """The processes of one Sentinel set and where they listen."""

    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gw-sentinel-")))
    data_ports: list[int] = field(default_factory=lambda: [free_port(), free_port()])
    sentinel_ports: list[int] = field(default_factory=lambda: [free_port() for _ in range(3)])
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    commands: dict[int, list[str]] = field(default_factory=dict)
    appendonly: bool = False

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}"

    def start(self, within: float = 30.0) -> SentinelSet:
        primary, replica = self.data_ports
        self._data_node(primary)
        self._data_node(replica, "--replicaof", "127.0.0.1", str(primary))
        for port in self.sentinel_ports:
            self._sentinel(port, primary)
        try:
            self.wait_ready(within)
        except BaseException:
            self.stop()
            raise
        return self

    def _data_node(self, port: int, *extra: str) -> None:
        data = self.workdir / str(port)
        data.mkdir(exist_ok=True)
        persistence = ["--appendonly", "yes", "--appendfsync", "always"] if self.appendonly else []
        self._spawn(port, redis_command(port, str(data), *persistence, *extra))

    def _sentinel(self, port: int, primary: int) -> None:
        config = self.workdir / f"sentinel-{port}.conf"
        config.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {self.workdir}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        command = [find_redis_server(), str(config), "--sentinel"]
        self._spawn(port, command)

    def _spawn(self, port: int, command: list[str]) -> None:
        self.commands[port] = command
        with (self.workdir / f"{port}.log").open("ab") as log:
            self.processes[port] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def wait_ready(self, within: float) -> None:
        """Until every sentinel names a primary with a replica in sync and two peers."""
        deadline = time.monotonic() + within
        while not self._ready():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the Sentinel set did not form; logs in {self.workdir}")
            time.sleep(0.05)

    def _ready(self) -> bool:
        for port in self.sentinel_ports:
            state = self._ask(port, "SENTINEL", "MASTER", SERVICE)
            if not state or int(state.get("num-other-sentinels", 0)) < 2:
                return False
            if int(state.get("num-slaves", 0)) < 1 or "s_down" in state.get("flags", ""):
                return False
        primary = self.primary_port()
        role = self._ask(primary, "ROLE") if primary else None
        return bool(role) and role[0] == "master" and len(role[2]) >= 1

    def _ask(self, port: int, *command: str) -> object:
        client = redis.Redis(port=port, decode_responses=True, socket_timeout=1)
        try:
            reply = client.execute_command(*command)
            if command[:2] == ("SENTINEL", "MASTER") and isinstance(reply, list):
                return dict(zip(reply[::2], reply[1::2], strict=False))
            return reply
        except redis.RedisError:
            return None
        finally:
            client.close()

    def primary_port(self) -> int | None:
        """The port of the primary the first answering sentinel names."""
        return next(filter(None, map(self._named_by, self.sentinel_ports)), None)

    def _named_by(self, sentinel: int) -> int | None:
        """The port of the primary `sentinel` names; None when it does not answer."""
        found = self._ask(sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
        return int(found[1]) if isinstance(found, list | tuple) and len(found) == 2 else None

    def replica_port(self) -> int:
        """The data node that is not the primary."""
        primary = self.primary_port()
        return next(port for port in self.data_ports if port != primary)

    def kill(self, port: int) -> None:
        """SIGKILL a node: no shutdown, no final write."""
        process = self.processes.get(port)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def restart(self, port: int) -> None:
        """Start a killed node again, as it was started: the sentinels make a former
        primary a replica of the new one."""
        self._spawn(port, self.commands[port])

    def rejoin(self, port: int, within: float = 30.0) -> None:
        """Start a killed node again as a replica of the primary every sentinel names: how
        a node whose data died with it comes back. Started as it was (`restart`), a former
        primary without persistence is an empty primary until the sentinels demote it, and
        a second failover in that while can elect it and wipe the set (Redis's Sentinel
        documentation warns against restarting such a primary on its own)."""
        deadline = time.monotonic() + within
        while (primary := self._agreed_primary()) in (None, port):
            if time.monotonic() > deadline:
                raise RuntimeError("the sentinels do not agree on a new primary")
            time.sleep(0.05)
        self._data_node(port, "--replicaof", "127.0.0.1", str(primary))

    def _agreed_primary(self) -> int | None:
        """The primary's port when every sentinel names the same one."""
        named = {self._named_by(sentinel) for sentinel in self.sentinel_ports}
        return named.pop() if len(named) == 1 else None

    def failover(self, within: float = 30.0) -> int:
        """A coordinated failover (SENTINEL FAILOVER): the replica promoted, the old
        primary demoted to its replica. The new primary's port."""
        before = self.primary_port()
        self._ask(self.sentinel_ports[0], "SENTINEL", "FAILOVER", SERVICE)
        deadline = time.monotonic() + within
        while (after := self.primary_port()) in (before, None) or not self._ready():
            if time.monotonic() > deadline:
                raise RuntimeError("the failover did not complete")
            time.sleep(0.05)
        assert after is not None
        return after

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
            if process.poll() is None:
                process.kill()
                process.wait()

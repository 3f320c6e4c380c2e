"""The Redis client: one URL, three shapes, each through redis-py's own client for it.

    redis://[user:password@]host:port[/db]                          one server
    unix:///path/to/redis.sock[?db=N]                               one server (the embedded one)
    redis+sentinel://[user:password@]host:port,host:port/service[/db]
                                                                    the primary a Sentinel set names
    redis+cluster://[user:password@]host:port,host:port             a Redis Cluster

`rediss` in place of `redis` (`rediss+sentinel://`, `rediss+cluster://`) turns on
TLS, with the server's certificate and host name checked against the system's
authorities or `GATEWAY_REDIS_CA_FILE`. Sentinels are asked over the same TLS
settings and without the password, which is the data nodes'.

What is retried. An error after which the server cannot have run the command is
retried with backoff for about `GATEWAY_REDIS_RETRY_SECONDS`: a connection that
could not be opened, a MOVED or ASK redirect, TRYAGAIN, CLUSTERDOWN, a primary
that became a replica (READONLY; Sentinel's "master is now a slave"), a server
still loading. A connection that dropped after a command was sent leaves its
outcome unknown: it is repeated only when the command is safe to repeat (a read,
or one whose repeat changes nothing, `REPEATABLE`); any other raises
`OutcomeUnknown`, a `ConnectionError`, which takes the path every Redis outage
takes (the platform is answered 503 and delivers the event again, and ingest's
dedupe makes the second delivery a no-op).

Long because: the URL's grammar (`parse_url`), the three clients `connect` builds from
it and the retry policy they share (`BoundedRetry`, `_Guarded`) are one decision about
how the gateway reaches Redis; split, each part would name the others' details.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import (
    BlockingConnectionPool,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import (
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.backoff import ExponentialBackoff
from redis.exceptions import BusyLoadingError, ReadOnlyError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

Mode = Literal["standalone", "sentinel", "cluster"]
T = TypeVar("T")

# Commands whose repeat after an unknown outcome changes nothing: reads, and the
# handshake and admin commands a client sends on its own. Scripts are not among
# them: a repeated EVALSHA may append twice.
REPEATABLE = frozenset(
    """
    GET MGET STRLEN EXISTS TYPE TTL PTTL HGET HMGET HGETALL HEXISTS HLEN HKEYS HVALS
    LRANGE LLEN LINDEX SMEMBERS SISMEMBER SMISMEMBER SCARD ZRANGE ZRANGEBYSCORE
    ZREVRANGE ZREVRANGEBYSCORE ZSCORE ZMSCORE ZCARD ZCOUNT ZRANK ZREVRANK XRANGE
    XREVRANGE XLEN XINFO XPENDING SCAN HSCAN SSCAN ZSCAN KEYS DBSIZE PING ECHO INFO
    TIME ROLE HELLO AUTH SELECT CLIENT READONLY ASKING CLUSTER COMMAND CONFIG WAIT
    WAITAOF EVALSHA_RO EVAL_RO SCRIPT SENTINEL MEMORY OBJECT
    """.split()
)
CONNECT_TIMEOUT = 2.0
DEFAULT_PORT = {"standalone": 6379, "sentinel": 26379, "cluster": 6379}


class OutcomeUnknown(RedisConnectionError):
    """The connection dropped after a command that is not safe to repeat was sent: it may
    or may not have run. Never retried; callers see a Redis outage."""


@dataclass(frozen=True)
class RedisTarget:
    """What `REDIS_URL` names: the mode, the nodes to ask first, and how to log in."""

    mode: Mode
    nodes: tuple[tuple[str, int], ...]
    tls: bool = False
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    db: int = 0
    service: str | None = None  # Sentinel: the name of the primary's set
    url: str = field(default="", repr=False)  # as given (standalone: redis-py reads it)

    def describe(self) -> str:
        """The target for a log line or an error: mode and nodes, never a password."""
        nodes = ",".join(f"{host}:{port}" for host, port in self.nodes) or redact_url(self.url)
        tls = " over TLS" if self.tls else ""
        service = f" service {self.service}" if self.service else ""
        return f"{self.mode} {nodes}{service}{tls}"


@dataclass(frozen=True)
class RedisOptions:
    """How to connect, beside the URL: settings read once at the edge."""

    ca_file: Path | None = None
    retry_seconds: float = 10.0
    max_connections: int = 256


def parse_url(url: str) -> RedisTarget:
    """Read `REDIS_URL`; a ValueError (naming no password) when it is not one of the shapes."""
    scheme, sep, _ = url.partition("://")
    base, _, mode_text = scheme.lower().partition("+")
    if not sep or base not in ("redis", "rediss", "unix"):
        raise ValueError(f"{redact_url(url)} is not a redis://, rediss:// or unix:// URL")
    if base == "unix" or not mode_text:
        if mode_text:
            raise ValueError("a unix socket names one server: unix:///path")
        return RedisTarget("standalone", _single_node(url), tls=base == "rediss", url=url)
    if mode_text not in ("sentinel", "cluster"):
        raise ValueError(f"unknown mode {mode_text!r}: use redis+sentinel:// or redis+cluster://")
    mode: Mode = "sentinel" if mode_text == "sentinel" else "cluster"
    return _multi_node(url, mode, tls=base == "rediss")


def _single_node(url: str) -> tuple[tuple[str, int], ...]:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return ()
    return ((parts.hostname or "localhost", parts.port or DEFAULT_PORT["standalone"]),)


def _multi_node(url: str, mode: Mode, tls: bool) -> RedisTarget:
    rest = url.partition("://")[2]
    if "?" in rest:
        raise ValueError(f"{redact_url(url)}: query parameters are not read; use the settings")
    authority, _, path = rest.partition("/")
    creds, at, hosts = authority.rpartition("@")
    username, password = _credentials(creds) if at else (None, None)
    nodes = tuple(_host_port(item, mode, url) for item in hosts.split(",") if item)
    if not nodes:
        raise ValueError(f"{redact_url(url)} names no host")
    segments = [unquote(s) for s in path.split("/") if s]
    service, db = None, 0
    if mode == "sentinel":
        if not segments:
            raise ValueError(f"{redact_url(url)}: a Sentinel URL ends in /<service name>")
        service, segments = segments[0], segments[1:]
    if segments:
        if mode == "cluster" or len(segments) > 1 or not segments[0].isdigit():
            raise ValueError(f"{redact_url(url)}: unexpected path /{'/'.join(segments)}")
        db = int(segments[0])
    return RedisTarget(mode, nodes, tls, username, password, db, service, url)


def _credentials(creds: str) -> tuple[str | None, str | None]:
    user, colon, password = creds.partition(":")
    if not colon:
        return None, unquote(user) or None  # redis://secret@host: a password alone
    return unquote(user) or None, unquote(password)


def _host_port(item: str, mode: Mode, url: str) -> tuple[str, int]:
    parts = urlsplit(f"//{item}")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{redact_url(url)}: {item!r} has no valid port") from None
    if not parts.hostname:
        raise ValueError(f"{redact_url(url)}: {item!r} has no host")
    return parts.hostname, port or DEFAULT_PORT[mode]


def redact_url(url: str) -> str:
    """`redis://user:secret@host` -> `redis://user:***@host`."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.partition("/")[0]:
        return url
    authority, slash, path = rest.partition("/")
    creds, _, host = authority.rpartition("@")
    user = creds.split(":", 1)[0]
    shown = f"{user}:***" if ":" in creds else "***"
    return f"{scheme}://{shown}@{host}{slash}{path}"


# -- retries -----------------------------------------------------------------------------------


class BoundedRetry(Retry):
    """redis-py's retry with backoff, ending once the next attempt would start after
    `seconds`, and never repeating a command whose outcome is unknown."""

    def __init__(self, seconds: float) -> None:
        super().__init__(ExponentialBackoff(cap=1.0, base=0.05), retries=-1)
        self.seconds = seconds

    async def call_with_retry(
        self,
        do: Callable[[], Awaitable[T]],
        fail: Callable[..., Any],
        is_retryable: Callable[[Exception], bool] | None = None,
        with_failure_count: bool = False,
    ) -> T:
        deadline = time.monotonic() + self.seconds
        failures = 0
        while True:
            try:
                return await do()
            except (RedisConnectionError, RedisTimeoutError, BusyLoadingError) as error:
                failures += 1
                await (fail(error, failures) if with_failure_count else fail(error))
                delay = self._backoff.compute(failures)
                if (
                    isinstance(error, OutcomeUnknown)
                    or (is_retryable is not None and not is_retryable(error))
                    or time.monotonic() + delay > deadline
                ):
                    raise
                await asyncio.sleep(delay)

    def get_retries(self) -> int:
        """The attempts whose backoff fits in `seconds` (what a cluster client counts)."""
        failures, waited = 0, 0.0
        while waited + self._backoff.compute(failures + 1) <= self.seconds:
            failures += 1
            waited += self._backoff.compute(failures)
        return failures


# -- connections that know whether what they sent may be sent again ---------------------------


def _repeatable(args: Iterable[Any]) -> bool:
    for arg in args:
        name = arg.decode() if isinstance(arg, bytes) else str(arg)
        return name.split(" ", 1)[0].upper() in REPEATABLE
    return True


def _not_run(error: Exception) -> bool:
    """A connection error that a refusal to run the command turned into (Sentinel's
    demoted primary, a blocked read it unblocked)."""
    return isinstance(error.__context__, ResponseError)


class _Guarded:
    """Marks what the connection sent: a drop after a command that is not safe to
    repeat raises OutcomeUnknown. A READONLY reply (a primary that became a replica)
    becomes a ConnectionError: the client looks for the primary again and retries."""

    _packed_repeatable = True
    _sent_repeatable = True

    def pack_command(self, *args: Any) -> Any:
        self._packed_repeatable = _repeatable(args)
        return super().pack_command(*args)  # type: ignore[misc]

    def pack_commands(self, commands: Iterable[Iterable[Any]]) -> Any:
        commands = [list(command) for command in commands]
        self._packed_repeatable = all(_repeatable(command) for command in commands)
        return super().pack_commands(commands)  # type: ignore[misc]

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        repeatable = self._packed_repeatable  # before a reconnect's handshake packs its own
        await super().send_packed_command(command, check_health)  # type: ignore[misc]
        self._sent_repeatable = repeatable

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except ReadOnlyError:
            await self.disconnect()  # type: ignore[attr-defined]
            raise RedisConnectionError("the node is no longer a primary") from None
        except (RedisConnectionError, RedisTimeoutError) as exc:
            if self._sent_repeatable or isinstance(exc, OutcomeUnknown) or _not_run(exc):
                raise
            raise OutcomeUnknown(f"the connection dropped mid-command: {exc}") from exc


class GuardedConnection(_Guarded, Connection):
    pass


class GuardedSSLConnection(_Guarded, SSLConnection):
    pass


class GuardedUnixConnection(_Guarded, UnixDomainSocketConnection):
    pass


class _AsksTheSentinels:
    """A dropped connection to a Sentinel set's primary is made again to the primary the
    sentinels name now. redis-py makes it again to the address it had (a reconnect
    inside a command's retry skips the sentinels: redis/redis-py#3874), which after a
    failover is the old primary: demoted, or back from a crash empty and a primary
    until the sentinels demote it, seconds later, taking every write made to it then."""

    connection_pool: SentinelConnectionPool
    host: str
    port: int
    _address_given = False

    async def connect_to(self, address: tuple[str, int]) -> None:
        self._address_given = True  # just asked of the sentinels (redis-py's own connect)
        try:
            await super().connect_to(address)  # type: ignore[misc]
        finally:
            self._address_given = False

    async def _connect(self) -> None:
        if self.connection_pool.is_master and not self._address_given:
            self.host, self.port = await self.connection_pool.get_master_address()  # type: ignore[no-untyped-call]
        await super()._connect()  # type: ignore[misc]


class GuardedSentinelConnection(_Guarded, _AsksTheSentinels, SentinelManagedConnection):
    pass


class GuardedSentinelSSLConnection(_Guarded, _AsksTheSentinels, SentinelManagedSSLConnection):
    pass


class BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """Sentinel's pool (the primary found through the sentinels), blocking like the
    standalone one when every connection is busy."""


class SentinelPrimary(aioredis.Redis):
    """The client of a Sentinel set's primary: closing it closes the sentinels' clients
    too (redis-py leaves them open)."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        try:
            await super().aclose(close_connection_pool)
        finally:
            pool = self.connection_pool
            assert isinstance(pool, SentinelConnectionPool)
            await pool.sentinel_manager.aclose()


# -- the clients -------------------------------------------------------------------------------


def connect(url: str, options: RedisOptions | None = None) -> aioredis.Redis:
    """The client for `url`: a `Redis` (standalone and Sentinel) or a `RedisCluster`, which
    answers the same commands. The pool blocks (up to 10 s) when every connection is
    busy, so a burst waits for a connection instead of failing."""
    target = parse_url(url)
    options = options or RedisOptions()
    if target.mode == "cluster":
        return _cluster(target, options)  # type: ignore[return-value]
    if target.mode == "sentinel":
        return _sentinel_primary(target, options)
    return _standalone(target, options)


def _common(options: RedisOptions) -> dict[str, Any]:
    return {
        "decode_responses": True,
        "retry": BoundedRetry(options.retry_seconds),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "health_check_interval": 15,
    }


def _tls(options: RedisOptions) -> dict[str, Any]:
    return {
        "ssl_cert_reqs": "required",
        "ssl_check_hostname": True,
        "ssl_ca_certs": str(options.ca_file) if options.ca_file else None,
    }


def _standalone(target: RedisTarget, options: RedisOptions) -> aioredis.Redis:
    extra: dict[str, Any] = {"connection_class": GuardedConnection}
    if target.tls:
        extra = {"connection_class": GuardedSSLConnection, **_tls(options)}
    elif not target.nodes:
        extra = {"connection_class": GuardedUnixConnection}
    pool = BlockingConnectionPool.from_url(
        target.url,
        max_connections=options.max_connections,
        timeout=10,
        **_common(options),
        **extra,
    )
    return aioredis.Redis.from_pool(pool)


def sentinel_manager(target: RedisTarget, options: RedisOptions) -> Sentinel:
    """The sentinels of `target`, asked for the primary's address (TLS as the nodes)."""
    to_sentinels: dict[str, Any] = {"socket_connect_timeout": CONNECT_TIMEOUT}
    if target.tls:
        to_sentinels |= {"ssl": True, **_tls(options)}
    return Sentinel(list(target.nodes), sentinel_kwargs=to_sentinels)


def _sentinel_primary(target: RedisTarget, options: RedisOptions) -> aioredis.Redis:
    assert target.service is not None
    connection_class: type[Connection] = GuardedSentinelConnection
    extra: dict[str, Any] = {}
    if target.tls:
        connection_class, extra = GuardedSentinelSSLConnection, _tls(options)
    return sentinel_manager(target, options).master_for(  # type: ignore[no-any-return]
        target.service,
        redis_class=SentinelPrimary,
        connection_pool_class=BlockingSentinelPool,
        connection_class=connection_class,
        max_connections=options.max_connections,
        timeout=10,
        username=target.username,
        password=target.password,
        db=target.db,
        **_common(options),
        **extra,
    )


def _cluster(target: RedisTarget, options: RedisOptions) -> RedisCluster:
    common = _common(options)
    del common["retry_on_error"]  # the cluster client retries what its retry object says
    cluster = RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
        username=target.username,
        password=target.password,
        max_connections=options.max_connections,
        socket_timeout=None,
        ssl=target.tls,
        **(_tls(options) if target.tls else {}),
        **common,
    )
    # RedisCluster picks its connection class itself; the nodes it finds later are
    # built from this same dict, the ones it starts from were copied already.
    guarded = GuardedSSLConnection if target.tls else GuardedConnection
    cluster.connection_kwargs["connection_class"] = guarded
    for node in cluster.startup_nodes:
        node.connection_class = guarded
    return cluster


def redact_text(text: str, url: str) -> str:
    """`text` (a driver's error message) without the password `url` carries."""
    password = url_password(url)
    return text.replace(password, "***") if password else text


def url_password(url: str) -> str | None:
    """The password `url` carries (decoded), if any."""
    authority = url.partition("://")[2].partition("/")[0]
    creds, at, _ = authority.rpartition("@")
    if not at:
        return None
    user, colon, password = creds.partition(":")
    return unquote(password if colon else user) or None

"""REDIS_URL's shapes, and what the client retries, against real redis-server processes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError

from gateway.errors import ConfigError, StoreUnavailable
from gateway.settings.env import load_settings
from gateway.state import keys
from gateway.state.connection import (
    OutcomeUnknown,
    RedisOptions,
    connect,
    parse_url,
    redact_text,
    redact_url,
)
from tests.support.redis_servers import free_port, start_redis

SECRET = "s3cr%40t"  # percent-encoded "s3cr@t"


@pytest.mark.parametrize(
    ("url", "mode", "nodes", "service", "db", "tls"),
    [
        ("redis://127.0.0.1:6380/2", "standalone", [("127.0.0.1", 6380)], None, 0, False),
        ("rediss://cache.example:6380", "standalone", [("cache.example", 6380)], None, 0, True),
        ("unix:///run/redis.sock?db=3", "standalone", [], None, 0, False),
        (
            f"redis+sentinel://gw:{SECRET}@s1:26380,s2/primary/4",
            "sentinel",
            [("s1", 26380), ("s2", 26379)],
            "primary",
            4,
            False,
        ),
        (
            f"rediss+cluster://:{SECRET}@n1:7000,n2:7001,n3",
            "cluster",
            [("n1", 7000), ("n2", 7001), ("n3", 6379)],
            None,
            0,
            True,
        ),
    ],
)
def test_each_shape_of_url_is_read(
    url: str,
    mode: str,
    nodes: list[tuple[str, int]],
    service: str | None,
    db: int,
    tls: bool,
) -> None:
    target = parse_url(url)
    assert (target.mode, list(target.nodes), target.service, target.tls) == (
        mode,
        nodes,
        service,
        tls,
    )
    if mode != "standalone":  # redis-py reads a standalone URL's database itself
        assert target.db == db
    assert "s3cr" not in repr(target) and "s3cr" not in target.describe()


def test_credentials_are_decoded_and_a_password_alone_is_a_password() -> None:
    target = parse_url(f"redis+sentinel://gw:{SECRET}@s1/primary")
    assert (target.username, target.password) == ("gw", "s3cr@t")
    assert parse_url("redis+cluster://only-secret@n1:7000").password == "only-secret"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://u:hunter2@h:1", "is not a redis"),
        ("redis+shard://u:hunter2@h:1", "unknown mode"),
        ("redis+sentinel://u:hunter2@h:1", "ends in /<service name>"),
        ("redis+cluster://u:hunter2@h:1/3", "unexpected path"),
        ("redis+cluster://u:hunter2@h:port", "no valid port"),
        ("redis+cluster://u:hunter2@h:1?ssl_cert_reqs=none", "query parameters"),
    ],
)
def test_a_wrong_url_fails_at_start_naming_the_setting_and_not_the_password(
    url: str, says: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=None, REDIS_URL=url)
    assert str(caught.value).startswith("REDIS_URL: ")
    assert says in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_redaction_hides_every_form_of_password() -> None:
    assert redact_url("redis://u:pw@h:1/0") == "redis://u:***@h:1/0"
    assert redact_url("redis+cluster://pw@a:1,b:2") == "redis+cluster://***@a:1,b:2"
    assert redact_url("redis+sentinel://a:1,b:2/svc") == "redis+sentinel://a:1,b:2/svc"
    assert redact_url("redis://h:1/0?x=a@b") == "redis://h:1/0?x=a@b"
    assert redact_text("WRONGPASS for s3cr@t", f"redis://u:{SECRET}@h") == "WRONGPASS for ***"


# -- retries, against a server of the test's own ---------------------------------------------


@pytest.fixture
def server() -> Iterator[str]:
    process, url = start_redis()
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)
    client.close()
    yield url
    process.kill()
    process.wait()


@pytest.fixture
async def admin(server: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(server, decode_responses=True)
    yield client
    await client.aclose()


async def _kill_clients_once_blocked(admin: redis.asyncio.Redis, command: str) -> None:
    """CLIENT KILL every connection blocked in `command`, once one is."""
    async with asyncio.timeout(5):
        while True:
            clients = await admin.client_list()
            blocked = [c for c in clients if c["cmd"] == command and "b" in c["flags"]]
            if blocked:
                for found in blocked:
                    await admin.client_kill_filter(_id=found["id"])
                return
            await asyncio.sleep(0.01)


async def test_a_read_whose_connection_drops_midway_is_sent_again(
    server: str, admin: redis.asyncio.Redis
) -> None:
    client = connect(server)
    try:
        # WAIT for a replica this server does not have blocks for its timeout: a
        # command the server has taken and not answered, and safe to repeat.
        waiting = asyncio.create_task(client.execute_command("WAIT", 1, 300))
        await _kill_clients_once_blocked(admin, "wait")
        assert await waiting == 0
    finally:
        await client.aclose()


async def test_a_write_whose_connection_drops_midway_is_not_sent_again(
    server: str, admin: redis.asyncio.Redis
) -> None:
    client = connect(server)
    try:
        popping = asyncio.create_task(client.blpop(["gw:test:list"], timeout=5))
        await _kill_clients_once_blocked(admin, "blpop")
        with pytest.raises(OutcomeUnknown):
            await popping
        # A second BLPOP would have taken what is pushed now.
        await admin.rpush("gw:test:list", "left for another")
        await asyncio.sleep(0.1)
        assert await admin.lrange("gw:test:list", 0, -1) == ["left for another"]
        assert isinstance(OutcomeUnknown("x"), RedisConnectionError)  # an outage to callers
    finally:
        await client.aclose()


async def test_a_server_that_does_not_answer_fails_within_the_retry_time() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    client = connect(url, RedisOptions(retry_seconds=0.5))
    started = time.monotonic()
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await keys.ping(client, url)
    finally:
        await client.aclose()
    assert 0.25 < time.monotonic() - started < 2.0  # retried, and not for longer
    assert "127.0.0.1" in str(caught.value)


async def test_a_write_to_a_demoted_primary_is_retried_then_fails_as_an_outage(
    server: str,
) -> None:
    replica_process, replica_url = start_redis("--replicaof", *server[8:].split(":"))
    client = connect(replica_url, RedisOptions(retry_seconds=0.3))
    try:
        started = time.monotonic()
        with pytest.raises(RedisConnectionError, match="no longer a primary"):
            await _until_up(client.set, "gw:test:key", "value")
        assert time.monotonic() - started < 5
    finally:
        await client.aclose()
        replica_process.kill()
        replica_process.wait()


async def _until_up(call: object, *args: object) -> object:
    """`call(*args)` once the server answers at all (it may still be starting)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return await call(*args)  # type: ignore[operator]
        except RedisConnectionError as exc:
            if "no longer a primary" in str(exc) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def test_a_wrong_password_is_refused_without_showing_it(server: str) -> None:
    url = server.replace("redis://", f"redis://gw:{SECRET}@") + "/0"
    client = connect(url, RedisOptions(retry_seconds=0.2))
    try:
        with pytest.raises(StoreUnavailable) as caught:
            await keys.ping(client, url)
    finally:
        await client.aclose()
    assert "s3cr" not in str(caught.value)
    assert "gw:***@" in str(caught.value)

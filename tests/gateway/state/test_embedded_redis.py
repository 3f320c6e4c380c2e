"""The embedded redis-server: durable before it answers, private on disk, any data dir path,
and never two servers on one data dir."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from gateway.state.embedded_redis import EmbeddedRedis

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis(tmp_path / "data")
    server.start()
    yield server
    server.stop()


def client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


def long_dir(tmp_path: Path, length: int = 200) -> Path:
    """A data dir whose absolute path is `length` characters long."""
    base = str(tmp_path.resolve())
    return Path(base + "/" + "d" * (length - len(base) - 1))


def test_the_embedded_server_writes_each_change_to_disk_before_it_answers(
    embedded: EmbeddedRedis,
) -> None:
    with client(embedded.url) as conn:
        assert conn.config_get("appendonly")["appendonly"] == "yes"
        assert conn.config_get("appendfsync")["appendfsync"] == "always"


def test_data_files_and_logs_are_readable_by_their_owner_only(embedded: EmbeddedRedis) -> None:
    with client(embedded.url) as conn:
        conn.set("k", "v")  # something in the append-only file
    data = embedded.data_dir
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    found = list(data.rglob("*"))
    assert any(p.name == "redis.log" for p in found)
    assert any("appendonly" in p.name for p in found)
    for path in found:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.is_socket():
            assert mode & 0o077 == 0, path
        elif path.is_dir():
            assert mode == 0o700, path
        else:
            assert mode == 0o600, f"{path} is {oct(mode)}"


def test_an_existing_data_dir_open_to_others_is_made_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    old = data / "appendonly.aof"
    old.write_text("")
    old.chmod(0o644)
    server = EmbeddedRedis(data)
    server.start()
    try:
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        assert stat.S_IMODE(old.stat().st_mode) == 0o600
    finally:
        server.stop()


def test_a_data_dir_of_200_characters_works_and_is_shared(tmp_path: Path) -> None:
    data = long_dir(tmp_path)
    assert len(str(data)) == 200
    first = EmbeddedRedis(data)
    url = first.start(timeout=10)
    try:
        with client(url) as conn:
            assert conn.ping()
        second = EmbeddedRedis(data)
        assert second.start(timeout=10) == url and not second.owner
        with client(second.url) as conn:
            assert conn.ping()
    finally:
        first.stop()
    socket_dir = Path(url.removeprefix("unix://")).parent
    assert not socket_dir.exists()  # the short socket directory goes with the server


def test_a_server_left_by_a_killed_owner_is_stopped_before_a_new_one_starts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path;"
            "from gateway.state.embedded_redis import EmbeddedRedis;"
            f"print(EmbeddedRedis(Path({str(data)!r})).start(), flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert owner.stdout is not None
    url = owner.stdout.readline().strip()
    with client(url) as conn:
        conn.set("acknowledged", "before the crash")
        left_pid = int(conn.info("server")["process_id"])
    owner.send_signal(signal.SIGKILL)
    owner.communicate(timeout=10)
    assert alive(left_pid)  # the server outlives its owner (it runs in its own session)

    server = EmbeddedRedis(data)
    server.start()
    try:
        assert server.owner
        wait_gone(left_pid)
        with client(server.url) as conn:
            assert conn.get("acknowledged") == "before the crash"
            assert int(conn.info("server")["process_id"]) != left_pid
    finally:
        server.stop()


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie no longer does)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in {"Z", "X"}


def wait_gone(pid: int, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while alive(pid):
        assert time.monotonic() < deadline, f"process {pid} still runs"
        time.sleep(0.02)

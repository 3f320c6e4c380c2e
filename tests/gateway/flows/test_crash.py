"""Crashes and outages: a worker killed mid-turn, Redis restarted under a running gateway."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from adapters.telegram.inbound import to_inbound
from gateway.inbound.ingest import Ingest
from gateway.state import keys
from gateway.state.keys import GROUP, Keys
from gateway.state.session import SessionStore
from gateway.worker import Worker
from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.support.cli_runs import clean_env
from tests.support.helpers import inbound, settings
from tests.support.recording_sender import RecordingSender
from tests.support.redis_servers import free_port, redis_command
from tests.support.telegram_helpers import GROUP as GROUP_CHAT
from tests.support.telegram_helpers import (
    Gateway,
    environment,
    gateway,
    mention_entities,
    message,
)

pytestmark = pytest.mark.timeout(240)
REPLY = " ".join(f"word{i}" for i in range(40))


async def until(condition: object, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def workers_ready(processes: Gateway, count: int) -> bool:
    text = processes.output()
    return text.count("job streams of telegram") >= count


@pytest.mark.parametrize("chat", [None, GROUP_CHAT], ids=["private-draft", "group-edit"])
async def test_a_worker_killed_mid_turn_is_replaced_and_the_turn_finishes_once(
    tmp_path: Path,
    redis_url: str,
    redis_client: aioredis.Redis,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
    chat: dict[str, object] | None,
) -> None:
    """Killed while its reply streamed: as a draft in a private chat (no message yet), as
    a message edited in place in a group."""
    llm.reply = REPLY
    llm.duration = 4.0
    env = environment(
        redis_url, llm, fake_telegram, free_port(), GATEWAY_LEASE_TTL="2", TELEGRAM_ALLOW_ALL="1"
    )
    chat_id = 42 if chat is None else int(str(chat["id"]))
    text = f"@{fake_telegram.username} tell me a story"
    entities = mention_entities(text, fake_telegram.username) if chat else None
    async with gateway(tmp_path, env, "worker", "worker") as processes:
        await until(lambda: workers_ready(processes, 2), 150, "both workers")
        update = {"update_id": 1, **message(text, chat=chat, entities=entities)}
        inbound = to_inbound(update, fake_telegram.bot_id, fake_telegram.username)
        assert inbound is not None
        ingest = Ingest(settings(redis_url, TELEGRAM_ALLOW_ALL="1"), redis_client)
        await ingest.receive(inbound)

        async def partial_reply_shown() -> bool:
            if chat is None:
                return fake_telegram.draft_shown(chat_id) is not None
            # Posted, and its id stored: from then on a re-run edits it. (A crash
            # between Telegram's answer and that write cannot be told from one
            # before the send, so no run can promise anything there.)
            stored = await redis_client.hlen(Keys.replies(inbound.session_key))
            return bool(fake_telegram.messages_in(chat_id)) and stored > 0

        await until(partial_reply_shown, 30, "the first part of the reply shown")
        pending = await redis_client.xpending_range(Keys.jobs("telegram", 0), GROUP, "-", "+", 10)
        holder = pending[0]["consumer"]
        os.kill(int(holder.split("-")[-2]), signal.SIGKILL)
        sessions = SessionStore(redis_client)

        async def recorded() -> bool:
            history = await sessions.history(inbound.session_key)
            return any(e["role"] == "assistant" for e in history)

        await until(recorded, 60, "the turn to be finished by the other worker")
        await until(lambda: _shows(fake_telegram, chat_id, REPLY), 20, "the full reply")
        history = await sessions.history(inbound.session_key)
    assert [e["role"] for e in history] == ["user", "assistant"]
    assert history[1]["text"] == REPLY
    sends = [c for c in fake_telegram.calls_to("sendMessage") if c.params.get("chat_id") == chat_id]
    assert len(sends) == 1, "the replacement worker posted a second reply"
    assert len(fake_telegram.messages_in(chat_id)) == 1
    assert len(llm.requests) == 2  # the killed turn's call and the re-run


async def _shows(fake_telegram: FakeTelegram, chat_id: int, text: str) -> bool:
    return any(m.text == text for m in fake_telegram.messages_in(chat_id))


def test_redis_restarted_mid_run_loses_no_message(tmp_path: Path) -> None:
    """A gateway keeps working across a Redis restart; what Redis acknowledged survives it."""
    port = free_port()
    command = _durable_redis(port, tmp_path / "redis")
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    env = clean_env(REDIS_URL=f"redis://127.0.0.1:{port}/0")
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway.cli", "run", "--console"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    try:
        assert process.stdin is not None and process.stdout is not None
        _wait_port(port)
        process.stdin.write("before the outage\n")
        process.stdin.flush()
        assert process.stdout.readline().startswith("bot: ")
        server.terminate()
        server.wait(timeout=10)
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        _wait_port(port)
        process.stdin.write("after the outage\n")
        process.stdin.close()
        rest = process.stdout.read()
        assert process.wait(timeout=60) == 0
    finally:
        for proc in (process, server):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if process.stdout is not None:
            process.stdout.close()
    assert rest.startswith("bot: ") and "after the outage" in rest
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    try:
        _wait_port(port)
        shown = subprocess.run(
            [
                sys.executable,
                "-m",
                "gateway.cli",
                "sessions",
                "show",
                "console:local:console",
                "--json",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            cwd=tmp_path,
        )
    finally:
        server.kill()
        server.wait()
    texts = [e["text"] for e in json.loads(shown.stdout) if e["role"] == "user"]
    assert texts == ["before the outage", "after the outage"]


async def test_no_message_is_posted_while_redis_cannot_record_it(
    tmp_path: Path, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """A message posted while Redis is down could not have its id stored, and the turn's
    re-run would post it a second time. Redis stops after the reply's first message:
    nothing more is posted until the turn has given up on Redis, and once Redis is back
    the re-run shows every piece of the reply once."""
    caplog.set_level(logging.WARNING, logger="gateway")
    port = free_port()
    command = _durable_redis(port, tmp_path / "redis")
    server = await asyncio.create_subprocess_exec(*command, stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    _wait_port(port)
    llm.reply = REPLY
    llm.duration = 2.0  # the rest of the reply arrives while Redis is down
    config = settings(
        url,
        GATEWAY_MODEL="openai/main-model",
        GATEWAY_API_BASE=llm.api_base,
        GATEWAY_API_KEY="sk-test-key",
        # Short: a lease that lapses during the outage is taken again (or reclaimed) soon.
        GATEWAY_LEASE_TTL=3.0,
    )
    client = keys.connect(url)  # the production client: it retries through an outage
    # Half a second between flushes: Redis goes down between two of them.
    sender = RecordingSender(max_length=60, edit_interval=0.5)
    worker = Worker(config, client, {"test": sender})
    stop = asyncio.Event()
    running_worker = asyncio.create_task(worker.run(stop))
    try:
        await worker.ready.wait()
        message = inbound("tell me a story")
        await Ingest(config, client).receive(message)
        await sender.wait_for(lambda: any(c.op == "send" for c in sender.calls))
        sessions = SessionStore(client)

        async def flushed() -> bool:  # the first flush is over: its live text is written
            return bool(await sessions.live(message.session_key))

        await until(flushed, 10, "the first flush's live text")
        server.terminate()
        await server.wait()
        down = len(sender.calls)

        async def given_up() -> bool:  # its client's retries are spent: Redis is down
            return any("interrupted by Redis" in r.getMessage() for r in caplog.records)

        await until(given_up, 60, "the turn to give up on Redis")
        assert llm.requests[0].finished_at is not None  # the whole reply had arrived
        assert [c.op for c in sender.calls[down:] if c.op == "send"] == []
        server = await asyncio.create_subprocess_exec(*command, stdout=subprocess.DEVNULL)

        async def recorded() -> bool:
            history = await sessions.history(message.session_key)
            return any(e["role"] == "assistant" for e in history)

        await until(recorded, 60, "the re-run to finish the turn")
    finally:
        stop.set()
        await asyncio.wait_for(running_worker, 30)
        await client.aclose()
        server.kill()
        await server.wait()
    posts = [c for c in sender.calls if c.op == "send"]
    assert len({c.key for c in posts}) == len(posts), "a piece of the reply was posted twice"
    shown = " ".join(sender.messages[c.message_id] for c in posts)
    assert shown.split() == REPLY.split()


def _durable_redis(port: int, data: Path) -> list[str]:
    """A redis-server command that writes every change to its append-only file before
    answering, so that a restart keeps whatever it acknowledged."""
    data.mkdir(exist_ok=True)
    return redis_command(port, str(data), "--appendonly", "yes", "--appendfsync", "always")


def _wait_port(port: int) -> None:
    import socket

    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.02)


def _alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie waiting for its reaper does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


async def test_a_killed_workers_model_process_exits_with_it(
    tmp_path: Path, redis_url: str, llm: FakeLLM, fake_telegram: FakeTelegram
) -> None:
    env = environment(
        redis_url,
        llm,
        fake_telegram,
        free_port(),
        TELEGRAM_ALLOW_ALL="1",
        GATEWAY_MODEL_PROCESSES="1",
    )
    async with gateway(tmp_path, env, "worker") as processes:
        await until(lambda: workers_ready(processes, 1), 150, "the worker")
        found = [
            line
            for line in processes.output().splitlines()
            if "model process" in line and line.endswith(" ready")
        ]
        assert found, processes.output()
        pid = int(found[0].split("model process ")[1].split()[0])
        assert _alive(pid)
        (worker,) = processes.running
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)

        async def gone() -> bool:
            return not _alive(pid)

        await until(gone, 30, "the model process to exit")

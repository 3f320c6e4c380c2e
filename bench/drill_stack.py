"""The real parts a drill runs against, and how it reads what happened.

A drill gets a `Stack`: its own `redis-server` (append-only when the drill
restarts it), `gateway web` and `gateway worker` processes (and `gateway
discord` when asked), all pointed over loopback at the fakes of the model and
of the platforms, which run inside the drill's own process so that it can read
every call they received. Everything a stack started is stopped when it
closes, on failure and on Ctrl-C too; an `atexit` hook kills what a hard exit
would otherwise leave behind.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import json
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common  # first: it puts the project on sys.path
import httpx
import redis
import redis.asyncio as aioredis
from aiohttp import web

from gateway.state import keys
from gateway.state.embedded_redis import find_redis_server
from gateway.state.keys import GROUP, Keys
from tests.fakes.discord_api import FakeDiscord
from tests.fakes.llm_server import FakeLLM
from tests.fakes.llm_shapes import JSON, error_body, last_user_text
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegram, Message
from tests.support.processes import environment
from tests.support.sentinel import SentinelSet
from tests.support.slack_helpers import BOT_TOKEN, SIGNING_SECRET

TELEGRAM_SECRET = "drill_webhook-secret"
ALICE = 42
TAG = re.compile(r"q\d+x\d+")
FAILURE_TEXT = "could not answer"
CUT_OFF_TEXT = "(the answer was cut off"  # a stall after some text: kept, and told
_LIVE: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_leftovers() -> None:
    """A drill that dies hard still leaves no process behind."""
    for process in list(_LIVE):
        if process.poll() is None:
            process.kill()


def free_port() -> int:
    return common.free_port()


def done_marker(tag: str) -> str:
    return f"done-{tag}"


def tagged_reply(words: int = 12) -> Callable[[JSON], str]:
    """A reply naming the message it answers, ending in a marker: a half reply has no marker."""

    def reply(body: JSON) -> str:
        found = TAG.search(last_user_text(body.get("messages", body.get("input"))))
        tag = found.group(0) if found else "untagged"
        filler = " ".join(f"w{i}" for i in range(words))
        return f"ok {tag} {filler} {done_marker(tag)}"

    return reply


# -- the fakes, with a time stamp on every text a message had ---------------------------------


class StampedTelegram(FakeTelegram):
    """The Telegram fake, remembering when each message got each of its texts."""

    def __init__(self) -> None:
        super().__init__()
        self.stamps: dict[tuple[int, int], list[tuple[float, str]]] = {}
        self.by_reply: dict[tuple[int, int | None], list[Message]] = {}

    def _send_message(self, params: dict[str, Any]) -> dict[str, Any]:
        result = super()._send_message(params)
        message = self.messages[(int(params["chat_id"]), int(result["message_id"]))]
        self.by_reply.setdefault((message.chat_id, message.reply_to), []).append(message)
        self._stamp(message.chat_id, message.message_id)
        return result

    def replies_to(self, chat_id: int, message_id: int | None) -> list[Message]:
        """The bot's messages in a chat that reply to `message_id` (indexed: soaks are long)."""
        return list(self.by_reply.get((chat_id, message_id), []))

    def _edit_message_text(self, params: dict[str, Any]) -> dict[str, Any]:
        result = super()._edit_message_text(params)
        self._stamp(int(params["chat_id"]), int(params["message_id"]))
        return result

    def _stamp(self, chat_id: int, message_id: int) -> None:
        text = self.messages[(chat_id, message_id)].text
        self.stamps.setdefault((chat_id, message_id), []).append((time.monotonic(), text))

    def first_time(self, chat_id: int, message_id: int, needle: str) -> float | None:
        """When the message first showed `needle` (None if it never did)."""
        for at, text in self.stamps.get((chat_id, message_id), []):
            if needle in text:
                return at
        return None


class StampedSlack(FakeSlack):
    """The Slack fake, remembering when each message got each of its texts."""

    def __init__(self) -> None:
        super().__init__()
        self.stamps: dict[str, list[tuple[float, str]]] = {}

    def _chat_postMessage(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        result = super()._chat_postMessage(args, token)
        if isinstance(result, dict):
            self._stamp(str(result["ts"]), str(args.get("text")))
        return result

    def _chat_update(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        result = super()._chat_update(args, token)
        if isinstance(result, dict):
            self._stamp(str(result["ts"]), str(args.get("text")))
        return result

    def _chat_startStream(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        return self._streamed(super()._chat_startStream(args, token))

    def _chat_appendStream(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        return self._streamed(super()._chat_appendStream(args, token))

    def _chat_stopStream(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        return self._streamed(super()._chat_stopStream(args, token))

    def _streamed(self, result: dict[str, Any] | str) -> dict[str, Any] | str:
        """A stream's call taken: the message's text so far stamped."""
        if isinstance(result, dict):
            ts = str(result["ts"])
            self._stamp(ts, self.messages[ts].text)
        return result

    def _stamp(self, ts: str, text: str) -> None:
        with self._lock:
            self.stamps.setdefault(ts, []).append((time.monotonic(), text))

    def first_time(self, ts: str, needle: str) -> float | None:
        with self._lock:
            return next((at for at, text in self.stamps.get(ts, []) if needle in text), None)


class ChaosLLM(FakeLLM):
    """The model fake, failing a share of the main model's calls at random.

    Each failing call is one of: a 500, a 429 with Retry-After, a request that
    never answers (the gateway's model timeout ends it), a stream that stops
    after a few tokens without closing, or one whose connection is cut after a few
    tokens (a provider that died midway). Side and other models are spared.
    """

    KINDS = ("500", "429", "timeout", "stall", "drop")

    def __init__(self, rate: float, seed: int, model: str = "fake-model") -> None:
        super().__init__()
        self.rate, self.chaos_model = rate, model
        self.rng = random.Random(seed)
        self.injected: dict[str, int] = dict.fromkeys(self.KINDS, 0)

    def _failure_response(self, received: Any) -> web.Response | None:
        scripted = super()._failure_response(received)
        if scripted is not None or received.model != self.chaos_model:
            return scripted
        if self.rng.random() >= self.rate:
            return None
        kind = self.rng.choice(self.KINDS)
        self.injected[kind] += 1
        if kind in ("500", "429"):
            status = int(kind)
            headers = {"Retry-After": "1", "retry-after-ms": "1000"} if status == 429 else {}
            return self._finish(
                received, web.json_response(error_body(status), status=status, headers=headers)
            )
        # No await lies between this and the hang lookup that follows in the handler,
        # so this request, not a concurrent one, takes the hang.
        if kind == "drop":
            self.drop_next(1, model=self.chaos_model, after_tokens=3)
        else:
            self.hang_next(1, model=self.chaos_model, after_tokens=0 if kind == "timeout" else 3)
        return None


# -- Redis -------------------------------------------------------------------------------------


@dataclass
class RedisServer:
    """A private redis-server; durable ones fsync every write and survive a restart."""

    workdir: Path
    durable: bool = False
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        persistence = (
            ["--appendonly", "yes", "--appendfsync", "always"]
            if self.durable
            else ["--appendonly", "no"]
        )
        log = (self.workdir / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [
                find_redis_server(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.workdir),
                "--save",
                "",
                *persistence,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        _LIVE.add(self.process)
        self._wait_ready()

    def _wait_ready(self, within: float = 15.0) -> None:
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + within
        try:
            while True:
                with contextlib.suppress(redis.ConnectionError, redis.BusyLoadingError):
                    if client.ping():
                        return
                if time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not answer in time")
                time.sleep(0.02)
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final flush; only what was fsynced survives."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


# -- gateway processes -------------------------------------------------------------------------


@dataclass
class Proc:
    """One `gateway <command>` subprocess and its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None


def rss_kib(pid: int) -> int | None:
    """Resident memory of a process (Linux /proc), None once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmRSS:\s+(\d+)", status, re.MULTILINE)
    return int(found.group(1)) if found else None


def children(pid: int) -> list[int]:
    """Direct children of a process (its model processes, for a worker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


async def poll(condition: Callable[[], Any], within: float, every: float = 0.05) -> bool:
    """Wait until `condition()` is truthy or the deadline passes; whether it held."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(every)
    return True


@dataclass
class Stack:
    """Redis, the fakes and the gateway processes of one drill."""

    workdir: Path
    redis: RedisServer
    llm: FakeLLM
    telegram: StampedTelegram
    slack: StampedSlack
    env: dict[str, str]
    discord: FakeDiscord | None = None
    sentinels: SentinelSet | None = None  # when the drill runs on a Sentinel set
    procs: list[Proc] = field(default_factory=list)
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    @property
    def port(self) -> int:
        return int(self.env["PORT"])

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def client(self) -> aioredis.Redis:
        return keys.connect(self.env["REDIS_URL"])

    def spawn(self, command: str, **env: str) -> Proc:
        name = f"{command}-{next(self._counter)}"
        log = self.workdir / f"{name}.log"
        with log.open("wb") as sink:
            popen = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", command],
                env={**self.env, **env},
                cwd=self.workdir,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        _LIVE.add(popen)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    @property
    def workers(self) -> list[Proc]:
        return [p for p in self.procs if p.name.startswith("worker") and p.alive()]

    @property
    def web(self) -> Proc:
        return next(p for p in self.procs if p.name.startswith("web"))

    async def start_workers(self, count: int, within: float = 120.0) -> list[Proc]:
        """Start workers and wait until each reads its job streams."""
        started = [self.spawn("worker") for _ in range(count)]
        for proc in started:
            await self.wait_log(proc, "job streams of", within)
        return started

    async def wait_log(self, proc: Proc, text: str, within: float) -> None:
        if not await poll(lambda: text in proc.output() or not proc.alive(), within, 0.1):
            raise RuntimeError(f"{proc.name} did not log {text!r} in {within}s")
        if text not in proc.output():
            raise RuntimeError(f"{proc.name} exited:\n{proc.output()[-2000:]}")

    async def start_web(self, within: float = 60.0) -> Proc:
        proc = self.spawn("web")
        async with httpx.AsyncClient() as http:

            async def healthy() -> bool:
                with contextlib.suppress(httpx.HTTPError):
                    return (await http.get(self.url("/healthz"))).status_code == 200
                return False

            deadline = time.monotonic() + within
            while not await healthy():
                if not proc.alive() or time.monotonic() > deadline:
                    raise RuntimeError(f"gateway web never became healthy:\n{proc.output()}")
                await asyncio.sleep(0.1)
        return proc

    def sigkill(self, proc: Proc) -> list[int]:
        """Kill a process the hard way; returns its children that outlived it."""
        kids = children(proc.pid)
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait()
        return kids

    def stop(self) -> None:
        for proc in self.procs:
            if proc.alive():
                proc.popen.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.popen.kill()
                proc.popen.wait()
            _LIVE.discard(proc.popen)

    def log_lines(self, needle: str) -> list[str]:
        """Every log line of every gateway process that holds `needle`."""
        return [
            f"{p.name}: {line}"
            for p in self.procs
            for line in p.output().splitlines()
            if needle in line
        ]


def base_env(
    redis_url: str, llm: FakeLLM, telegram: FakeTelegram, slack: FakeSlack, **extra: str
) -> dict[str, str]:
    """The settings every drill shares: small lease TTL, fast edits, both HTTP platforms."""
    values = {
        "TELEGRAM_BOT_TOKEN": telegram.token,
        "TELEGRAM_API_URL": telegram.base_url,
        "TELEGRAM_WEBHOOK_SECRET": TELEGRAM_SECRET,
        "GATEWAY_ALLOWED_USERS": f"telegram:{ALICE}",
        "TELEGRAM_EDIT_INTERVAL": "0.3",
        "TELEGRAM_GROUP_EDIT_INTERVAL": "0.3",
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "SLACK_EDIT_INTERVAL": "0.3",
        "GATEWAY_LEASE_TTL": "1.5",
        "GATEWAY_SIDE_MODEL": "openai/side-model",
        "GATEWAY_MODEL_TIMEOUT": "4",
        "GATEWAY_LOG_LEVEL": "INFO",
    }
    values.update(extra)
    return environment(redis_url, llm.api_base, free_port(), **values)


@contextlib.asynccontextmanager
async def stack(
    name: str,
    *,
    llm: FakeLLM | None = None,
    durable: bool = False,
    discord: FakeDiscord | None = None,
    sentinel: bool = False,
    **extra: str,
) -> AsyncIterator[Stack]:
    """Start Redis and the fakes (not yet the gateway); stop everything on the way out.
    `sentinel`: a primary, a replica and three sentinels instead of one server."""
    workdir = Path(tempfile.mkdtemp(prefix=f"drill-{name}-"))
    server = RedisServer(workdir, durable=durable)
    sentinels = None
    if sentinel:
        sentinels = SentinelSet(workdir / "sentinel", appendonly=durable)
        (workdir / "sentinel").mkdir()
        sentinels.start()
        _LIVE.update(sentinels.processes.values())
    else:
        server.start()
    model = (llm or FakeLLM()).start()
    telegram, slack = StampedTelegram(), StampedSlack()
    slack.start()
    await telegram.start()
    if discord is not None:
        await discord.start()
    env = base_env(sentinels.url if sentinels else server.url, model, telegram, slack, **extra)
    if discord is not None:
        env.update(
            DISCORD_BOT_TOKEN=discord.token,
            DISCORD_API_URL=discord.api_url,
            DISCORD_GATEWAY_URL=discord.gateway_url,
            DISCORD_EDIT_INTERVAL="0.3",
        )
    running = Stack(workdir, server, model, telegram, slack, env, discord, sentinels)
    try:
        yield running
    finally:
        await asyncio.to_thread(running.stop)
        await telegram.stop()
        if discord is not None:
            await discord.stop()
        slack.stop()
        model.stop()
        server.stop()
        if sentinels is not None:
            sentinels.stop()


# -- what Redis says about a session -----------------------------------------------------------


async def stuck_sessions(client: aioredis.Redis, session_keys: list[str]) -> list[str]:
    """Sessions with unanswered messages, no lease holder and no job left in any stream."""
    with_jobs: set[str] = set()
    async for stream in client.scan_iter(match=Keys.JOB_STREAMS_MATCH):
        for _, fields in await client.xrange(stream):
            with_jobs.add(fields.get("session", ""))
    stuck = []
    for key in session_keys:
        inbox = await client.llen(Keys.inbox(key))
        history = await client.llen(Keys.history(key))
        answered = int(await client.hget(Keys.meta(key), "answered") or 0)
        leased = await client.exists(Keys.lease(key))
        if (inbox or history > answered) and not leased and key not in with_jobs:
            stuck.append(key)
    return stuck


async def assistant_texts(client: aioredis.Redis, session_key: str) -> list[str]:
    """The assistant entries of a session's history, as recorded."""
    entries = [json.loads(raw) for raw in await client.lrange(Keys.history(session_key), 0, -1)]
    return [str(e.get("text", "")) for e in entries if e.get("role") == "assistant"]


async def describe_session(client: aioredis.Redis, session_key: str) -> str:
    """A session's state in one line: what a lost or stuck message left behind in Redis."""
    meta = await client.hgetall(Keys.meta(session_key))
    jobs = []
    async for stream in client.scan_iter(match=Keys.JOB_STREAMS_MATCH):
        try:
            pending = {
                item["message_id"]: item
                for item in await client.xpending_range(stream, GROUP, "-", "+", 1000)
            }
        except redis.ResponseError as exc:  # NOGROUP: no worker could read this stream
            jobs.append(f"{stream}: {exc}")
            pending = {}
        for job_id, fields in await client.xrange(stream):
            if fields.get("session") == session_key:
                state = "pending" if job_id in pending else "unread"
                jobs.append(f"{fields.get('kind')}:{state}")
    lease = await client.pttl(Keys.lease(session_key))
    return (
        f"{session_key}: history {await client.llen(Keys.history(session_key))}, "
        f"answered {meta.get('answered', 0)}, owed {meta.get('owed', 0)}, "
        f"inbox {await client.llen(Keys.inbox(session_key))}, "
        f"lease {'none' if lease < 0 else f'{lease}ms'}, jobs {jobs or 'none'}"
    )

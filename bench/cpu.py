"""CPU and latency per turn: the gateway's processes against a naive Slack bot, same run.

Starts a redis-server, the fake model (its own process: 300 ms to the first
token, then 20 tokens 20 ms apart), the fake Slack Web API (in this process,
stamping when each reply first shows its whole text), `gateway web` and
`gateway worker` (with its model process) on the defaults a deployment has,
and bench/naive_bot.py (litellm streaming straight into one chat.postMessage,
no Redis). Then, at each level, `conversations` users at once each send their
next mention the moment their previous reply showed whole, until `--turns`
turns were answered; the gateway first, then the naive bot, under the same
load. Every turn is a signed Events API POST of an `app_mention`: a
conversation's first turn at the top of its channel, the next ones in its
thread.

What is measured, per level and bot:
- CPU: utime + stime from /proc of every process of the bot (gateway: web,
  worker, the worker's model processes, redis-server; naive: its one process),
  the delta across the level, scaled to 100 turns.
- turn time: from the event's POST to the moment the fake Slack first shows
  the reply's whole text (a post, an edit, or a stream's append or stop).
- over the model: turn time minus the fake model's own time for that request
  (from its receipt of the request to the end of its stream).
- Slack acknowledgement: the event POST's HTTP response time.
- RSS (VmRSS) at the end: the worker and its model processes against the
  naive bot's one process.
- per turn: Slack API calls the fake received, Redis commands (INFO
  commandstats) and model requests.

    python bench/cpu.py [--turns 100] [--levels 1,10,50] [--rounds 1] [--profile]
                        [--model-processes N] [--idle-seconds 3]

With `--rounds R` each level runs R rounds of `--turns` turns, gateway and naive bot
in turn (g, n, g, n, ...), and every figure pools the rounds: a machine whose speed
drifts over minutes weighs on both bots alike, not on whichever ran in its slow spell.

`--profile` then runs one more gateway level (10 at once) with every gateway
Python process under cProfile (switched on by this bench's launch only: a
sitecustomize on the processes' PYTHONPATH) and prints the top costs per turn.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import itertools
import json
import os
import pstats
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common  # first: it puts the project on sys.path
import httpx
import psutil
import redis
from drill_stack import RedisServer, free_port, rss_kib
from slack_sdk.signature import SignatureVerifier

from gateway.state import scripts
from tests.fakes.slack_api import BOT_TOKEN, BOT_USER_ID, TEAM_ID, FakeSlack
from tests.support.processes import environment

SIGNING_SECRET = "bench-signing-secret-0123456789"
FIRST_TOKEN, TOKEN_GAP, TOKENS = 0.3, 0.02, 20
REPLY = " ".join(f"word{i}" for i in range(TOKENS))  # 20 words: 20 streamed pieces
TAG = re.compile(r"zz[a-z0-9]+zz")
HERE = Path(__file__).resolve().parent
SCRIPTS = {  # each script's EVALSHA name, to its file's name
    hashlib.sha1(scripts.load(path.stem).source.encode()).hexdigest(): path.stem
    for path in Path(scripts.__file__).parent.glob("*.lua")
    if path.read_text().startswith("-- KEYS:")
}
CPU_RATIO, ADDED_MS, P99_RATIO, RSS_MB = 1.2, 3.0, 1.15, 50.0  # the targets


class WatchedSlack(FakeSlack):
    """The Slack fake, noting when each message first shows the whole reply, by thread."""

    def __init__(self) -> None:
        super().__init__()
        self.whole: dict[tuple[str, str], list[float]] = {}
        self._seen: set[str] = set()
        self.waiters: dict[tuple[str, str], asyncio.Event] = {}
        self.driver: asyncio.AbstractEventLoop | None = None

    def _chat_postMessage(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        return self._check(super()._chat_postMessage(args, token))

    def _chat_update(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        return self._check(super()._chat_update(args, token))

    def _chat_startStream(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        return self._check(super()._chat_startStream(args, token))

    def _chat_appendStream(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        return self._check(super()._chat_appendStream(args, token))

    def _chat_stopStream(self, args: dict[str, Any], token: str) -> dict[str, Any] | str:
        return self._check(super()._chat_stopStream(args, token))

    def _check(self, result: dict[str, Any] | str) -> dict[str, Any] | str:
        if not isinstance(result, dict):
            return result
        at = time.monotonic()
        ts = str(result["ts"])
        with self._lock:
            message = self.messages.get(ts)
            if message is None or ts in self._seen or message.shown.strip() != REPLY:
                return result
            self._seen.add(ts)
            key = (message.channel, message.thread_ts or ts)
            self.whole.setdefault(key, []).append(at)
        if self.driver is not None:
            self.driver.call_soon_threadsafe(self._wake, key)
        return result

    def _wake(self, key: tuple[str, str]) -> None:
        waiter = self.waiters.get(key)
        if waiter is not None:
            waiter.set()

    async def wait_whole(self, key: tuple[str, str], count: int, within: float) -> float:
        """When the thread's `count`-th reply showed whole."""
        waiter = self.waiters.setdefault(key, asyncio.Event())
        async with asyncio.timeout(within):
            while len(self.whole.get(key, [])) < count:
                waiter.clear()
                await waiter.wait()
        return self.whole[key][count - 1]


# -- the processes of each bot -----------------------------------------------------------------


def tree(pid: int) -> list[int]:
    """A process and all its descendants (a worker's model processes)."""
    try:
        parent = psutil.Process(pid)
        return [pid, *(child.pid for child in parent.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads), from /proc/<pid>/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Bot:
    """One bot under measurement: where its events go, and the processes whose CPU counts."""

    name: str
    events_url: str
    roots: dict[str, int]  # role -> pid; each root counts with its descendants
    redis_url: str | None = None

    def pids(self) -> dict[int, str]:
        found: dict[int, str] = {}
        for role, root in self.roots.items():
            for pid in tree(root):
                found.setdefault(pid, role if pid == root else f"{role} child")
        return found

    def cpu(self) -> dict[int, float]:
        return {pid: cpu_seconds(pid) for pid in self.pids()}

    def rss_mb(self, roles: tuple[str, ...], children: bool = True) -> float:
        pids = [
            pid
            for pid, role in self.pids().items()
            if (role if not children else role.split(" ")[0]) in roles
        ]
        return sum((rss_kib(pid) or 0) for pid in pids) / 1024


def command_calls(url: str | None) -> Counter[str]:
    """The commands the redis-server ran so far, by name (INFO itself left out)."""
    if url is None:
        return Counter()
    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return Counter(
        {
            k.removeprefix("cmdstat_"): int(v["calls"])
            for k, v in stats.items()
            if k != "cmdstat_info"
        }
    )


# -- the traffic ---------------------------------------------------------------------------------

_ts = itertools.count(1)
_events = itertools.count(1)


def event_post(
    channel: str, text: str, ts: str, thread: str | None
) -> tuple[bytes, dict[str, str]]:
    event: dict[str, Any] = {
        "type": "app_mention",
        "user": "U1",
        "channel": channel,
        "ts": ts,
        "text": f"<@{BOT_USER_ID}> {text}",
        "team": TEAM_ID,
    }
    if thread is not None:
        event["thread_ts"] = thread
    body = json.dumps(
        {
            "token": "legacy",
            "team_id": TEAM_ID,
            "api_app_id": "A0001",
            "type": "event_callback",
            "event_id": f"Ev{next(_events):08d}",
            "event_time": int(time.time()),
            "authorizations": [{"team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": True}],
            "event": event,
        }
    ).encode()
    stamp = str(int(time.time()))
    signature = SignatureVerifier(SIGNING_SECRET).generate_signature(timestamp=stamp, body=body)
    assert signature is not None
    headers = {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": signature,
        "Content-Type": "application/json",
    }
    return body, headers


@dataclass
class Level:
    """One bot's turns at one level."""

    bot: str
    conversations: int
    turn: dict[str, float] = field(default_factory=dict)  # tag -> seconds
    ack: list[float] = field(default_factory=list)
    cpu: float = 0.0
    cpu_by_role: dict[str, float] = field(default_factory=dict)
    slack_calls: Counter[str] = field(default_factory=Counter)
    redis_commands: Counter[str] = field(default_factory=Counter)
    model_requests: int = 0
    over_model: list[float] = field(default_factory=list)
    sent: dict[str, float] = field(default_factory=dict)  # tag -> when its event was posted
    before_model: list[float] = field(default_factory=list)  # the post to the model's receipt
    after_model: list[float] = field(default_factory=list)  # the model's end to the text whole
    model_time: list[float] = field(default_factory=list)
    wall: float = 0.0

    @property
    def turns(self) -> int:
        return len(self.turn)

    def per_100(self) -> float:
        return self.cpu * 100 / self.turns

    def add(self, other: Level) -> None:
        """Pool another round of the same bot at the same level into this one."""
        self.turn.update(other.turn)
        self.sent.update(other.sent)
        self.ack += other.ack
        self.cpu += other.cpu
        for role, seconds in other.cpu_by_role.items():
            self.cpu_by_role[role] = self.cpu_by_role.get(role, 0.0) + seconds
        self.slack_calls += other.slack_calls
        self.redis_commands += other.redis_commands
        self.wall += other.wall


async def drive(
    http: httpx.AsyncClient,
    slack: WatchedSlack,
    bot: Bot,
    conversations: int,
    turns: int,
    label: str,
) -> Level:
    """`conversations` users at once, each sending its next mention as its reply shows."""
    level = Level(bot.name, conversations)
    shares = [turns // conversations + (i < turns % conversations) for i in range(conversations)]

    async def user(index: int, share: int) -> None:
        channel = f"C{label.upper()}X{index}"
        thread: str | None = None
        for number in range(share):
            ts = f"1720000000.{next(_ts):06d}"
            tag = f"zz{label}c{index}t{number}zz"
            body, headers = event_post(channel, f"{tag} please answer", ts, thread)
            sent = time.monotonic()
            response = await http.post(bot.events_url, content=body, headers=headers)
            level.ack.append(time.monotonic() - sent)
            response.raise_for_status()
            thread = thread or ts
            shown = await slack.wait_whole((channel, thread), number + 1, 60.0)
            level.turn[tag], level.sent[tag] = shown - sent, sent

    calls_before, commands_before = len(slack.calls), command_calls(bot.redis_url)
    cpu_before = bot.cpu()
    started = time.monotonic()
    await asyncio.gather(*(user(i, share) for i, share in enumerate(shares) if share))
    level.wall = time.monotonic() - started
    await settle(slack)  # what a turn does after its text shows (a reaction off) is its own
    cpu_after = bot.cpu()
    pids = bot.pids()
    for pid, after in cpu_after.items():
        spent = after - cpu_before.get(pid, 0.0)
        level.cpu += spent
        role = pids.get(pid, "gone")
        level.cpu_by_role[role] = level.cpu_by_role.get(role, 0.0) + spent
    level.redis_commands = command_calls(bot.redis_url) - commands_before
    level.slack_calls = Counter(c.method for c in slack.calls.snapshot()[calls_before:])
    return level


async def settle(slack: FakeSlack, quiet: float = 0.5, within: float = 10.0) -> None:
    """Wait until the Slack fake took no call for `quiet` seconds."""
    deadline = time.monotonic() + within
    seen = len(slack.calls)
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet)
        if len(slack.calls) == seen:
            return
        seen = len(slack.calls)


class Monitor:
    """Redis MONITOR in a thread: the commands clients sent, told from those a script ran."""

    def __init__(self, url: str) -> None:
        self.client = redis.Redis.from_url(url)
        self.sent: Counter[str] = Counter()
        self.scripted: Counter[str] = Counter()
        self.scripts: Counter[str] = Counter()  # the EVALSHAs sent, by script
        self.counting = False
        self.thread = threading.Thread(target=self._listen, daemon=True)
        self.thread.start()

    def _listen(self) -> None:
        with contextlib.suppress(redis.ConnectionError), self.client.monitor() as monitor:
            for item in monitor.listen():
                if not self.counting or item.get("command", "").lower().startswith("info"):
                    continue  # INFO is this bench's own
                words = str(item.get("command", "")).split(" ", 2)
                name = words[0].strip('"').lower()
                (self.scripted if item.get("client_type") == "lua" else self.sent)[name] += 1
                if name == "evalsha" and len(words) > 1:
                    self.scripts[SCRIPTS.get(words[1].strip('"'), "?")] += 1


async def idle(bot: Bot, when: str, seconds: float = 3.0) -> None:
    """What the bot spends doing nothing: CPU (by process) and Redis commands a second."""
    before, commands = bot.cpu(), command_calls(bot.redis_url)
    await asyncio.sleep(seconds)
    after, commands = bot.cpu(), command_calls(bot.redis_url) - commands
    spent = {pid: after[pid] - before.get(pid, 0.0) for pid in after}
    roles = bot.pids()
    by_process = ", ".join(
        f"{roles.get(pid, pid)} {c / seconds * 1000:.1f}" for pid, c in spent.items()
    )
    print(
        f"{bot.name} idle {when}: {sum(spent.values()) / seconds * 1000:.1f} ms CPU a second "
        f"({by_process}), {commands.total() / seconds:.1f} Redis commands a second",
        flush=True,
    )


def model_times(
    fake: common.RemoteFake,
) -> tuple[dict[str, tuple[float, float]], Counter[str]]:
    """When the fake model received each tagged request and when it ended its answer
    (monotonic, as this process's: one clock for the machine), and how many requests
    each tag had."""
    times: dict[str, tuple[float, float]] = {}
    counts: Counter[str] = Counter()
    for request in fake.requests():
        users = [m for m in request["body"].get("messages", []) if m.get("role") == "user"]
        found = TAG.search(json.dumps(users[-1]["content"])) if users else None
        if found is None:
            continue
        counts[found.group(0)] += 1
        if request["finished_at"] is not None:
            times[found.group(0)] = (request["received_at"], request["finished_at"])
    return times, counts


def attribute(level: Level, times: dict[str, tuple[float, float]], counts: Counter[str]) -> None:
    for tag, turn in level.turn.items():
        if tag in times:
            received, finished = times[tag]
            level.model_time.append(finished - received)
            level.over_model.append(turn - (finished - received))
            level.before_model.append(received - level.sent[tag])
            level.after_model.append(level.sent[tag] + turn - finished)
        level.model_requests += counts.get(tag, 0)


# -- the stack -----------------------------------------------------------------------------------


class Processes:
    """The processes this bench started, stopped on the way out."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.running: list[tuple[str, subprocess.Popen[bytes]]] = []

    def spawn(self, name: str, command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = (self.workdir / f"{name}.log").open("wb")
        popen = subprocess.Popen(
            command,
            env=env,
            cwd=self.workdir,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.running.append((name, popen))
        return popen

    def log(self, name: str) -> str:
        return (self.workdir / f"{name}.log").read_text(errors="replace")

    async def wait_log(self, name: str, popen: subprocess.Popen[bytes], text: str) -> None:
        deadline = time.monotonic() + 120
        while text not in self.log(name):
            if popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not log {text!r}:\n{self.log(name)[-3000:]}")
            await asyncio.sleep(0.1)

    def stop(self, only: str | None = None) -> None:
        chosen = [(n, p) for n, p in self.running if only is None or n.startswith(only)]
        for _, popen in chosen:
            if popen.poll() is None:
                popen.terminate()
        for entry in chosen:
            try:
                entry[1].wait(timeout=20)
            except subprocess.TimeoutExpired:
                entry[1].kill()
                entry[1].wait()
            self.running.remove(entry)


async def wait_http(url: str) -> None:
    deadline = time.monotonic() + 60
    async with httpx.AsyncClient() as http:
        while True:
            try:
                await http.get(url)
                return
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.1)


async def start_gateway(
    procs: Processes,
    slack: FakeSlack,
    fake: common.RemoteFake,
    server: RedisServer,
    **extra: str,
) -> Bot:
    redis_url = server.url
    port = free_port()
    env = environment(
        redis_url,
        fake.api_base,
        port,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_URL=slack.api_url,
        GATEWAY_LOG_LEVEL="WARNING",
        **extra,
    )
    command = [sys.executable, "-m", "gateway.cli"]
    web = procs.spawn("gateway-web", [*command, "web"], env)
    await wait_http(f"http://127.0.0.1:{port}/healthz")
    worker = procs.spawn(
        "gateway-worker", [*command, "worker"], {**env, "GATEWAY_LOG_LEVEL": "INFO"}
    )
    await procs.wait_log("gateway-worker", worker, "job streams of")
    assert server.process is not None
    roots = {"web": web.pid, "worker": worker.pid, "redis": server.process.pid}
    return Bot("gateway", f"http://127.0.0.1:{port}/slack/events", roots, redis_url)


async def start_naive(procs: Processes, slack: FakeSlack, fake: common.RemoteFake) -> Bot:
    env = {
        **os.environ,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
        "SLACK_API_URL": slack.api_url,
        "GATEWAY_API_KEY": "sk-bench",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    popen = procs.spawn(
        "naive",
        [
            sys.executable,
            str(HERE / "naive_bot.py"),
            "--model",
            "openai/fake-model",
            "--api-base",
            fake.api_base,
        ],
        env,
    )
    await procs.wait_log("naive", popen, "http://")
    url = procs.log("naive").strip().splitlines()[0]
    return Bot("naive", f"{url}/slack/events", {"naive": popen.pid})


# -- the report ----------------------------------------------------------------------------------


def p(values: list[float], q: int) -> float:
    return statistics.median(values) if q == 50 else common.percentile(values, q)


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def report(levels: dict[tuple[str, int], Level], rss: dict[str, float], counts: list[int]) -> None:
    rows: list[tuple[str, str, str, str, str, str]] = []

    def row(figure: str, g: str, n: str, ratio: str, target: str = "", met: str = "") -> None:
        rows.append((figure, g, n, ratio, target, met))

    for c in counts:
        g, n = levels["gateway", c], levels["naive", c]
        ratio = g.per_100() / n.per_100()
        row(
            f"CPU s per 100 turns, {c} at once",
            f"{g.per_100():.2f}",
            f"{n.per_100():.2f}",
            f"{ratio:.2f}x",
            f"<= {CPU_RATIO}x",
            verdict(ratio <= CPU_RATIO),
        )
    for c in counts:
        g, n = levels["gateway", c], levels["naive", c]
        for q in (50, 99):
            gt, nt = p(list(g.turn.values()), q) * 1000, p(list(n.turn.values()), q) * 1000
            target, met = "", ""
            if q == 99 and c == max(counts):
                target, met = f"<= {P99_RATIO}x", verdict(gt / nt <= P99_RATIO)
            row(
                f"turn time p{q}, {c} at once",
                f"{gt:,.0f} ms",
                f"{nt:,.0f} ms",
                f"{gt / nt:.2f}x",
                target,
                met,
            )
    one = min(counts)
    g, n = levels["gateway", one], levels["naive", one]
    ga, na = p(g.over_model, 50) * 1000, p(n.over_model, 50) * 1000
    row(
        f"time added over the model, p50, {one} at once",
        f"{ga:.1f} ms",
        f"{na:.1f} ms",
        f"{ga - na:+.1f} ms",
        f"<= +{ADDED_MS:g} ms",
        verdict(ga - na <= ADDED_MS),
    )
    for name, of in (("before", "before_model"), ("after", "after_model")):
        ga, na = p(getattr(g, of), 50) * 1000, p(getattr(n, of), 50) * 1000
        row(
            f"  of which {name} the model, p50",
            f"{ga:.1f} ms",
            f"{na:.1f} ms",
            f"{ga - na:+.1f} ms",
        )
    for c in counts:
        g, n = levels["gateway", c], levels["naive", c]
        ga, na = p(g.ack, 99) * 1000, p(n.ack, 99) * 1000
        row(
            f"Slack acknowledgement p99, {c} at once",
            f"{ga:.1f} ms",
            f"{na:.1f} ms",
            f"{ga / na:.2f}x",
        )
    row(
        "RSS, worker + model process vs naive bot",
        f"{rss['gateway']:.0f} MB",
        f"{rss['naive']:.0f} MB",
        f"{rss['gateway'] - rss['naive']:+.0f} MB",
        f"<= +{RSS_MB:g} MB",
        verdict(rss["gateway"] - rss["naive"] <= RSS_MB),
    )
    alone, processes = rss["worker alone"], rss["gateway"] - rss["worker alone"]
    row("  of which worker / model process", f"{alone:.0f} / {processes:.0f} MB", "", "")
    row("RSS, gateway web / redis-server", f"{rss['web']:.0f} / {rss['redis']:.0f} MB", "", "")
    for c in counts:
        g, n = levels["gateway", c], levels["naive", c]
        row(
            f"Slack API calls per turn, {c} at once",
            f"{sum(g.slack_calls.values()) / g.turns:.2f}",
            f"{sum(n.slack_calls.values()) / n.turns:.2f}",
            "",
        )
    for c in counts:
        g = levels["gateway", c]
        row(
            f"Redis commands per turn, {c} at once",
            f"{g.redis_commands.total() / g.turns:.1f}",
            "-",
            "",
        )
    for c in counts:
        g, n = levels["gateway", c], levels["naive", c]
        row(
            f"model requests per turn, {c} at once",
            f"{g.model_requests / g.turns:.2f}",
            f"{n.model_requests / n.turns:.2f}",
            "",
        )

    head = ("figure", "gateway", "naive bot", "ratio", "target", "")
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(6)]
    line = lambda r: "| " + " | ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)) + " |"  # noqa: E731
    print(line(head))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))
    print()
    for c in counts:
        g, n = levels["gateway", c], levels["naive", c]
        roles = ", ".join(f"{k} {v * 100 / g.turns:.2f}" for k, v in sorted(g.cpu_by_role.items()))
        model = statistics.median(g.model_time) * 1000 if g.model_time else float("nan")
        print(
            f"{c:>3} at once: gateway CPU s per 100 turns by process: {roles}; "
            f"model's own time p50 {model:.0f} ms; wall {g.wall:.1f}s gateway, {n.wall:.1f}s naive"
        )
        print(f"    gateway Slack calls: {dict(sorted(g.slack_calls.items()))}")
        print(f"    naive Slack calls:   {dict(sorted(n.slack_calls.items()))}")
        top = ", ".join(f"{k} {v / g.turns:.1f}" for k, v in g.redis_commands.most_common(12))
        print(f"    gateway Redis commands per turn: {top}")


# -- profiling (cProfile in each gateway process, switched on by the launch) ----------------------

SITE = '''\
"""Loaded at start-up of each Python process of a profiled bench run (never in product use):
SIGUSR1 starts cProfile in the main thread, SIGUSR2 stops it and writes <pid>.prof."""
import cProfile, os, signal

_out = os.environ.get("BENCH_PROFILE_DIR")
if _out:
    _profile = cProfile.Profile()

    def _start(signum, frame):
        _profile.enable()

    def _stop(signum, frame):
        _profile.disable()
        _profile.dump_stats(os.path.join(_out, f"{os.getpid()}.prof"))

    signal.signal(signal.SIGUSR1, _start)
    signal.signal(signal.SIGUSR2, _stop)
'''
WAITS = ("poll' of 'select.epoll", "select.select", "time.sleep")  # waiting, not working


def short_name(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    where = filename.replace(str(common.ROOT) + "/", "").split("site-packages/")[-1]
    return f"{where}:{line}({name})" if where != "~" else name


def profile_summary(profiles: dict[str, Path], turns: int, top: int = 10) -> None:
    """Per process: its top functions by own time, and the product's by cumulative time."""
    for role, path in profiles.items():
        if not path.exists():
            print(f"\n{role}: no profile was written")
            continue
        stats: dict[Any, Any] = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
        working = {k: v for k, v in stats.items() if not any(w in k[2] for w in WAITS)}
        total = sum(v[2] for v in working.values())
        print(
            f"\n{role}: {total / turns * 1000:.2f} ms a turn inside Python functions "
            f"(own time summed, waits in epoll/select/sleep left out)"
        )
        print("  top by own time:")
        by_own = sorted(working.items(), key=lambda kv: kv[1][2], reverse=True)
        for key, (_, nc, tt, ct, _) in by_own[:top]:
            print(
                f"  {tt / turns * 1000:7.3f} ms own {ct / turns * 1000:8.3f} ms cum "
                f"{nc / turns:8.1f} calls a turn  {short_name(key)}"
            )
        ours = [
            kv
            for kv in working.items()
            if kv[0][0].startswith(str(common.ROOT / "gateway"))
            or kv[0][0].startswith(str(common.ROOT / "adapters"))
        ]
        print("  the gateway's own functions by cumulative time:")
        for key, (_, nc, tt, ct, _) in sorted(ours, key=lambda kv: kv[1][3], reverse=True)[:top]:
            print(
                f"  {tt / turns * 1000:7.3f} ms own {ct / turns * 1000:8.3f} ms cum "
                f"{nc / turns:8.1f} calls a turn  {short_name(key)}"
            )


# -- the run -------------------------------------------------------------------------------------


async def amain(args: argparse.Namespace) -> None:
    counts = [int(n) for n in args.levels.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="bench-cpu-"))
    server = RedisServer(workdir)
    server.start()
    fake = common.RemoteFake(
        "--reply", REPLY, "--delay", str(FIRST_TOKEN), "--token-delay", str(TOKEN_GAP)
    )
    slack = WatchedSlack()
    slack.add_user("U1", "Ada")
    slack.start()
    slack.driver = asyncio.get_running_loop()
    procs = Processes(workdir)
    try:
        gateway = await start_gateway(procs, slack, fake, server, **processes_env(args))
        naive = await start_naive(procs, slack, fake)
        print(
            f"model: {FIRST_TOKEN * 1000:.0f} ms to the first token, {TOKENS} tokens "
            f"{TOKEN_GAP * 1000:.0f} ms apart; {args.turns} turns per level; "
            f"gateway pids {gateway.pids()}, naive pid {naive.roots['naive']}",
            flush=True,
        )
        levels: dict[tuple[str, int], Level] = {}
        await idle(gateway, "at start", args.idle_seconds)
        await idle(naive, "at start", args.idle_seconds)
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
        async with httpx.AsyncClient(limits=limits, timeout=30) as http:
            for bot in (gateway, naive):  # warm: first calls build clients, import lazily
                await drive(http, slack, bot, 2, 4, f"w{bot.name[0]}")
                await idle(bot, "after its first turns", args.idle_seconds)
            for c in counts:
                for round_, bot in itertools.product(range(args.rounds), (gateway, naive)):
                    label = f"{bot.name[0]}{c}r{round_}"
                    level = await drive(http, slack, bot, c, args.turns, label)
                    print(
                        f"{bot.name:>8}, {c:>3} at once: {level.turns} turns in {level.wall:.1f}s, "
                        f"CPU {level.per_100():.2f}s per 100 turns, turn p50 "
                        f"{p(list(level.turn.values()), 50) * 1000:.0f} ms",
                        flush=True,
                    )
                    if (bot.name, c) in levels:
                        levels[bot.name, c].add(level)
                    else:
                        levels[bot.name, c] = level
        times, requested = model_times(fake)
        for level in levels.values():
            attribute(level, times, requested)
        pids = gateway.pids()
        rss = {
            "gateway": gateway.rss_mb(("worker",)),
            "naive": naive.rss_mb(("naive",)),
            "worker alone": gateway.rss_mb(("worker",), children=False),
            "web": gateway.rss_mb(("web",)),
            "redis": (rss_kib(server.process.pid) or 0) / 1024 if server.process else 0.0,
        }
        print()
        report(levels, rss, counts)
        print(f"\ngateway processes at the end: {pids}")
        if args.profile:
            await profile(args, procs, slack, fake, server, workdir)
    finally:
        procs.stop()
        slack.stop()
        fake.stop()
        server.stop()


async def profile(
    args: argparse.Namespace,
    procs: Processes,
    slack: WatchedSlack,
    fake: common.RemoteFake,
    server: RedisServer,
    workdir: Path,
) -> None:
    """One more gateway level with cProfile on in each of its Python processes."""
    procs.stop("gateway")
    site, out = workdir / "profile-site", workdir / "profiles"
    site.mkdir()
    out.mkdir()
    (site / "sitecustomize.py").write_text(SITE)
    path = os.pathsep.join([str(site), str(common.ROOT)])
    gateway = await start_gateway(
        procs,
        slack,
        fake,
        server,
        PYTHONPATH=path,
        BENCH_PROFILE_DIR=str(out),
        **processes_env(args),
    )
    async with httpx.AsyncClient(timeout=30) as http:
        await drive(http, slack, gateway, 2, 4, "wp")
        python = {pid: role for pid, role in gateway.pids().items() if role != "redis"}
        for pid in python:
            os.kill(pid, signal.SIGUSR1)
        await asyncio.sleep(0.2)
        count = args.profile_level
        monitor = Monitor(server.url)
        await asyncio.sleep(0.5)
        monitor.counting = True
        level = await drive(http, slack, gateway, count, args.turns, f"p{count}")
        monitor.counting = False
        for pid in python:
            os.kill(pid, signal.SIGUSR2)
    profiles = {f"{role} ({pid})": out / f"{pid}.prof" for pid, role in python.items()}
    deadline = time.monotonic() + 20
    while not all(p.exists() for p in profiles.values()) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)  # the last one finishes writing
    print(
        f"\nprofiled gateway run (cProfile, wall-clock timer): {level.turns} turns, "
        f"{count} at once, turn p50 {p(list(level.turn.values()), 50) * 1000:.0f} ms"
    )
    procs.stop("gateway")
    turns = level.turns
    sent, scripted = monitor.sent, monitor.scripted
    print(
        f"Redis commands per turn (MONITOR, this run): {sent.total() / turns:.1f} sent by "
        f"clients (each of a pipeline's or a MULTI's counts), {scripted.total() / turns:.1f} "
        f"more run inside scripts"
    )
    print("  sent: " + ", ".join(f"{k} {v / turns:.2f}" for k, v in sent.most_common(14)))
    print("  in scripts: " + ", ".join(f"{k} {v / turns:.1f}" for k, v in scripted.most_common(10)))
    print(
        "  scripts called: "
        + ", ".join(f"{k} {v / turns:.2f}" for k, v in monitor.scripts.most_common(16))
    )
    profile_summary(profiles, turns)


def processes_env(args: argparse.Namespace) -> dict[str, str]:
    """The worker's model processes as `--model-processes` asks, else the default's."""
    if args.model_processes is None:
        return {}
    return {"GATEWAY_MODEL_PROCESSES": str(args.model_processes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--levels", default="1,10,50")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="rounds of --turns per level, the two bots taking turns; the figures pool them",
    )
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--profile-level", type=int, default=10)
    parser.add_argument(
        "--idle-seconds", type=float, default=3.0, help="how long each idle figure is measured"
    )
    parser.add_argument(
        "--model-processes", type=int, default=None, help="GATEWAY_MODEL_PROCESSES (default: 1)"
    )
    warnings.filterwarnings("ignore", module="pydantic")
    asyncio.run(amain(parser.parse_args()))


if __name__ == "__main__":
    main()

"""Drills: real processes under faults, showing in figures that the gateway's promises hold.

The promises: every message is answered exactly once; a crash or a restart
loses nothing and duplicates nothing, and a tool call it cuts off is run again
only when it is read-only; strangers never reach the model; model
output cannot harm the chat it lands in; one session cannot stall the others.

Each drill starts its own `redis-server`, `gateway web` and two or more
`gateway worker` processes (and `gateway discord` for strangers) against the
loopback fakes of the model, Telegram, Slack and Discord, delivers traffic the
way the platforms do, injects its fault, and prints one row: trials, lost
(acknowledged, never answered), duplicated (more than one posted reply for one
message), stuck (unanswered with no lease holder and no job, or a typing
indicator that never stops), the worst latency from acknowledgement to the
whole answer, and a verdict against what the drill must show. A drill can
fail; it says so with its figure. Every drill is bounded by deadlines and
request counts, and stops its processes on the way out, Ctrl-C included.

    python bench/drills.py [--quick] [--only NAME[,NAME]]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import logging
import re
import time
import traceback
import warnings
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
from drill_console import console_interrupt
from drill_failover import (
    sentinel_failover,
    sentinel_failover_nowait,
    sentinel_failover_telegram,
)
from drill_faults import (
    crash,
    crash_drafts,
    crash_slack,
    group_chat,
    model_chaos,
    platform_429,
    redis_restart,
    settle,
)
from drill_faults import row as _row
from drill_faults import slow_side as slow_side_drill
from drill_fuzz import adversarial_markdown
from drill_silence import silent_model
from drill_stack import (
    TAG,
    TELEGRAM_SECRET,
    Stack,
    done_marker,
    poll,
    rss_kib,
    stack,
    stuck_sessions,
    tagged_reply,
)
from drill_tools import tool_crash
from drill_traffic import (
    CONNECTION_FAILED,
    Row,
    Sent,
    Slack,
    Telegram,
    post,
    tag,
    tally,
    verdict,
    wait_finished,
)

from gateway.state.keys import Keys
from tests.fakes.discord_api import FakeDiscord, FakeGuild
from tests.fakes.llm_server import FakeLLM
from tests.support.processes import request_text
from tests.support.slack_helpers import SIGNING_SECRET

try:  # the shared generator, once it lands; the drill's own until then
    from tests.fakes.fuzz import slack_cases, telegram_cases  # type: ignore[import-not-found]
except ImportError:
    from drill_fuzz import slack_cases, telegram_cases

Drill = Callable[[bool], Awaitable[Row]]


# -- duplicate storms ----------------------------------------------------------------------------


async def duplicate_storm(quick: bool) -> Row:
    """Each Slack event 3x (with retry headers) and each Telegram update 2x, all at once."""
    trials, batch = (20 if quick else 200), 10
    llm = FakeLLM()
    llm.reply = tagged_reply(6)
    async with stack("duplicates", llm=llm) as s:
        await s.start_web()
        await s.start_workers(2)
        tg, sl = Telegram(s), Slack(s)
        tg_sents: list[Sent] = []
        sl_sents: list[Sent] = []
        async with httpx.AsyncClient(timeout=30) as http:
            for start in range(0, trials // 2, batch):
                numbers = range(start, min(start + batch, trials // 2))
                tg_round = await asyncio.gather(
                    *(tg.send(http, group_chat(n), tag(n, 1), copies=2) for n in numbers)
                )
                sl_round = await asyncio.gather(
                    *(sl.send(http, tag(n, 2), copies=3) for n in numbers)
                )
                tg_sents += tg_round
                sl_sents += sl_round
                await wait_finished(tg_round, tg.finished_at, 30)
                await wait_finished(sl_round, sl.finished_at, 30)
        counted = await settle(s, tg, tg_sents, 30)
        counted.add(tally(sl_sents, sl.finished_at, sl.replies))
        await poll(lambda: not s.slack.reactions, 5)
        counted.stuck += len(s.slack.reactions)  # an "eyes" reaction never taken back
        client = s.client()
        counted.stuck += len(await stuck_sessions(client, [x.session for x in sl_sents]))
        await client.aclose()
        calls = _model_calls_by_tag(llm)
        twice = sum(1 for n in calls.values() if n > 1)
        answers = collections.Counter(st for x in tg_sents + sl_sents for st in x.statuses)
        refused = sum(n for status, n in answers.items() if status != 200)
        result = _row(
            "duplicate-storm",
            counted,
            refused == 0,
            f"{counted.trials - counted.duplicated - counted.lost} of "
            f"{counted.trials} got exactly one reply",
        )
        result.notes.append(
            f"{twice} messages reached the model more than once; "
            f"deliveries answered {dict(answers)} (every copy must get a 200)"
        )
        return result


def _model_calls_by_tag(llm: FakeLLM) -> dict[str, int]:
    calls: dict[str, int] = {}
    for request in llm.requests:
        found = TAG.findall(request_text(request))
        if found:
            calls[found[-1]] = calls.get(found[-1], 0) + 1
    return calls


# -- fuzzed payloads -----------------------------------------------------------------------------


async def fuzz(quick: bool) -> Row:
    """Hostile payloads at both routes: unsigned ones first (nothing may be enqueued), then
    signed ones; no 5xx, no dropped connection, no dead process."""
    per_route = 300 if quick else 10_000
    async with stack("fuzz") as s:
        await s.start_web()
        await s.start_workers(1)
        routes = {
            "/slack/events": lambda: slack_cases(11, per_route, SIGNING_SECRET),
            "/telegram/webhook": lambda: telegram_cases(12, per_route, TELEGRAM_SECRET),
        }
        client = s.client()
        before = await _written(client)
        unsigned = {
            path: await _fire(s, path, (c for c in make() if not c[2]))
            for path, make in routes.items()
        }
        written = {k: v - before[k] for k, v in (await _written(client)).items()}
        signed = {
            path: await _fire(s, path, (c for c in make() if c[2])) for path, make in routes.items()
        }
        await client.aclose()
        async with httpx.AsyncClient() as http:
            healthy = (await http.get(s.url("/healthz"))).status_code == 200
        dead = [p.name for p in s.procs if not p.alive()]
        tracebacks = len(s.log_lines("Traceback"))
        raised = _exceptions(s)
        bad = {
            f"{path} {phase}": _failures(counts)
            for phase, runs in (("unsigned", unsigned), ("signed", signed))
            for path, counts in runs.items()
        }
        failed = sum(bad.values())
        enqueued = sum(written.values())
        ok = not failed and not dead and healthy and not enqueued
        total = sum(sum(c.values()) for runs in (unsigned, signed) for c in runs.values())
        result = Row(
            "fuzz",
            total,
            None,
            None,
            None,
            None,
            verdict(
                ok,
                f"{failed} 5xx or dropped, {len(dead)} crashed, {enqueued} written from unsigned",
            ),
        )
        result.notes.append(
            f"5xx/dropped per route and phase {bad}; unsigned phase changed "
            f"{written}; healthz ok: {healthy}"
        )
        result.notes.append(f"{tracebacks} tracebacks logged: {raised}")
        result.notes.append(
            "statuses: "
            + "; ".join(
                f"{path} {phase} {dict(sorted(c.items()))}"
                for phase, runs in (("unsigned", unsigned), ("signed", signed))
                for path, c in runs.items()
            )
        )
        return result


CUT_OFF = -2  # the connection closed on a body over any route's limit
OVER_ANY_LIMIT = 1024 * 1024
_EXCEPTION = re.compile(r"^([A-Za-z_.]+(?:Error|Exception))\b")


def _exceptions(s: Stack) -> str:
    """The most frequent exception types in the logs of `gateway web`: where the 5xx came from."""
    found = collections.Counter(
        match.group(1)
        for proc in s.procs
        for line in proc.output().splitlines()
        if (match := _EXCEPTION.match(line))
    )
    return ", ".join(f"{name} x{n}" for name, n in found.most_common(5)) or "none"


def _failures(counts: dict[int, int]) -> int:
    return sum(n for status, n in counts.items() if status >= 500 or status == CONNECTION_FAILED)


async def _written(client: Any) -> dict[str, int]:
    """Monotonic write counters: entries ever added to each job stream, and sessions."""
    counters = {"sessions": sum([int(await client.zcard(k)) for k in Keys.session_indexes()])}
    for platform in ("slack", "telegram"):
        for stream in Keys.job_streams(platform):
            info = await client.xinfo_stream(stream) if await client.exists(stream) else {}
            counters[stream] = int(info.get("entries-added", 0))
    return counters


async def _fire(
    s: Stack, path: str, cases: Iterator[tuple[dict[str, str], bytes, bool]], connections: int = 8
) -> dict[int, int]:
    """Send every case over a few connections; the count of each status."""
    counts: dict[int, int] = {}
    dropped_sizes: list[int] = []
    url = s.url(path)
    async with httpx.AsyncClient(timeout=30) as http:

        async def sender() -> None:
            for headers, body, _ in cases:
                status = await post(http, url, body, headers)
                if status == CONNECTION_FAILED and len(body) > OVER_ANY_LIMIT:
                    status = CUT_OFF  # refused while still uploading: allowed, counted apart
                elif status == CONNECTION_FAILED:
                    dropped_sizes.append(len(body))
                counts[status] = counts.get(status, 0) + 1

        await asyncio.gather(*(sender() for _ in range(connections)))
    if dropped_sizes:
        print(
            f"  {path}: {len(dropped_sizes)} connections dropped, bodies of "
            f"{min(dropped_sizes)} to {max(dropped_sizes)} bytes",
            flush=True,
        )
    return counts


# -- strangers -----------------------------------------------------------------------------------

GUILD, CHANNEL = "1200000000000000001", "1300000000000000001"


async def strangers(quick: bool) -> Row:
    """Strangers on Telegram and Discord: no model call, one refusal each."""
    people, messages = (3, 3) if quick else (10, 5)
    llm = FakeLLM()
    discord = FakeDiscord(guilds=(FakeGuild(GUILD, channels=(CHANNEL,)),))
    async with stack("strangers", llm=llm, discord=discord) as s:
        await s.start_web()
        await s.start_workers(2)
        s.spawn("discord")
        await poll(lambda: discord.identifies and discord.commands, 90, 0.1)
        tg = Telegram(s)
        async with httpx.AsyncClient(timeout=30) as http:
            for turn in range(messages):
                await asyncio.gather(
                    *(
                        tg.deliver(http, tg.direct_update(900 + n, f"hello {turn}"))
                        for n in range(people)
                    )
                )
                for n in range(people):
                    author = discord.user(f"31337{n}", f"stranger{n}")
                    await discord.dispatch(
                        "MESSAGE_CREATE", discord.message(f"5570{n}", f"hello {turn}", author)
                    )
        refusals = {
            f"telegram:{900 + n}": (lambda n=n: len(s.telegram.messages_in(900 + n)))
            for n in range(people)
        }
        refusals |= {
            f"discord:31337{n}": (lambda n=n: len(discord.channel_messages(f"5570{n}")))
            for n in range(people)
        }
        await poll(lambda: all(count() for count in refusals.values()), 60, 0.1)
        await _quiet(s, discord)
        counts = {who: count() for who, count in refusals.items()}
        lost = sum(1 for n in counts.values() if n == 0)
        extra = sum(1 for n in counts.values() if n > 1)
        calls = len(llm.requests)
        ok = calls == 0 and not lost and not extra
        return Row(
            "strangers",
            len(counts) * messages,
            lost,
            extra,
            None,
            None,
            verdict(
                ok, f"{calls} model calls; refusals per stranger {sorted(set(counts.values()))}"
            ),
            [f"refusals: {counts}"],
        )


async def _quiet(s: Stack, discord: FakeDiscord, within: float = 30.0) -> None:
    """Until no job is left and the fakes saw no new call for 2 s (the last notices sent)."""
    client = s.client()
    deadline = time.monotonic() + within
    seen, since = -1, time.monotonic()
    try:
        while time.monotonic() < deadline:
            calls = len(s.telegram.calls) + len(discord.calls)
            if calls != seen:
                seen, since = calls, time.monotonic()
            streams = [*Keys.job_streams("telegram"), *Keys.job_streams("discord")]
            jobs = sum([await client.xlen(stream) for stream in streams])
            if jobs == 0 and time.monotonic() - since > 2.0:
                return
            await asyncio.sleep(0.1)
    finally:
        await client.aclose()


# -- 100,000 characters of adversarial Markdown --------------------------------------------------


async def markdown_flood(quick: bool) -> Row:
    """One session's reply is 100,000 characters of hostile Markdown; the other sessions on
    the same worker are answered within their normal time."""
    users, turns = (4, 2) if quick else (10, 3)
    big = adversarial_markdown(100_000)
    normal = tagged_reply(8)
    llm = FakeLLM()
    llm.reply = lambda body: (
        big + "\n\n" + done_marker(tag(0, 1)) if tag(0, 1) in request_text(body) else normal(body)
    )
    llm.token_delay = 0.0005
    async with stack("markdown", llm=llm) as s:
        await s.start_web()
        await s.start_workers(1)  # the others share its worker with the flood
        tg = Telegram(s)
        async with httpx.AsyncClient(timeout=30) as http:
            quiet_load = await _normal_load(tg, http, users, turns, first=1)
            baseline = tally(quiet_load, tg.finished_at, tg.replies)
            flood = await tg.send(http, group_chat(0), tag(0, 1))
            await poll(lambda: tg.replies(flood), 30)
            chat = group_chat(0)

            def delivered() -> bool:
                return any(done_marker(tag(0, 1)) in m.text for m in s.telegram.messages_in(chat))

            # The others keep talking for as long as the flood is being written (bounded).
            loaded: list[Sent] = []
            until = time.monotonic() + (45 if quick else 120)
            while not delivered() and time.monotonic() < until:
                loaded += await _normal_load(tg, http, users, 1, first=100 + len(loaded))
        delivered_flood = delivered()
        counted = await settle(s, tg, loaded, 30)
        normal_worst = max(baseline.latencies, default=0.0)
        limit = max(2 * normal_worst, normal_worst + 1.0)
        ok = counted.worst is not None and counted.worst <= limit and delivered_flood
        pieces = len(s.telegram.messages_in(chat))
        refused = sum(
            1
            for c in s.telegram.calls
            if c.params.get("chat_id") == chat and c.status not in (200, 429)
        )
        result = _row(
            "markdown-100k",
            counted,
            ok,
            f"others' worst {_s(counted.worst)} against normal {_s(normal_worst)} "
            f"(limit {_s(limit)}); flood delivered: {delivered_flood}",
        )
        lost_leases = len(s.log_lines("lease lost for " + tg.session_key(chat)))
        result.notes.append(
            f"the flood came in {pieces} messages; {refused} calls refused in "
            f"its chat; its turn lost its lease {lost_leases} times"
        )
        return result


async def _normal_load(
    tg: Telegram, http: httpx.AsyncClient, users: int, turns: int, first: int
) -> list[Sent]:
    """`users` sessions talking at once, each waiting for its answer before going on."""
    sents: list[Sent] = []

    async def user(number: int) -> None:
        for turn in range(1, turns + 1):
            sent = await tg.send(http, group_chat(number), tag(number, turn))
            sents.append(sent)
            await wait_finished([sent], tg.finished_at, 60)

    await asyncio.gather(*(user(first + n) for n in range(users)))
    return sents


def _s(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f}s"


# -- soak ----------------------------------------------------------------------------------------


async def soak(quick: bool) -> Row:
    """Many messages over many sessions: memory of every process flat after warm-up."""
    total, sessions = (400, 20) if quick else (10_000, 200)
    llm = FakeLLM()
    llm.reply = tagged_reply(8)
    async with stack("soak", llm=llm) as s:
        await s.start_web()
        await s.start_workers(2)
        tg = Telegram(s)
        sents: list[Sent] = []
        samples: dict[str, list[int]] = {}
        warm: dict[str, int] = {}
        done = asyncio.Event()

        async def sampler() -> None:
            while not done.is_set():
                for name, pid in _watched(s):
                    rss = rss_kib(pid)
                    if rss is not None:
                        samples.setdefault(name, []).append(rss)
                if not warm and len(sents) >= total // 5:
                    warm.update({name: values[-1] for name, values in samples.items()})
                await asyncio.sleep(1.0)  # the sampling period

        async def user(number: int, http: httpx.AsyncClient) -> None:
            for turn in range(1, total // sessions + 1):
                sent = await tg.send(http, group_chat(number), tag(number, turn), retry_for=10)
                sents.append(sent)
                await wait_finished([sent], tg.finished_at, 60)

        started = time.monotonic()
        watcher = asyncio.create_task(sampler())
        async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=64)) as http:
            await asyncio.gather(*(user(n, http) for n in range(sessions)))
        done.set()
        await watcher
        seconds = time.monotonic() - started
        counted = await settle(s, tg, sents, 60)
        growth = {
            name: max(values[len(values) // 5 :]) / warm[name] - 1
            for name, values in samples.items()
            if name in warm
        }
        worst = max(growth.values(), default=0.0)
        result = _row(
            "soak",
            counted,
            bool(growth) and worst <= 0.15,
            f"RSS growth after warm-up at most {worst:+.0%} (limit +15%)",
        )
        result.notes.append(
            f"{len(sents)} messages in {seconds:.0f}s; RSS growth "
            + ", ".join(
                f"{name} {warm[name] // 1024}MB {g:+.1%}" for name, g in sorted(growth.items())
            )
        )
        return result


def _watched(s: Stack) -> Iterator[tuple[str, int]]:
    """`gateway web`, each worker, and each worker's model processes."""
    from drill_stack import children

    for proc in s.procs:
        if proc.alive():
            yield proc.name, proc.pid
            for child in children(proc.pid):
                yield f"{proc.name}/model-{child}", child


# -- a Redis Cluster primary killed under load -------------------------------------------------


async def cluster_failover(quick: bool) -> Row:
    """A three-primary cluster's busiest primary SIGKILLed under closed-loop load
    (bench/cluster.py: ingest and a worker in this process): its replica is promoted
    after the node timeout, and answers must come again within 15 s. Nothing here waits
    for a replica to have a write, so what the dead primary had not yet passed on is
    gone: a message it had taken in (lost), or a reply's stored message id, whose turn
    then runs again and posts anew (dup). The row counts both."""
    from cluster import NODE_TIMEOUT_MS, failover

    from tests.support.clusters import start_cluster

    cluster = start_cluster(node_timeout_ms=NODE_TIMEOUT_MS)
    try:
        found = await failover(cluster, 8 if quick else 32)
    finally:
        cluster.stop()
    back = found.first_hit
    ok = back is not None and back <= 15.0
    figure = "no answer after the kill" if back is None else f"answers again {back:.1f} s after"
    return Row(
        "cluster-failover",
        found.trials,
        found.lost,
        found.duplicated,
        None,
        found.worst,
        verdict(
            ok,
            f"{figure} (target 15 s); without replica acks lost {found.lost}, "
            f"posted twice {found.duplicated}",
        ),
        [found.line()],
    )


# -- the table -----------------------------------------------------------------------------------

DRILLS: dict[str, Drill] = {
    "crash": crash,
    "crash-slack": crash_slack,
    "crash-drafts": crash_drafts,
    "redis-restart": redis_restart,
    "sentinel-failover": sentinel_failover,
    "sentinel-failover-nowait": sentinel_failover_nowait,
    "sentinel-failover-telegram": sentinel_failover_telegram,
    "model-chaos": model_chaos,
    "silent-model": silent_model,
    "platform-429": platform_429,
    "duplicates": duplicate_storm,
    "fuzz": fuzz,
    "strangers": strangers,
    "slow-side": slow_side_drill,
    "tool-crash": tool_crash,
    "markdown": markdown_flood,
    "soak": soak,
    "console-interrupt": console_interrupt,
    "cluster-failover": cluster_failover,
}
COLUMNS = ("drill", "trials", "lost", "dup", "stuck", "worst s", "verdict")


def format_row(row: Row) -> str:
    def cell(value: int | None) -> str:
        return "-" if value is None else str(value)

    worst = "-" if row.worst is None else f"{row.worst:.2f}"
    return (
        f"{row.drill:<24} {row.trials:>7} {cell(row.lost):>5} {cell(row.duplicated):>5} "
        f"{cell(row.stuck):>5} {worst:>8}  {row.verdict}"
    )


def header() -> str:
    return (
        f"{COLUMNS[0]:<24} {COLUMNS[1]:>7} {COLUMNS[2]:>5} {COLUMNS[3]:>5} "
        f"{COLUMNS[4]:>5} {COLUMNS[5]:>8}  {COLUMNS[6]}"
    )


async def run(names: list[str], quick: bool) -> list[Row]:
    rows: list[Row] = []
    print(header(), flush=True)
    for name in names:
        started = time.monotonic()
        try:
            row = await DRILLS[name](quick)
        except Exception as exc:  # a drill that breaks is a row too, never a lost table
            row = Row(
                name,
                0,
                None,
                None,
                None,
                None,
                verdict(False, f"drill failed: {type(exc).__name__}: {exc}"),
            )
            here = [f for f in traceback.extract_tb(exc.__traceback__) if "/bench/" in f.filename]
            if here:
                row.notes.append(f"raised at {Path(here[-1].filename).name}:{here[-1].lineno}")
        row.notes.append(f"took {time.monotonic() - started:.0f}s")
        rows.append(row)
        print(format_row(row), flush=True)
        for note in row.notes:
            print(f"{'':<26}{note}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts, for development")
    parser.add_argument("--only", default="", help=f"comma-separated, of {', '.join(DRILLS)}")
    args = parser.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(DRILLS)
    unknown = [n for n in names if n not in DRILLS]
    if unknown:
        parser.error(f"unknown drill(s) {', '.join(unknown)}; known: {', '.join(DRILLS)}")
    warnings.simplefilter("ignore", DeprecationWarning)
    # The fakes refuse what the gateway sends them wrong (a 400); aiohttp's own traceback
    # of each refusal would bury the table.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    with contextlib.suppress(KeyboardInterrupt):
        rows = asyncio.run(run(names, args.quick))
        print("\n" + header())
        for row in rows:
            print(format_row(row))


if __name__ == "__main__":
    main()

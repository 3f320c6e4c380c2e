"""The drills that break something: a worker, Redis, the model, the platform, the side model.

Each drill is an `async def name(quick: bool) -> Row` that starts its own
stack, drives Telegram traffic (and Slack's, for the second SIGKILL row) through
`gateway web`, injects its fault, waits
(with a deadline) for every acknowledged message to be answered, and reads
the outcome off the fakes and Redis.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import re
import signal
import time

import httpx
from drill_stack import (
    CUT_OFF_TEXT,
    FAILURE_TEXT,
    ChaosLLM,
    Stack,
    assistant_texts,
    describe_session,
    poll,
    rss_kib,
    stack,
    stuck_sessions,
    tagged_reply,
)
from drill_traffic import (
    Row,
    Sent,
    Slack,
    Tally,
    Telegram,
    TelegramPrivate,
    observe_typing,
    tag,
    tally,
    verdict,
    wait_finished,
)
from redis.asyncio import Redis

from gateway.state.keys import GROUP, Keys
from tests.fakes.llm_server import FakeLLM

WHOLE_REPLY = re.compile(r"done-q\d+x\d+$")


PRIVATE_CHATS = 7_000_000  # the first private chat's id (a user's): one chat a trial


def group_chat(number: int) -> int:
    return -(1_000_000 + number)


async def settle(s: Stack, tg: Telegram | Slack, sents: list[Sent], within: float) -> Tally:
    """Wait for the answers, then count them and the stuck sessions (Redis, and Telegram's
    typing or Slack's thinking reaction still shown).

    What the first lost, duplicated and stuck sessions left in Redis is kept as evidence.
    """
    await wait_finished(sents, tg.finished_at, within)
    counted = tally(sents, tg.finished_at, tg.replies)
    evidence = counted.evidence
    client = s.client()
    try:
        stuck = set(await stuck_sessions(client, sorted({x.session for x in sents})))
        lost = [x for x in sents if x.acked and tg.finished_at(x) is None]
        for x in lost[:2]:
            evidence.append(
                f"lost {x.tag}, {len(tg.replies(x))} replies posted; "
                + await describe_session(client, x.session)
            )
        for x in [x for x in sents if len(tg.replies(x)) > 1][:2]:
            texts = [m.text[:40] for m in tg.replies(x)]
            evidence.append(
                f"duplicated {x.tag}: {len(texts)} messages posted {texts}; "
                + await describe_session(client, x.session)
            )
        for key in sorted(stuck)[:2]:
            evidence.append("stuck " + await describe_session(client, key))
    finally:
        await client.aclose()
    if isinstance(tg, Telegram):
        typing = await observe_typing(s, {x.chat for x in sents})
        stuck |= {tg.session_key(int(chat)) for chat in typing}
        if typing:
            evidence.append(f"typing still renewed in chats {typing[:3]}")
    else:
        thinking = {x.session for x in sents if (x.chat, x.ref) in tg.reacted()}
        stuck |= thinking
        if thinking:
            evidence.append(f"the thinking reaction still on {sorted(thinking)[:3]}")
    counted.stuck = len(stuck)
    return counted


def row(name: str, counted: Tally, ok: bool, figure: str) -> Row:
    """The drill's line: `ok` is its own check; lost, duplicated or stuck always miss."""
    clean = not (counted.lost or counted.duplicated or counted.stuck)
    return Row(
        name,
        counted.trials,
        counted.lost,
        counted.duplicated,
        counted.stuck,
        counted.worst,
        verdict(ok and clean, figure),
        list(counted.evidence),
    )


# -- SIGKILL a worker mid-stream -----------------------------------------------------------------


async def job_holders(client: Redis) -> dict[str, int]:
    """Which worker process (pid, from its consumer name) holds each session's pending job."""
    holders: dict[str, int] = {}
    async for stream in client.scan_iter(match=Keys.JOB_STREAMS_MATCH):
        for item in await client.xpending_range(stream, GROUP, "-", "+", 1000):
            job_id = item["message_id"]
            for _, fields in await client.xrange(stream, job_id, job_id):
                consumer = str(item["consumer"])  # host-pid-hex
                holders[fields.get("session", "")] = int(consumer.rsplit("-", 2)[1])
    return holders


async def crash(quick: bool) -> Row:
    """SIGKILL the worker holding the most streaming Telegram turns; another must finish
    each once."""
    return await _crash(quick, "telegram")


async def crash_slack(quick: bool) -> Row:
    """The same on Slack, where a re-run finds a post its killed predecessor could not
    record (the message's metadata) and edits it."""
    return await _crash(quick, "slack")


async def crash_drafts(quick: bool) -> Row:
    """The same in Telegram's private chats, where a reply streams as a draft (no message
    until its end): the re-run streams it again and posts the one message."""
    return await _crash(quick, "telegram-draft")


CRASH_ROWS = {
    "telegram": "sigkill-worker",
    "slack": "sigkill-native-slack",
    "telegram-draft": "sigkill-native-telegram",
}


async def _crash(quick: bool, platform: str) -> Row:
    target, batch = (6, 6) if quick else (50, 10)
    llm = FakeLLM()
    llm.reply, llm.duration = tagged_reply(40), 3.0
    extra = {"TELEGRAM_ALLOW_ALL": "1"} if platform == "telegram-draft" else {}
    async with stack(f"crash-{platform}", llm=llm, **extra) as s:
        await s.start_web()
        await s.start_workers(2)
        tg: Telegram | Slack = (
            Telegram(s)
            if platform == "telegram"
            else TelegramPrivate(s)
            if platform == "telegram-draft"
            else Slack(s)
        )
        trials, orphans = 0, 0
        sents: list[Sent] = []
        deadline = time.monotonic() + (240 if quick else 900)
        client = s.client()

        async def send(http: httpx.AsyncClient, number: int) -> Sent:
            if isinstance(tg, TelegramPrivate):
                return await tg.send(http, PRIVATE_CHATS + number, tag(number, 1))
            if isinstance(tg, Telegram):
                return await tg.send(http, group_chat(number), tag(number, 1))
            return await tg.send(http, tag(number, 1), copies=1)

        async with httpx.AsyncClient(timeout=30) as http:
            while trials < target and time.monotonic() < deadline:
                base = len(sents)
                round_ = await asyncio.gather(*(send(http, base + i) for i in range(batch)))
                sents += round_
                await poll(lambda r=round_: all(_streaming(tg, x) for x in r if x.acked), 30, 0.05)
                killed, lingering = await _kill_busiest(s, tg, client, round_)
                trials += killed
                orphans += lingering
                replacement = asyncio.create_task(s.start_workers(1))
                await wait_finished(round_, tg.finished_at, 60)
                await replacement
        await client.aclose()
        counted = await settle(s, tg, sents, 30)
        counted.trials = trials
        reclaims = len(s.log_lines("reclaimed turn job"))
        result = row(
            CRASH_ROWS[platform],
            counted,
            trials >= target,
            f"{trials} turns killed mid-stream, {counted.lost} lost, "
            f"{counted.duplicated} duplicated, {counted.stuck} stuck",
        )
        result.notes.append(
            f"{reclaims} reclaims logged; {orphans} model processes outlived "
            f"their SIGKILLed worker by 5 s; logs in {s.workdir}"
        )
        return result


async def _kill_busiest(
    s: Stack, tg: Telegram | Slack, client: Redis, round_: list[Sent]
) -> tuple[int, int]:
    """Kill the worker holding most unfinished, already-posted replies of the round.

    Returns the turns it held mid-stream and how many of its children outlived it.
    """
    holders = await job_holders(client)
    streaming = [x for x in round_ if x.acked and _streaming(tg, x) and tg.finished_at(x) is None]
    counts = collections.Counter(holders.get(x.session) for x in streaming)
    counts.pop(None, None)
    if not counts:
        return 0, 0
    pid = counts.most_common(1)[0][0]
    proc = next((p for p in s.workers if p.pid == pid), None)
    if proc is None:
        return 0, 0
    held = sum(1 for x in streaming if holders.get(x.session) == pid and tg.finished_at(x) is None)
    kids = s.sigkill(proc)
    await poll(lambda: all(rss_kib(k) is None for k in kids), 5)
    lingering = [k for k in kids if rss_kib(k) is not None]
    for kid in lingering:
        _kill(kid)
    return held, len(lingering)


def _streaming(tg: Telegram | Slack, sent: Sent) -> bool:
    """Whether the reply to `sent` shows (a draft, or its first message posted)."""
    return tg.streaming(sent) if isinstance(tg, TelegramPrivate) else bool(tg.replies(sent))


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


# -- Redis restarted under load ------------------------------------------------------------------


async def redis_restart(quick: bool) -> Row:
    """Kill and restart Redis (append-only, fsync always) while users keep talking."""
    users, seconds, restarts = (8, 20.0, 1) if quick else (30, 60.0, 2)
    llm = FakeLLM()
    llm.reply, llm.token_delay = tagged_reply(8), 0.05
    async with stack("redis-restart", llm=llm, durable=True) as s:
        await s.start_web()
        await s.start_workers(2)
        tg = Telegram(s)
        sents: list[Sent] = []
        stop_at = time.monotonic() + seconds

        async def user(number: int, http: httpx.AsyncClient) -> None:
            turn = 0
            while time.monotonic() < stop_at:
                turn += 1
                sent = await tg.send(http, group_chat(number), tag(number, turn), retry_for=30)
                sents.append(sent)
                if sent.acked:
                    await wait_finished([sent], tg.finished_at, 45)

        async def restarter() -> None:
            for _ in range(restarts):
                await asyncio.sleep(seconds / (restarts + 1))  # when the fault strikes
                s.redis.kill()
                await asyncio.sleep(1.0)  # the outage itself
                await asyncio.to_thread(s.redis.start)

        async with httpx.AsyncClient(timeout=30) as http:
            await asyncio.gather(restarter(), *(user(n, http) for n in range(users)))
        counted = await settle(s, tg, sents, 60)
        refused = collections.Counter(st for x in sents for st in x.statuses if st != 200)
        dead = [p.name for p in s.procs if not p.alive()]
        result = row(
            "redis-restart",
            counted,
            not dead,
            f"{counted.lost} of {counted.trials} acknowledged lost, "
            f"{counted.duplicated} duplicated, {counted.stuck} stuck",
        )
        result.notes.append(
            f"{restarts} SIGKILL+restart of Redis; not acknowledged while down: "
            f"{dict(refused)} (re-delivered); "
            f"{sum(not x.acked for x in sents)} never acknowledged; "
            f"exited: {dead or 'none'}"
        )
        return result


# -- the model failing 30% of its calls ----------------------------------------------------------


async def model_chaos(quick: bool) -> Row:
    """500s, 429s, timeouts, stalled streams and connections cut midway on 30% of calls:
    each turn answered or told once, and no half reply in the history."""
    users, turns = (6, 3) if quick else (30, 4)
    llm = ChaosLLM(0.3, seed=7)
    llm.reply, llm.token_delay = tagged_reply(12), 0.05
    async with stack("model-chaos", llm=llm, GATEWAY_MODEL_TIMEOUT="3") as s:
        await s.start_web()
        await s.start_workers(2)
        tg = Telegram(s)
        sents: list[Sent] = []

        async def user(number: int, http: httpx.AsyncClient) -> None:
            for turn in range(1, turns + 1):
                sent = await tg.send(http, group_chat(number), tag(number, turn), retry_for=10)
                sents.append(sent)
                await wait_finished([sent], tg.finished_at, 60)

        async with httpx.AsyncClient(timeout=30) as http:
            await asyncio.gather(*(user(n, http) for n in range(users)))
        counted = await settle(s, tg, sents, 30)
        client = s.client()
        parts = [
            text
            for key in sorted({x.session for x in sents})
            for text in await assistant_texts(client, key)
            if not WHOLE_REPLY.search(text.strip())
        ]
        await client.aclose()
        # A failure after some text (a stall, a cut) keeps it, with a note that it was cut
        # off, and records it: what the user saw. A part recorded that no message showed
        # with the note is a half reply.
        cut = [m.text for x in sents for m in tg.replies(x) if CUT_OFF_TEXT in m.text]
        half = [text for text in parts if not any(text.strip() in shown for shown in cut)]
        told = sum(1 for x in sents for m in tg.replies(x) if FAILURE_TEXT in m.text)
        result = row(
            "model-chaos-30%",
            counted,
            not half,
            f"{counted.trials - counted.lost} of {counted.trials} answered or told, "
            f"{len(half)} half replies in history",
        )
        result.notes.append(
            f"faults injected {llm.injected} over {len(llm.requests)} calls; "
            f"{told} turns told of a failure, {len(cut)} cut off after some text (kept, "
            f"and recorded as shown)"
        )
        if half:
            result.notes.append(f"half reply recorded, e.g. {half[0][:80]!r}")
        return result


# -- the platform says 429 retry_after mid-stream ------------------------------------------------


async def platform_429(quick: bool) -> Row:
    """Telegram answers an edit with 429 retry_after=2: nothing into that chat for 2 s, and
    the final text still arrives."""
    trials, batch, wait = (5 if quick else 20), 5, 2
    llm = FakeLLM()
    llm.reply, llm.duration = tagged_reply(40), 3.0
    async with stack("platform-429", llm=llm) as s:
        await s.start_web()
        await s.start_workers(2)
        tg = Telegram(s)
        sents: list[Sent] = []
        async with httpx.AsyncClient(timeout=30) as http:
            for start in range(0, trials, batch):
                round_ = await asyncio.gather(
                    *(tg.send(http, group_chat(n), tag(n, 1)) for n in range(start, start + batch))
                )
                sents += round_
                await poll(lambda r=round_: all(_streaming(tg, x) for x in r if x.acked), 30, 0.05)
                s.telegram.fail_next(
                    "editMessageText", status=429, retry_after=wait, count=len(round_)
                )
                await wait_finished(round_, tg.finished_at, 60)
        counted = await settle(s, tg, sents, 30)
        refusals = [c for c in s.telegram.calls if c.status == 429]
        early = [
            c
            for r in refusals
            for c in s.telegram.calls
            if c is not r
            and c.params.get("chat_id") == r.params.get("chat_id")
            and r.at < c.at < r.at + wait - 0.05
        ]
        result = row(
            "platform-429",
            counted,
            bool(refusals) and not early,
            f"{len(early)} calls into a chat during its {len(refusals)} waits, "
            f"{counted.trials - counted.lost}/{counted.trials} final texts delivered",
        )
        if early:
            result.notes.append(
                "sent during a wait: " + ", ".join(sorted({c.method for c in early}))
            )
        return result


# -- a side model slower than twice the lease TTL ------------------------------------------------


async def slow_side(quick: bool) -> Row:
    """`/btw` whose model takes 4.5 s with a 1.5 s lease TTL: one side answer each."""
    questions = 3 if quick else 10
    llm = FakeLLM()
    llm.reply = tagged_reply(6)
    llm.set_model_behaviour("side-model", reply="side answer", delay=4.5)
    async with stack("slow-side", llm=llm) as s:
        await s.start_web()
        await s.start_workers(2)
        tg, asked = Telegram(s), []

        async def conversation(number: int, http: httpx.AsyncClient) -> None:
            sent = await tg.send(http, group_chat(number), tag(number, 1))
            await wait_finished([sent], tg.finished_at, 30)
            asked.append(await tg.send(http, group_chat(number), tag(number, 2), command=True))

        async with httpx.AsyncClient(timeout=30) as http:
            await asyncio.gather(*(conversation(n, http) for n in range(questions)))

        def answered(x: Sent) -> float | None:
            times = [
                s.telegram.first_time(m.chat_id, m.message_id, "side answer") for m in tg.replies(x)
            ]
            return min((t for t in times if t is not None), default=None)

        def quiet() -> bool:
            side = llm.requests_for("side-model")
            return all(answered(x) for x in asked if x.acked) and all(
                r.finished_at is not None for r in side
            )

        await poll(quiet, 60, 0.1)
        await _drained(s, 30)
        counted = tally(asked, answered, tg.replies)
        calls = len(llm.requests_for("side-model"))
        result = row(
            "slow-side-model",
            counted,
            True,
            f"{counted.trials - counted.duplicated - counted.lost} of {counted.trials} "
            f"questions got exactly one side answer ({calls} side model calls)",
        )
        result.stuck = None
        result.notes.append(f"side-job reclaims logged: {len(s.log_lines('reclaimed side job'))}")
        return result


async def _drained(s: Stack, within: float) -> bool:
    """Every job stream empty: nothing left to run (finished jobs are deleted)."""
    client = s.client()

    async def empty() -> bool:
        total = 0
        async for stream in client.scan_iter(match=Keys.JOB_STREAMS_MATCH):
            total += await client.xlen(stream)
        return total == 0

    deadline = time.monotonic() + within
    try:
        while not await empty():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.1)
        return True
    finally:
        await client.aclose()

"""Failover drills: the primary of a Sentinel set killed under load, its replica promoted.

Users keep talking through `gateway web` and two workers (`REDIS_URL` names the
Sentinel set). The replica is first cut off (its replication link closed while it
sleeps in DEBUG SLEEP, as on a partitioned network), and the primary is killed
(SIGKILL) while it is: what the primary acknowledged meanwhile exists nowhere else.
The sentinels promote the replica; the old primary comes back and is made its replica.

The rows run on Slack, whose posts a re-run finds again, and once on Telegram,
whose Bot API cannot: a turn that posted while the replica was cut off, and whose
record of the post died with the primary, is run again and posts a second time (the
window README's Durability names for a worker killed between a post and its record,
here as long as the replica is cut off).

With GATEWAY_REDIS_WAIT_REPLICAS=1 no event is acknowledged before the replica has
it: none may be lost, and every message is answered once. Without it, the row
counts the acknowledged messages that were lost with the primary. Lost: never
answered, or missing from its session in Redis after the failover (a worker that
had read it before the kill may still have answered it from memory).
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time

import httpx
import redis
from drill_faults import group_chat, row, settle
from drill_stack import Stack, poll, stack, tagged_reply
from drill_traffic import Row, Sent, Slack, Telegram, tag

from gateway.state.keys import Keys
from tests.fakes.llm_server import FakeLLM

REPLICA_STALL = 0.9  # seconds the replica applies nothing (under the sentinels' 1 s down-after)
KILL_INTO_STALL = 0.6


async def sentinel_failover(quick: bool) -> Row:
    return await _failover(quick, wait=True, platform="slack")


async def sentinel_failover_nowait(quick: bool) -> Row:
    return await _failover(quick, wait=False, platform="slack")


async def sentinel_failover_telegram(quick: bool) -> Row:
    return await _failover(quick, wait=True, platform="telegram")


async def _failover(quick: bool, wait: bool, platform: str) -> Row:
    users, seconds = (8, 16.0) if quick else (24, 40.0)
    llm = FakeLLM()
    llm.reply, llm.token_delay = tagged_reply(8), 0.05
    extra = {"GATEWAY_REDIS_WAIT_REPLICAS": "1", "GATEWAY_REDIS_WAIT_TIMEOUT": "1"} if wait else {}
    name = (
        "sentinel-failover"
        + ("" if wait else "-nowait")
        + ("-telegram" if platform == "telegram" else "")
    )
    async with stack(name, llm=llm, sentinel=True, **extra) as s:
        await s.start_web()
        await s.start_workers(2)
        tg: Telegram | Slack = Telegram(s) if platform == "telegram" else Slack(s)
        sents: list[Sent] = []
        stop_at = time.monotonic() + seconds
        timing: dict[str, float] = {}

        async def user(number: int, http: httpx.AsyncClient) -> None:
            turn = 0
            while time.monotonic() < stop_at:
                turn += 1
                if isinstance(tg, Telegram):
                    chat = group_chat(number)
                    sent = await tg.send(http, chat, tag(number, turn), retry_for=30)
                else:  # a thread of its own each time
                    sent = await tg.send(http, tag(number, turn), copies=1, retry_for=30)
                sents.append(sent)
                if sent.acked:
                    await poll(lambda sent=sent: tg.finished_at(sent) is not None, 45)

        async with httpx.AsyncClient(timeout=30) as http:
            await asyncio.gather(
                _kill_primary(s, seconds / 3, timing), *(user(n, http) for n in range(users))
            )
        counted = await settle(s, tg, sents, 60)
        forgotten = await _not_in_redis(s, [x for x in sents if x.acked])
        counted.lost = len(
            {x.tag for x in sents if x.acked and tg.finished_at(x) is None}
            | {x.tag for x in forgotten}
        )
        after = [t for x in sents if (t := tg.finished_at(x)) is not None and t > timing["killed"]]
        refused = collections.Counter(st for x in sents for st in x.statuses if st != 200)
        dead = [p.name for p in s.procs if not p.alive()]
        figure = (
            f"{counted.lost} of {counted.trials} acknowledged lost, "
            f"{counted.duplicated} duplicated, {counted.stuck} stuck"
        )
        result = row(name, counted, not dead, figure)
        if not wait:  # without the wait, losing some is what the row is there to count
            result.verdict = f"reported: {figure}" + ("" if not dead else f"; exited {dead}")
        first_answer = min(after, default=None)
        result.notes.append(
            f"replica cut off {REPLICA_STALL}s, primary SIGKILLed {KILL_INTO_STALL}s into it; "
            f"replica promoted {timing['promoted'] - timing['killed']:.1f}s after the kill, "
            "first answer after the kill "
            + (f"{first_answer - timing['killed']:.1f}s" if first_answer else "never")
            + f"; {len(forgotten)} acknowledged messages not in Redis after it "
            f"{[x.tag for x in forgotten[:5]]}"
            + f"; not acknowledged at first: {dict(refused)} (re-delivered); "
            f"{sum(not x.acked for x in sents)} never acknowledged; exited: {dead or 'none'}"
        )
        return result


async def _kill_primary(s: Stack, after: float, timing: dict[str, float]) -> None:
    """Stall the replica, kill the primary meanwhile, wait for the promotion, bring the
    old primary back as a replica of the new one (`SentinelSet.rejoin`: its data died with
    it; started as a primary, a second failover could elect it empty, and did)."""
    sentinels = s.sentinels
    assert sentinels is not None
    await asyncio.sleep(after)
    old = sentinels.primary_port()
    assert old is not None
    stall = threading.Thread(target=_stall, args=(sentinels.replica_port(), REPLICA_STALL))
    stall.start()
    await asyncio.sleep(0.05)  # the replica asleep: it cannot connect again for a while
    primary = redis.Redis(port=old)
    primary.execute_command("CLIENT", "KILL", "TYPE", "slave")  # its replication link cut
    primary.close()
    await asyncio.sleep(KILL_INTO_STALL)
    sentinels.kill(old)
    timing["killed"] = time.monotonic()
    await asyncio.to_thread(stall.join)
    promoted = await poll(lambda: sentinels.primary_port() not in (old, None), 60, 0.05)
    timing["promoted"] = time.monotonic() if promoted else float("nan")
    await asyncio.to_thread(sentinels.rejoin, old)
    await asyncio.to_thread(sentinels.wait_ready, 60)


async def _not_in_redis(s: Stack, sents: list[Sent]) -> list[Sent]:
    """Acknowledged messages their session's history and inbox do not hold: lost with the
    primary, even when a worker that read them before answered from memory."""
    client = s.client()
    try:
        missing = []
        for sent in sents:
            entries = await client.lrange(Keys.history(sent.session), 0, -1)
            entries += await client.lrange(Keys.inbox(sent.session), 0, -1)
            if not any(f"{sent.tag} please answer" in entry for entry in entries):
                missing.append(sent)
        return missing
    finally:
        await client.aclose()


def _stall(port: int, seconds: float) -> None:
    client = redis.Redis(port=port, socket_timeout=seconds + 5)
    try:
        client.execute_command("DEBUG", "SLEEP", seconds)
    finally:
        client.close()

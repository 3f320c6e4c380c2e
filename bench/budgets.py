"""What budgets add to a turn: the check and hold before its call, letting go after.

Starts its own redis-server and runs, turn after turn, the Redis work a turn's
usage needs with and without budgets set (all four of a user's and workspace's
daily and monthly caps), interleaved in the same run so both see the same
machine: without, the call's usage written at its end (`UsageLedger.record`);
with, the check-and-hold script before the call, then the same write, which
settles the hold in its own transaction (the turn's closing release finds
nothing left to do and costs no round trip). It prints p50 and p99 of each and
what budgets add (target: 1 ms at p50).

    python bench/budgets.py [--turns 2000] [--users 50]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import time
from collections.abc import Awaitable, Callable

from common import ms, percentile, start_redis, wait_redis

from gateway.models import Charge, ModelCall, Usage
from gateway.settings.values import Budget
from gateway.spend.budgets import Budgets
from gateway.spend.usage import UsageLedger
from gateway.state.keys import connect

MESSAGES = [{"role": "user", "content": "a question of about this many words " * 20}]


async def timed(step: Callable[[], Awaitable[object]]) -> float:
    started = time.perf_counter()
    await step()
    return time.perf_counter() - started


async def with_budget(caps: Budgets, ledger: UsageLedger, call: ModelCall, usage: Usage) -> None:
    assert call.charge is not None
    hold = await caps.hold_call(call.charge, call.model, call.messages, call.max_tokens)
    await ledger.record(call, usage)
    await caps.release(hold)


async def run(url: str, turns: int, users: int) -> tuple[list[float], list[float]]:
    redis = connect(url)
    ledger = UsageLedger(redis)
    caps = Budgets(
        redis,
        [Budget(1e9, "tokens"), Budget(1e6, "usd"), Budget(1e12, "tokens"), Budget(1e9, "usd")],
        {"openai/gpt-4o-mini": (0.15e-6, 0.6e-6)},
    )
    without: list[float] = []
    with_budgets: list[float] = []
    try:
        for number, user in zip(range(turns), itertools.cycle(range(users))):
            charge = Charge(f"console:local:c{user}", f"u{user}", "turn")
            call = ModelCall("openai/gpt-4o-mini", MESSAGES, 60.0, max_tokens=1024, charge=charge)
            usage = Usage(200, 100, 0.0001)

            plain = functools.partial(ledger.record, call, usage)
            budgeted = functools.partial(with_budget, caps, ledger, call, usage)
            first, second = (plain, budgeted) if number % 2 else (budgeted, plain)
            first_time, second_time = await timed(first), await timed(second)
            plain_time, budget_time = (
                (second_time, first_time) if first is budgeted else (first_time, second_time)
            )
            without.append(plain_time)
            with_budgets.append(budget_time)
    finally:
        await redis.aclose()
    return without, with_budgets


async def amain(args: argparse.Namespace) -> None:
    process, url = start_redis()
    try:
        await wait_redis(url)
        without, with_budgets = await run(url, args.turns, args.users)
    finally:
        process.terminate()
        process.wait(timeout=10)
    print(f"{args.turns} turns, {args.users} users, p50 and p99 of the Redis work per turn")
    for name, values in (("without budgets", without), ("with budgets", with_budgets)):
        print(f"  {name:16} p50 {ms(percentile(values, 50))}  p99 {ms(percentile(values, 99))}")
    added = [b - a for a, b in zip(without, with_budgets, strict=True)]
    print(f"  {'budgets add':16} p50 {ms(percentile(added, 50))}  p99 {ms(percentile(added, 99))}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--users", type=int, default=50)
    asyncio.run(amain(parser.parse_args(argv)))


if __name__ == "__main__":
    main()

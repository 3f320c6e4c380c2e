"""CPU of the model path on uvloop against asyncio's own loop, rounds alternated.

Each round starts one process per loop (`GATEWAY_EVENT_LOOP` as the gateway reads it): it
runs a model pool of one model process, as a worker does, and streams `--calls` calls
through it, `--at-once` at a time, from the fake model (its own process, started once:
300 ms to the first token, then 20 tokens 20 ms apart, as bench/cpu.py's). What is
counted is the CPU (utime + stime) of that process and of its model process over the
calls, after warm-up calls; the medians over the rounds, and their ratio, are printed.

    python bench/event_loop.py [--rounds 5] [--calls 100] [--at-once 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
from typing import Any

import common

from gateway import event_loop
from gateway.models.pool import ModelPool
from gateway.models.types import ModelCall, ModelSettings, Usage

MODEL = "openai/fake-model"
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
LOOPS = ("asyncio", "uvloop")
TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float:
    """utime + stime of `pid`, from /proc (seconds)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def measured(api_base: str, choice: str, calls: int, at_once: int) -> dict[str, Any]:
    """One side's round: the pool started, warmed, then `calls` streamed calls counted."""
    pool = ModelPool(ModelSettings(api_base=api_base, api_key="sk-bench", event_loop=choice), 1)
    await pool.start()
    try:
        gate = asyncio.Semaphore(at_once)

        async def one() -> None:
            async with gate:
                async for _ in pool.stream(ModelCall(MODEL, MESSAGES, timeout=60.0), Usage()):
                    pass

        await asyncio.gather(*(one() for _ in range(at_once)))  # warm: litellm's first calls
        (process,) = pool.processes
        assert process.pid is not None
        worker, child = own_cpu(), process_cpu(process.pid)
        await asyncio.gather(*(one() for _ in range(calls)))
        return {
            "worker": (own_cpu() - worker) / calls * 1000,
            "model process": (process_cpu(process.pid) - child) / calls * 1000,
            "loop": event_loop.running(),
        }
    finally:
        await pool.aclose()


def side(args: argparse.Namespace) -> None:
    """A round's process: prints its figures as one JSON line."""
    figures = event_loop.run(
        measured(args.api_base, args.side, args.calls, args.at_once), args.side
    )
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--at-once", type=int, default=10)
    parser.add_argument("--side", choices=LOOPS, help=argparse.SUPPRESS)
    parser.add_argument("--api-base", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        side(args)
        return
    words = " ".join(f"word{i}" for i in range(20))
    fake = common.RemoteFake("--reply", words, "--delay", "0.3", "--token-delay", "0.02")
    spent: dict[str, list[dict[str, Any]]] = {choice: [] for choice in LOOPS}
    try:
        for _ in range(args.rounds):
            for choice in LOOPS:
                command = [sys.executable, __file__, "--side", choice, "--api-base", fake.api_base]
                command += ["--calls", str(args.calls), "--at-once", str(args.at_once)]
                done = subprocess.run(command, capture_output=True, text=True, check=True)
                spent[choice].append(json.loads(done.stdout.splitlines()[-1]))
    finally:
        fake.stop()
    print(
        f"CPU per streamed call (20 tokens, {args.at_once} at once), "
        f"median of {args.rounds} rounds:"
    )
    base: dict[str, float] = {}
    for choice in LOOPS:
        rounds = spent[choice]
        parts = {k: statistics.median(r[k] for r in rounds) for k in ("worker", "model process")}
        total = statistics.median(r["worker"] + r["model process"] for r in rounds)
        base.setdefault("total", total)
        print(
            f"  {rounds[0]['loop']:<14} worker {parts['worker']:5.2f} ms  model process "
            f"{parts['model process']:5.2f} ms  both {total:5.2f} ms  "
            f"{total / base['total']:5.2f}x asyncio"
        )


if __name__ == "__main__":
    main()

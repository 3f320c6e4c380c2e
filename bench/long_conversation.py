"""Long conversations: compile time, tokens sent per turn, and Redis memory per session.

    python -m bench.long_conversation [--budget 4000] [--turns 200]

Everything real but the far ends: a private redis-server, the loopback fake
model (it answers the summariser and the main turns), the real Compressor,
SessionStore, MessageCompiler and Worker.

1. Compile time at 100, 1,000 and 10,000 history entries: what a turn does
   before it calls the model (read the view from Redis, count its tokens
   against the budget, compile the request). The sessions are grown the way
   real ones are: entries appended a turn at a time, with compression after
   each turn once the view passes its threshold. Token counts are warm
   (a worker counts each entry once).
2. Tokens sent per turn over a conversation, through the real worker, in
   full mode (chat completions) and in delta mode (the Responses API chained
   on previous_response_id).
3. Redis memory per session (MEMORY USAGE over the session's keys).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import warnings
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import common  # first: it puts the project and the fakes on sys.path
import redis.asyncio as aioredis

from gateway.context.compiler import MessageCompiler, ReplyTarget, TurnContext
from gateway.context.compression import Compressor
from gateway.messages import Address, Inbound, Speaker
from gateway.models import Models
from gateway.models.litellm_backend import load_litellm
from gateway.settings.env import Settings
from gateway.state.keys import Keys
from gateway.state.session import SessionStore, assistant_entry, user_entry
from tests.fakes.llm_server import FakeLLM
from tests.support.conversation import MAIN, STATEFUL_MAIN, conversation, make_settings

SENTENCES = [
    "Can you check why the deploy of version 2.{n} failed on the staging cluster?",
    "Bob said the invoice for order {n} is still open; please remind me on Friday.",
    "The error was 'connection reset by peer' after {n} seconds, twice in a row.",
    "Let's decide: we ship the {n}th build to the beta group and wait for feedback.",
    "Alice wants the quarterly numbers ({n} signups, 3 churned) in the summary.",
]
REPLY = "Noted. I have checked it: the cause is the expired certificate; renew it and redeploy."
TARGET = ReplyTarget("Alice", "U1", "slack channel C1")


def line(number: int) -> str:
    return SENTENCES[number % len(SENTENCES)].format(n=number)


def inbound(number: int) -> Inbound:
    address = Address(
        platform="slack", workspace="T1", channel="C1", thread="1712.1", reply_to=f"1712.{number}"
    )
    return Inbound(
        platform="slack",
        workspace="T1",
        channel="C1",
        thread="1712.1",
        message_id=f"1712.{number}",
        event_id=f"Ev{number}",
        speaker=Speaker(id="U1", name="Alice"),
        text=line(number),
        is_dm=False,
        mentions_bot=True,
        reply=address,
        side_reply=address.model_copy(update={"side": True}),
    )


@asynccontextmanager
async def redis_server() -> AsyncIterator[str]:
    process, url = common.start_redis(prefix="gw-bench-")  # started once, before any timing
    try:
        await common.wait_redis(url)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


async def grow_session(
    redis: aioredis.Redis, compressor: Compressor, key: str, entries: int
) -> None:
    """Append user/assistant pairs as turns would, compressing after each turn as needed."""
    history, meta = Keys.history(key), Keys.meta(key)
    for number in range(entries // 2):
        user = user_entry(inbound(number))
        reply = assistant_entry(REPLY, f"0.{number * 2}", [f"1712.{number}b"])
        async with redis.pipeline(transaction=True) as pipe:
            pipe.rpush(history, json.dumps(user), json.dumps(reply))
            pipe.hset(meta, "answered", (number + 1) * 2)
            await pipe.execute()
        await compressor.after_turn(key, group=True)


async def compile_path(
    sessions: SessionStore, compressor: Compressor, settings: Settings, key: str
) -> tuple[float, int, int]:
    """One turn's work before the model call; (seconds, view entries, tokens)."""
    started = time.perf_counter()
    view = await sessions.view(key)
    context = TurnContext(key, view.entries, TARGET, ["queued note"], True, view.segments)
    request = MessageCompiler(key, settings.system_prompt).compile(context)
    tokens = await compressor.tokens(view, True, request.reminder)
    return time.perf_counter() - started, len(request.messages), tokens


async def memory(redis: aioredis.Redis, key: str) -> int:
    total = 0
    for name in Keys.all_parts(key):
        total += int(await redis.memory_usage(name, samples=0) or 0)
    return total


async def bench_compile(url: str, llm: FakeLLM, budget: int) -> dict[int, int]:
    settings = make_settings(url, llm, GATEWAY_TOKEN_BUDGET=budget)
    redis = aioredis.Redis.from_url(url, decode_responses=True)
    sessions = SessionStore(redis)
    compressor = Compressor(settings, redis, Models.for_settings(settings))
    sizes = (100, 1_000, 10_000)
    keys = {size: f"slack:T1:C{size}:1712.1" for size in sizes}
    runs: dict[int, list[tuple[float, int, int]]] = {size: [] for size in sizes}
    try:
        for size in sizes:
            await grow_session(redis, compressor, keys[size], size)
            for _ in range(5):  # warm: the worker has counted these entries before
                await compile_path(sessions, compressor, settings, keys[size])
        for _ in range(50):  # round robin, so that machine noise falls on every size alike
            for size in sizes:
                runs[size].append(await compile_path(sessions, compressor, settings, keys[size]))
        times = {size: statistics.median(r[0] for r in runs[size]) for size in sizes}
        memories = {size: await memory(redis, keys[size]) for size in sizes}
        for size in sizes:
            _, messages, tokens = runs[size][-1]
            segments = len(await sessions.segments(keys[size]))
            print(
                f"compile time at {size:>6,} entries: {times[size] * 1000:6.2f} ms "
                f"(median of 50; {messages} messages, {tokens:,} tokens sent, "
                f"{segments} segments, budget {budget:,})"
            )
        ratio = times[10_000] / times[100]
        print(
            f"compile time 10,000 / 100 entries: {ratio:.2f}x "
            f"(target: at most 20 ms and at most 2x)"
        )
        # A freshly started worker:
        cold = Compressor(settings, redis, Models.for_settings(settings))
        firsts = [(await compile_path(sessions, cold, settings, keys[size]))[0] for size in sizes]
        shown = ", ".join(
            f"{size:,}: {t * 1000:.1f} ms" for size, t in zip(sizes, firsts, strict=True)
        )
        print(f"first compile in a fresh worker (every view entry counted once): {shown}")
    finally:
        await redis.aclose()
    return memories


def sent_tokens(models: Models, request: dict[str, Any]) -> int:
    if "messages" in request:
        return models.count_tokens(MAIN, request["messages"])
    messages = [{"role": "system", "content": request.get("instructions") or ""}]
    messages += [item for item in request.get("input", []) if "role" in item]
    return models.count_tokens(MAIN, messages)


async def bench_tokens(url: str, llm: FakeLLM, turns: int) -> None:
    llm.reply = REPLY
    per_mode: dict[str, list[int]] = {}
    for mode, model, channel in (("full", MAIN, "F"), ("delta", STATEFUL_MAIN, "D")):
        async with conversation(url, llm, GATEWAY_MODEL=model) as talk:
            talk.channel = channel
            llm.clear()
            for number in range(turns):
                await talk.say(line(number))
            models = Models.for_settings(talk.settings)
            per_mode[mode] = [sent_tokens(models, r) for r in talk.main_requests()]
    full, delta = per_mode["full"], per_mode["delta"]
    for turn in (1, 50, 100, 150, turns):
        if turn <= turns:
            print(
                f"tokens sent at turn {turn:>3}: full {full[turn - 1]:>6,}   "
                f"delta {delta[turn - 1]:>4,}"
            )
    print(f"tokens sent over {turns} turns: full {sum(full):,}   delta {sum(delta):,}")
    print(f"delta / full at turn {turns}: {delta[-1] / full[-1]:.1%} (target: at most 10%)")


async def main(budget: int, turns: int) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # litellm's own usage type for the Responses API warns on the fake's (valid) usage body.
    warnings.filterwarnings("ignore", "Pydantic serializer warnings", UserWarning)
    load_litellm()
    with FakeLLM() as llm:
        llm.set_model_behaviour(
            "openai/compress-model",
            reply=lambda body: (
                "- Alice: deploy 2.x failed (certificate); "
                "Bob: invoice open, remind Friday; decision: ship to beta."
            ),
        )
        async with redis_server() as url:
            memories = await bench_compile(url, llm, budget)
            await bench_tokens(url, llm, turns)
            for size in (100, 10_000):
                print(
                    f"Redis memory per session at {size:>6,} entries: "
                    f"{memories[size] / 1024:8.1f} KiB"
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=int, default=4000, help="GATEWAY_TOKEN_BUDGET")
    parser.add_argument("--turns", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.budget, args.turns))

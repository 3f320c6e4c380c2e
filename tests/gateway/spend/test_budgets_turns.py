"""Budgets through the real worker: warned once at 80%, refused at 100%, no overshoot."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from redis.asyncio import Redis

from gateway.models import Charge, ModelCall, Usage
from gateway.spend.budgets import spend_keys
from gateway.spend.usage import UsageLedger
from gateway.worker import GIVE_UP_TEXT
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import start_workers, texts
from tests.support.helpers import inbound

ALICE = Charge("test:W:C1", "U1", "turn")
USED_UP = "⚠️ Your daily budget (1,000 tokens) is used up; it resets at 00:00 UTC."
WARNED = "⚠️ Your daily budget (1,000 tokens) is 80% used; it resets at 00:00 UTC."


async def use(redis: Redis, tokens: int) -> None:
    """Tokens already used today by Alice."""
    await UsageLedger(redis).record(ModelCall("m", [], 1.0, charge=ALICE), Usage(tokens, 0))


@pytest.mark.parametrize(("used", "told"), [(790, False), (800, True)])
async def test_a_turn_past_80_percent_tells_the_asker_once(
    redis_url: str, llm: FakeLLM, used: int, told: bool
) -> None:
    async with start_workers(redis_url, llm, 1, GATEWAY_BUDGET_USER_DAILY="1000tokens") as h:
        await use(h.sessions.redis, used)
        message = inbound("first")
        await h.ingest.receive(message)
        await h.idle(message.session_key)
        assert texts(h.sender).count(WARNED) == (1 if told else 0)
        second = inbound("second")
        await h.ingest.receive(second)
        await h.idle(second.session_key)
        if told:
            assert texts(h.sender).count(WARNED) == 1  # told once
        assert len(llm.requests) == 2  # both answered


async def test_a_used_up_budget_refuses_turns_and_side_questions_without_a_call(
    redis_url: str, llm: FakeLLM
) -> None:
    values = {"GATEWAY_BUDGET_USER_DAILY": "1000tokens", "GATEWAY_ALLOWED_USERS": "test:U1,test:U2"}
    async with start_workers(redis_url, llm, 1, **values) as h:
        await use(h.sessions.redis, 1000)
        message = inbound("hello")
        await h.ingest.receive(message)
        await h.idle(message.session_key)
        await h.ingest.receive(inbound("/btw what now?"))
        await h.idle(message.session_key)
        sent = texts(h.sender)
        assert sent[0] == USED_UP
        assert sent[1].endswith(f"\n\n{USED_UP}")  # the side answer's place, under its opening
        assert llm.requests == []
        meta = await h.sessions.meta(message.session_key)
        assert meta["answered"] == "1"  # answered by the refusal, not left pending
        other = inbound("hello", user="U2", channel="C2")  # Bob's budget is his own
        await h.ingest.receive(other)
        await h.idle(other.session_key)
        assert len(llm.requests) == 1


async def test_two_workers_racing_turns_overshoot_no_more_than_turns_in_flight(
    redis_url: str, llm: FakeLLM
) -> None:
    cap = 600
    values = {
        "GATEWAY_BUDGET_USER_DAILY": f"{cap}tokens",
        "GATEWAY_MAX_TOKENS": 20,
        "GATEWAY_LEASE_TTL": 10.0,  # no turn is run twice on a busy machine
        "GATEWAY_ALLOWED_USERS": "test:U1",
    }
    async with start_workers(redis_url, llm, 2, **values) as h:
        llm.reply = "a short answer"
        llm.duration = 0.2  # every turn is in flight while the others are checked
        messages = [inbound(f"question number {i}", channel=f"R{i}") for i in range(20)]
        await asyncio.gather(*(h.ingest.receive(m) for m in messages))
        await asyncio.gather(*(h.idle(m.session_key) for m in messages))
        refused = [t for t in texts(h.sender) if "is used up" in t]
        answered = texts(h.sender).count("a short answer")
        assert answered + len(refused) == 20
        assert answered >= 1 and refused
        user_day = spend_keys(ALICE, dt.datetime.now(dt.UTC))[0]
        spend = await h.sessions.redis.hgetall(user_day)
        used = int(spend["tokens"])
        largest = max(len(str(r["messages"])) // 4 + 20 for r in llm.requests)
        assert used < cap + largest  # past the cap by at most the last turn let in
        assert float(spend["held_tokens"]) == 0  # every hold let go of


async def test_a_budget_check_redis_refuses_calls_no_model_and_says_so_once(
    redis_url: str, llm: FakeLLM
) -> None:
    """The user's spend key is damaged (not a hash): every check fails in Redis, so no
    model is called unchecked; the job is tried on each delivery, then given up with one
    apology, and the session is not left owing an answer."""
    values = {"GATEWAY_BUDGET_USER_DAILY": "1000tokens", "GATEWAY_ALLOWED_USERS": "test:U1"}
    async with start_workers(redis_url, llm, 1, **values) as h:
        user_day = spend_keys(ALICE, dt.datetime.now(dt.UTC))[0]
        await h.sessions.redis.set(user_day, "not a hash")
        message = inbound("hello")
        await h.ingest.receive(message)
        await h.idle(message.session_key, timeout=60)
        assert texts(h.sender) == [GIVE_UP_TEXT]
        assert llm.requests == []

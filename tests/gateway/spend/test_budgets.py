"""Budgets: the check-and-hold script against a real Redis, and the settings' amounts."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from redis.asyncio import Redis

from gateway.errors import BudgetExceeded, ConfigError
from gateway.models import Charge, ModelCall, Usage
from gateway.settings.env import load_settings
from gateway.settings.values import Budget
from gateway.spend.budgets import Budgets, Hold, spend_keys
from gateway.spend.usage import UsageLedger

NOW = dt.datetime(2026, 3, 14, 15, 0, tzinfo=dt.UTC)
ALICE = Charge("slack:T1:C1", "U1", "turn")


def budgets(redis: Redis, **slots: Budget) -> Budgets:
    names = ("user_daily", "user_monthly", "workspace_daily", "workspace_monthly")
    return Budgets(redis, [slots.get(name) for name in names])


async def use(
    redis: Redis, tokens: int, usd: float | None = None, hold: Hold | None = None
) -> None:
    call = ModelCall("openai/gpt-4o-mini", [], 1.0, charge=ALICE, hold=hold)
    await UsageLedger(redis).record(call, Usage(tokens, 0, usd), NOW)


@pytest.mark.parametrize(("used", "warned"), [(79, False), (80, True), (99, True)])
async def test_a_budget_warns_once_from_80_percent(
    redis_client: Redis, used: int, warned: bool
) -> None:
    caps = budgets(redis_client, user_daily=Budget(100, "tokens"))
    await use(redis_client, used)
    first = await caps.hold(ALICE, 0, 0.0, NOW)
    second = await caps.hold(ALICE, 0, 0.0, NOW)
    if warned:
        assert (
            first.warning == "Your daily budget (100 tokens) is 80% used; it resets at 00:00 UTC."
        )
    else:
        assert first.warning is None
    assert second.warning is None  # told once


async def test_a_used_up_budget_refuses_with_which_and_when(redis_client: Redis) -> None:
    caps = budgets(
        redis_client, user_daily=Budget(1000, "tokens"), workspace_monthly=Budget(0.5, "usd")
    )
    await use(redis_client, 10, usd=0.5)
    with pytest.raises(BudgetExceeded) as refused:
        await caps.hold(ALICE, 5, 0.0, NOW)
    assert refused.value.user_text == (
        "This workspace's monthly budget ($0.50) is used up; it resets on 2026-04-01 at 00:00 UTC."
    )
    other_workspace = Charge("slack:T2:C1", "U1", "turn")
    await caps.hold(other_workspace, 5, 0.0, NOW)  # another workspace's budget is its own


async def test_holds_in_flight_count_and_are_let_go_of(redis_client: Redis) -> None:
    caps = budgets(redis_client, user_daily=Budget(1000, "tokens"))
    held = await asyncio.gather(
        *(caps.hold(ALICE, 100, 0.0, NOW) for _ in range(20)), return_exceptions=True
    )
    admitted = [h for h in held if not isinstance(h, BaseException)]
    assert len(admitted) == 10  # 20 at once against a cap of 10 holds: no overshoot
    assert all(isinstance(h, BudgetExceeded) for h in held if h not in admitted)
    await asyncio.gather(*(caps.release(h) for h in admitted))
    user_day = spend_keys(ALICE, NOW)[0]
    assert float(await redis_client.hget(user_day, "held_tokens") or 0) == 0
    assert await redis_client.ttl(user_day) > 0
    await caps.hold(ALICE, 100, 0.0, NOW)  # free again


async def test_the_calls_usage_write_settles_its_hold_and_no_other_does(
    redis_client: Redis,
) -> None:
    caps = budgets(redis_client, user_daily=Budget(1000, "tokens"))
    user_day = spend_keys(ALICE, NOW)[0]

    async def held() -> float:
        return float(await redis_client.hget(user_day, "held_tokens") or 0)

    hold = await caps.hold(ALICE, 100, 0.0, NOW)
    summary = ModelCall("m", [], 1.0, charge=Charge(ALICE.session_key, "", "compression"))
    await UsageLedger(redis_client).record(summary, Usage(5, 0, None), NOW)
    assert await held() == 100  # another call's use leaves the turn's hold alone
    await use(redis_client, 3)  # a call of the same user that does not carry the hold
    assert (await held(), hold.settled) == (100, False)
    # The turn's own call ends, carrying its hold: counted and settled at once.
    await use(redis_client, 40, hold=hold)
    assert (await held(), hold.settled) == (0, True)
    assert int(await redis_client.hget(user_day, "tokens") or 0) == 43
    await caps.release(hold)  # the turn's end: nothing left to let go of
    assert await held() == 0
    await use(redis_client, 10, hold=hold)  # a later call of the same turn settles nothing again
    assert await held() == 0


@pytest.mark.parametrize("first", ["usage write", "turn's end"])
async def test_a_hold_is_settled_once_whichever_comes_first(
    redis_client: Redis, first: str
) -> None:
    """The usage write runs beside the turn's end, in either order: one of them settles."""
    caps = budgets(redis_client, user_daily=Budget(1000, "tokens"))
    user_day = spend_keys(ALICE, NOW)[0]
    hold = await caps.hold(ALICE, 100, 0.0, NOW)
    steps = [use(redis_client, 40, hold=hold), caps.release(hold)]
    await asyncio.gather(*(steps if first == "usage write" else steps[::-1]))
    assert float(await redis_client.hget(user_day, "held_tokens") or 0) == 0
    assert int(await redis_client.hget(user_day, "tokens") or 0) == 40


async def test_a_new_day_starts_a_daily_budget_afresh(redis_client: Redis) -> None:
    caps = budgets(redis_client, user_daily=Budget(10, "tokens"))
    await use(redis_client, 10)
    with pytest.raises(BudgetExceeded):
        await caps.hold(ALICE, 1, 0.0, NOW)
    await caps.hold(ALICE, 1, 0.0, NOW + dt.timedelta(days=1))


@pytest.mark.parametrize("value", ["2", "usd", "-1usd", "0tokens", "2 euros"])
def test_a_bad_budget_is_one_line_naming_it(value: str) -> None:
    with pytest.raises(ConfigError, match="GATEWAY_BUDGET_USER_DAILY"):
        load_settings(_env_file=None, GATEWAY_BUDGET_USER_DAILY=value)


def test_budgets_are_read_from_the_settings(redis_client: Redis) -> None:
    settings = load_settings(
        _env_file=None,
        GATEWAY_BUDGET_USER_DAILY="2USD",
        GATEWAY_BUDGET_WORKSPACE_MONTHLY=" 500000tokens",
    )
    caps = Budgets.of(redis_client, settings)
    assert caps is not None
    assert caps.budgets == (Budget(2, "usd"), None, None, Budget(500000, "tokens"))
    assert Budgets.of(redis_client, load_settings(_env_file=None)) is None
